"""A Hugging Face Hub on loopback, speaking the endpoints huggingface_hub really calls.

- `GET /api/models/{repo}[/revision/{rev}]`     model info: sha, gated, siblings (+ sizes, LFS sha256
                                                with ?blobs)
- `GET /api/models/{repo}/tree/{rev}[/{path}]`  the tree listing: type, path, size, oid, lfs {oid, size}
- `HEAD|GET /{repo}/resolve/{rev}/{path}`       small files: 200 with ETag and X-Repo-Commit;
                                                LFS files: 302 to /cdn/<sha256> with X-Linked-Etag and
                                                X-Linked-Size
- `HEAD|GET /cdn/{sha256}`                      the bytes, honouring Range (206 + Content-Range)

Errors carry X-Error-Code as the real hub's do (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound),
because huggingface_hub maps them to its exception types by that header.

Faults, set per test on `hub.faults`: drop the connection after N body bytes, throttle, flip a byte,
answer a fixed status on paths that match a substring, or redirect them to themselves forever; and a
body that lies about the size the listing declares: without end, announced longer (or shorter),
stalled after N bytes, or trickled a byte at a time.
Hostile repos (`hostile()`): a commit sha, file names or object ids that are paths out of the cache.
Every request is logged in `hub.log`, with the start of its Range, so tests can prove where a resumed
download began.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

CHUNK = 64 * 1024


@functools.lru_cache(maxsize=None)
def _digests(path: Path) -> tuple[int, str, str]:
    """Size, sha256 and git blob sha1 of a fixture file, hashed once per session however many repos use it."""
    size = path.stat().st_size
    sha = hashlib.sha256()
    git = hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            sha.update(chunk)
            git.update(chunk)
    return size, sha.hexdigest(), git.hexdigest()


@dataclass
class FakeFile:
    name: str
    path: Path  # where the bytes are (big fixtures are streamed from disk, never held in memory)
    lfs: bool
    size: int = 0
    sha256: str = ""
    oid: str = ""  # git blob id; for an LFS file, the id of its pointer file

    @classmethod
    def from_path(cls, name: str, path: Path, lfs: bool | None = None) -> FakeFile:
        size, sha256, git_sha1 = _digests(path)
        lfs = size > 10_000 or name.endswith((".gguf", ".safetensors")) if lfs is None else lfs
        f = cls(name=name, path=path, lfs=lfs, size=size, sha256=sha256)
        if lfs:
            pointer = (
                f"version https://git-lfs.github.com/spec/v1\noid sha256:{f.sha256}\nsize {size}\n".encode()
            )
            f.oid = hashlib.sha1(f"blob {len(pointer)}\0".encode() + pointer).hexdigest()
        else:
            f.oid = git_sha1
        return f

    @property
    def etag(self) -> str:
        return self.sha256 if self.lfs else self.oid


@dataclass
class FakeRepo:
    repo_id: str
    files: dict[str, FakeFile]
    sha: str = ""
    branches: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    allowed_tokens: set[str] = field(default_factory=set)  # tokens that were granted access to a gated repo

    def __post_init__(self) -> None:
        if not self.sha:
            self.sha = hashlib.sha1(
                self.repo_id.encode() + b"".join(f.sha256.encode() for f in self.files.values())
            ).hexdigest()
        self.branches.setdefault("main", self.sha)

    def commit_for(self, rev: str) -> str | None:
        if rev in self.branches:
            return self.branches[rev]
        return rev if rev == self.sha else None


def hostile(
    repo: FakeRepo,
    *,
    sha: str | None = None,
    names: dict[str, str] | None = None,
    sha256s: dict[str, str] | None = None,
    oids: dict[str, str] | None = None,
    sizes: dict[str, object] | None = None,
) -> FakeRepo:
    """A copy of `repo` as a malicious hub would describe it: a commit sha, file names, LFS oids or git
    ids replaced by any text (a traversal, an absolute path), sizes by any JSON value. The bytes served
    stay the real ones."""
    files = {}
    for name, f in repo.files.items():
        new = FakeFile(
            name=(names or {}).get(name, name),
            path=f.path,
            lfs=f.lfs,
            size=f.size,
            sha256=(sha256s or {}).get(name, f.sha256),
            oid=(oids or {}).get(name, f.oid),
        )
        new.size = (sizes or {}).get(name, f.size)  # type: ignore[assignment]  # any JSON value
        files[new.name] = new
    return FakeRepo(repo.repo_id, files, sha=sha or repo.sha)


@dataclass
class Faults:
    drop_after: int | None = None  # close the connection after this many body bytes...
    drop_times: int = 1  # ...this many times
    throttle_bps: int | None = None  # bytes per second for file bodies
    corrupt_at: int | None = None  # flip the byte at this offset of every file body served
    status: dict[str, int] = field(default_factory=dict)  # path substring -> status to answer instead
    redirect_loop: str | None = None  # paths with this substring answer 302 to themselves, forever
    # Hubs that lie about a file body (the listing still declares the real size):
    endless: bool = False  # no Content-Length, and zeros after the file's bytes until the client leaves
    advertise: int | None = None  # this Content-Length, and as many bytes (zeros past the file's end)
    stall_after: int | None = None  # send this many body bytes, then nothing until the client leaves
    trickle_s: float | None = None  # one byte every this many seconds


@dataclass
class Logged:
    method: str
    path: str
    status: int  # 0 while the answer is being sent
    range_start: int | None
    authorization: str | None


class FakeHub:
    def __init__(self, repos: list[FakeRepo]) -> None:
        self.repos = {r.repo_id.lower(): r for r in repos}
        self.by_sha256 = {f.sha256: f for r in repos for f in r.files.values()}
        self.faults = Faults()
        self.log: list[Logged] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self.server.daemon_threads = True
        # A client that hangs up mid-body (a killed pull) is a normal event here, not a traceback.
        self.server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.closed = threading.Event()  # ends the bodies that would never end

    def add(self, repo: FakeRepo) -> None:
        self.repos[repo.repo_id.lower()] = repo
        self.by_sha256.update({f.sha256: f for f in repo.files.values()})

    def __enter__(self) -> FakeHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()

    def record(self, entry: Logged) -> None:
        with self._lock:
            self.log.append(entry)

    def requests(self, method: str | None = None, contains: str = "") -> list[Logged]:
        with self._lock:
            return [e for e in self.log if (method is None or e.method == method) and contains in e.path]

    def take_drop(self) -> int | None:
        with self._lock:
            if self.faults.drop_after is None or self.faults.drop_times <= 0:
                return None
            self.faults.drop_times -= 1
            return self.faults.drop_after


RANGE_RE = re.compile(r"bytes=(\d+)-(\d*)")


def _make_handler(hub: FakeHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # the test log is `hub.log`
            pass

        # -- plumbing ---------------------------------------------------------------------------
        def _send(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
            self._status = status
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, data: object, headers: dict[str, str] | None = None) -> None:
            self._send(
                200, {"Content-Type": "application/json", **(headers or {})}, json.dumps(data).encode()
            )

        def _error(self, status: int, code: str | None, message: str) -> None:
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._send(status, headers, json.dumps({"error": message}).encode())

        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def _route(self) -> None:
            self._status = 0
            url = urlparse(self.path)
            path = unquote(url.path)
            m = RANGE_RE.match(self.headers.get("Range", ""))
            # Logged on arrival, so a test sees a request whose body is still streaming (or never ends).
            entry = Logged(
                self.command, path, 0, int(m.group(1)) if m else None, self.headers.get("Authorization")
            )
            hub.record(entry)
            try:
                forced = next((s for sub, s in hub.faults.status.items() if sub in path), None)
                loop = hub.faults.redirect_loop
                if loop is not None and loop in path:
                    self._send(302, {"Location": f"{hub.url}{self.path}"})
                elif forced is not None:
                    code = {401: "RepoNotFound", 404: "RepoNotFound"}.get(forced)
                    self._error(forced, code, f"forced {forced}")
                elif path.startswith("/api/models/"):
                    self._api(path[len("/api/models/") :], parse_qs(url.query))
                elif path.startswith("/cdn/"):
                    self._cdn(path[len("/cdn/") :])
                elif "/resolve/" in path:
                    self._resolve(path.lstrip("/"))
                else:
                    self._error(404, None, "not found")
            finally:
                entry.status = self._status

        def _repo(self, repo_id: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id.lower())
            if repo is None:
                # What huggingface.co answers for a repo that does not exist (or that you may not see).
                self._error(401, "RepoNotFound", "Repository not found")
            return repo

        def _token(self) -> str | None:
            auth = self.headers.get("Authorization", "")
            return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None

        # -- /api/models/... ----------------------------------------------------------------------
        def _api(self, rest: str, query: dict[str, list[str]]) -> None:
            parts = rest.split("/")
            repo = self._repo("/".join(parts[:2]))
            if repo is None:
                return
            tail = parts[2:]
            rev = "main"
            if tail[:1] == ["revision"]:
                rev, tail = tail[1], tail[2:]
            elif tail[:1] == ["tree"]:
                rev, tail = tail[1], tail[2:]
                return self._tree(repo, rev, "/".join(tail), query)
            sha = repo.commit_for(rev)
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for f in repo.files.values():
                s: dict[str, object] = {"rfilename": f.name}
                if blobs:
                    s.update(size=f.size, blobId=f.oid)
                    if f.lfs:
                        s["lfs"] = {"sha256": f.sha256, "size": f.size, "pointerSize": 134}
                siblings.append(s)
            self._json(
                {
                    "_id": "x",
                    "id": repo.repo_id,
                    "modelId": repo.repo_id,
                    "sha": sha,
                    "private": False,
                    "gated": "manual" if repo.gated else False,
                    "disabled": False,
                    "tags": [],
                    "siblings": siblings,
                }
            )

        def _tree(self, repo: FakeRepo, rev: str, under: str, query: dict[str, list[str]]) -> None:
            sha = repo.commit_for(rev)
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            prefix = f"{under}/" if under else ""
            entries, dirs = [], set()
            for f in repo.files.values():
                if not f.name.startswith(prefix):
                    continue
                rel = f.name[len(prefix) :]
                if "/" in rel:
                    top = prefix + rel.split("/")[0]
                    if top not in dirs:
                        dirs.add(top)
                        entries.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": top})
                    if not recursive:
                        continue
                e: dict[str, object] = {"type": "file", "oid": f.oid, "size": f.size, "path": f.name}
                if f.lfs:
                    e["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
                entries.append(e)
            self._json(entries)

        # -- /{repo}/resolve/{rev}/{file} ---------------------------------------------------------
        def _resolve(self, rest: str) -> None:
            repo_part, _, tail = rest.partition("/resolve/")
            repo = self._repo(repo_part)
            if repo is None:
                return
            rev, _, name = tail.partition("/")
            sha = repo.commit_for(rev)
            if sha is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            if repo.gated and self._token() not in repo.allowed_tokens:
                status = 403 if self._token() else 401
                return self._error(
                    status,
                    "GatedRepo",
                    f"Access to model {repo.repo_id} is restricted. "
                    "You must have access to it and be authenticated to access it. Please log in.",
                )
            f = repo.files.get(name)
            if f is None:
                return self._send(
                    404,
                    {
                        "X-Error-Code": "EntryNotFound",
                        "X-Repo-Commit": sha,
                        "X-Error-Message": "Entry not found",
                    },
                )
            common = {"X-Repo-Commit": sha, "ETag": f'"{f.etag}"', "Accept-Ranges": "bytes"}
            if f.lfs:
                # As huggingface.co does: LFS content lives elsewhere (a CDN); the Hub redirects there.
                self._send(
                    302,
                    {
                        **common,
                        "Location": f"{hub.url}/cdn/{f.sha256}",
                        "X-Linked-Etag": f'"{f.sha256}"',
                        "X-Linked-Size": str(f.size),
                    },
                )
            else:
                self._file(f, common)

        def _cdn(self, sha256: str) -> None:
            f = hub.by_sha256.get(sha256)
            if f is None:
                return self._error(404, None, "no such object")
            self._file(f, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

        def _file(self, f: FakeFile, headers: dict[str, str]) -> None:
            start, end = 0, f.size - 1
            m = RANGE_RE.match(self.headers.get("Range", ""))
            status = 200
            if m:
                start = int(m.group(1))
                end = min(int(m.group(2)), f.size - 1) if m.group(2) else f.size - 1
                if start >= f.size:
                    return self._send(416, {"Content-Range": f"bytes */{f.size}"})
                status = 206
                headers = {**headers, "Content-Range": f"bytes {start}-{end}/{f.size}"}
            self._status = status
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            faults = hub.faults
            lying = faults.endless or faults.advertise is not None
            if faults.advertise is not None:
                end = start + faults.advertise - 1
            if faults.endless:
                self.close_connection = True  # the body ends when the connection does
            else:
                self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            if self.command == "HEAD":
                return
            if lying or faults.stall_after is not None or faults.trickle_s is not None:
                return self._lie(f, start, end)
            drop = hub.take_drop()
            sent = 0
            with open(f.path, "rb") as fh:
                fh.seek(start)
                pos = start
                while pos <= end:
                    chunk = bytearray(fh.read(min(CHUNK, end - pos + 1)))
                    if faults.corrupt_at is not None and pos <= faults.corrupt_at < pos + len(chunk):
                        chunk[faults.corrupt_at - pos] ^= 0xFF
                    if drop is not None and sent + len(chunk) > drop:
                        self.wfile.write(chunk[: drop - sent])
                        self.wfile.flush()
                        # Gone mid-body, as a flaky network or a restarted proxy would leave it.
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    pos += len(chunk)
                    if faults.throttle_bps:
                        time.sleep(len(chunk) / faults.throttle_bps)

        def _lie(self, f: FakeFile, start: int, end: int) -> None:
            """The body of a hub that lies: the file's bytes then zeros (to `end`, or forever), one byte
            at a time when trickling, nothing more after `stall_after`; until the client leaves."""
            faults = hub.faults
            data = f.path.read_bytes()[start:]
            pos, sent = start, 0
            try:
                while (faults.endless or pos <= end) and not hub.closed.is_set():
                    if faults.stall_after is not None and sent >= faults.stall_after:
                        hub.closed.wait(0.1)
                        continue
                    step = 1 if faults.trickle_s is not None else CHUNK
                    if faults.stall_after is not None:
                        step = min(step, faults.stall_after - sent)
                    if not faults.endless:
                        step = min(step, end - pos + 1)
                    chunk = data[sent : sent + step]
                    chunk += bytes(step - len(chunk))
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += step
                    pos += step
                    if faults.trickle_s is not None:
                        hub.closed.wait(faults.trickle_s)
            except OSError:  # the client left: what a lying hub's body ends on
                self.close_connection = True

    return Handler


def one_file_repo(repo_id: str, name: str, size: int, folder: Path) -> FakeRepo:
    """A repo of one LFS file of `size` random bytes (GGUF's magic first): what a lying hub declares
    before it misbehaves, when the test never needs a model that loads."""
    path = folder / name
    path.write_bytes(b"GGUF" + os.urandom(size - 4))
    return FakeRepo(repo_id, {name: FakeFile.from_path(name, path, lfs=True)})
