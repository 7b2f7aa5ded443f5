"""A prefix cache on disk: the KV state of a prompt's stable start, reused by a later process.

An entry is one file under `<store>/cache`:

    magic "LLMCLIKV" · u32 format version · u32 header length · header (JSON) ·
    u64 state length · state (llama_state_seq_get_data of sequence 0) · u32 CRC-32 of all before it

The header names the key (what makes a KV state valid: the model file's identity, the llama.cpp
version, the context and cache parameters), the token ids the state holds, and when it was made.
A file is written to a temporary name in the same folder and renamed, so a reader (or a second
writer of the same entry) sees a whole entry or none. The size and the checksum are checked before
llama.cpp is given a byte: a truncated or damaged file is a `CorruptEntry`, never a crash.

Which entries are kept: the most recently used, up to `max_bytes` in total (LRU by mtime, touched on
use); an entry whose tokens start a newly written one is superseded and deleted.

Library code: no printing, no environment; the caller passes the root and the cap.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from llmcli.fsutil import write_atomic

MAGIC = b"LLMCLIKV"
FORMAT_VERSION = 1
SUFFIX = ".kv"
MIN_TOKENS = 32  # a shorter prefix costs less to prefill than to find, read and check
MAX_HEADER = 32 * 2**20  # a header holds token ids as JSON: a million tokens fit well within this
MAX_TOKEN_ID = 2**31 - 1
IDENTITY_SPAN = 2**20  # model identity: its size and the hash of its first and last MiB
_PREFIX = struct.Struct("<8sII")  # magic, version, header length
_STATE_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
TEMP_PREFIX = ".tmp-"
STALE_TEMP_S = 3600  # a temporary file this old belongs to a writer that died; swept at the next write


class CorruptEntry(Exception):
    """An entry file that is truncated, damaged or not an entry at all.

    `seen` is the file as it was read (its os.stat_result) when its bytes prove it can never be a
    valid entry: a remover checks the path still names that file, not one a writer renamed onto it
    since. None when the file could not be read (its bytes proved nothing).
    """

    seen: os.stat_result | None = None


def model_identity(path: str | Path) -> str:
    """What distinguishes one model file from another, without reading all of it: its size and the
    SHA-256 of its first and last MiB (a GGUF's header, metadata and vocabulary come first). Not its
    path: a moved file keeps its entries, and another file at the same path does not inherit them."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        digest.update(str(size).encode() + b"\0")
        digest.update(fh.read(IDENTITY_SPAN))
        if size > IDENTITY_SPAN:
            fh.seek(max(IDENTITY_SPAN, size - IDENTITY_SPAN))
            digest.update(fh.read(IDENTITY_SPAN))
    return f"{size}:{digest.hexdigest()}"


@dataclass(frozen=True)
class CacheKey:
    """Everything that changes the bytes of a KV state for the same tokens.

    n_threads is not here: the prefill's KV state is byte-identical at 1 and 2 threads (measured).
    n_batch is: the state differs between 256 and 512 (measured), as does flash attention.
    """

    model: str  # model_identity()
    llama_cpp: str  # llama_cpp.__version__: the llama.cpp vendored in it
    n_ctx: int
    n_batch: int
    n_ubatch: int
    flash_attn: int  # llama.cpp's flash_attn_type
    type_k: int  # ggml types of the KV cache
    type_v: int

    @property
    def id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class EntryInfo:
    """An entry as its header describes it (the state itself is read only to load it)."""

    path: Path
    key_id: str
    key: dict
    model_name: str  # what to show for the model (`llmcli cache`)
    tokens: list[int]
    created: str
    size: int  # bytes on disk
    last_used: float  # mtime: touched on every use
    state_offset: int = 0
    state_size: int = 0


def entry_name(key_id: str, tokens: list[int]) -> str:
    """One file name per (key, tokens): two writers of the same entry replace each other, whole."""
    digest = hashlib.sha256(struct.pack(f"<{len(tokens)}i", *tokens)).hexdigest()[:24]
    return f"{key_id[:32]}-{digest}{SUFFIX}"


def encode_header(key: CacheKey, model_name: str, tokens: list[int]) -> bytes:
    header = {
        "key_id": key.id,
        "key": asdict(key),
        "model_name": model_name,
        "tokens": tokens,
        "n_tokens": len(tokens),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return json.dumps(header, separators=(",", ":")).encode()


# header field -> (accepts, what it must be)
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


HEADER_FIELDS = {
    "key_id": lambda v: isinstance(v, str) and len(v) == 32 and all(c in "0123456789abcdef" for c in v),
    "key": lambda v: (
        isinstance(v, dict) and all(isinstance(x, str | int) and not isinstance(x, bool) for x in v.values())
    ),
    "model_name": lambda v: isinstance(v, str) and len(v) <= 4096,
    "tokens": lambda v: isinstance(v, list) and all(_is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in v),
    "n_tokens": _is_int,
    "created": lambda v: isinstance(v, str) and len(v) <= 64,
}


def parse_header(head: bytes, file_size: int, path: Path = Path("?")) -> EntryInfo:
    """The header of an entry from the file's first bytes (at least up to the state length).

    Raises CorruptEntry for anything that is not a whole, well-formed header of this format.
    """
    if len(head) < _PREFIX.size:
        raise CorruptEntry("shorter than an entry's header")
    magic, version, header_len = _PREFIX.unpack_from(head)
    if magic != MAGIC:
        raise CorruptEntry("not a prefix-cache entry")
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"format version {version}, not {FORMAT_VERSION}")
    if header_len > MAX_HEADER:
        raise CorruptEntry(f"a header of {header_len} bytes")
    state_at = _PREFIX.size + header_len + _STATE_LEN.size
    if len(head) < state_at:
        raise CorruptEntry("truncated in its header")
    try:
        header = json.loads(head[_PREFIX.size : _PREFIX.size + header_len].decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CorruptEntry("a header that is not JSON") from exc
    if not isinstance(header, dict):
        raise CorruptEntry("a header that is not an object")
    for name, accepts in HEADER_FIELDS.items():
        if name not in header or not accepts(header[name]):
            raise CorruptEntry(f"a bad '{name}' in its header")
    if header["n_tokens"] != len(header["tokens"]):
        raise CorruptEntry("a token count that disagrees with its tokens")
    (state_size,) = _STATE_LEN.unpack_from(head, state_at - _STATE_LEN.size)
    if state_at + state_size + _CRC.size != file_size:
        raise CorruptEntry(f"{file_size} bytes where its header promises {state_at + state_size + _CRC.size}")
    return EntryInfo(
        path=path,
        key_id=header["key_id"],
        key=header["key"],
        model_name=header["model_name"],
        tokens=header["tokens"],
        created=header["created"],
        size=file_size,
        last_used=0.0,
        state_offset=state_at,
        state_size=state_size,
    )


def parse_entry(data: bytes | bytearray, path: Path = Path("?")) -> tuple[EntryInfo, memoryview]:
    """A whole entry file -> its header and a view of its state, checksum verified."""
    header_len = _PREFIX.unpack_from(data)[2] if len(data) >= _PREFIX.size else 0
    info = parse_header(
        bytes(data[: _PREFIX.size + min(header_len, MAX_HEADER) + _STATE_LEN.size]), len(data), path
    )
    body = memoryview(data)[: len(data) - _CRC.size]
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise CorruptEntry("damaged (its checksum does not match)")
    return info, memoryview(data)[info.state_offset : info.state_offset + info.state_size]


def encode_entry(header: bytes, state: bytes | bytearray | memoryview) -> Iterator[bytes | memoryview]:
    """The pieces of an entry file, in order, the checksum last (streamed: the state is not copied)."""
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header + _STATE_LEN.pack(len(state))
    crc = zlib.crc32(state, zlib.crc32(prefix))
    yield prefix
    yield memoryview(state)
    yield _CRC.pack(crc)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Match:
    entry: EntryInfo
    length: int  # tokens shared with the prompt


@dataclass
class Cleared:
    entries: int = 0  # whole entries
    damaged: int = 0  # *.kv files that are not (truncated, damaged, not entries at all)
    bytes: int = 0  # of both, and of dead temporary files


@dataclass
class PrefixCache:
    root: Path
    max_bytes: int
    skipped: list[Path] = field(default_factory=list)  # damaged files met while listing, left in place
    removed: list[Path] = field(default_factory=list)  # damaged files met while listing, deleted

    # -- reading -----------------------------------------------------------------------------
    def _files(self) -> list[Path]:
        try:
            return sorted(
                p
                for p in self.root.iterdir()
                if p.name.endswith(SUFFIX)
                and not p.name.startswith(TEMP_PREFIX)  # a writer's, not yet whole
                and p.is_file()
                and not p.is_symlink()
            )
        except FileNotFoundError:
            return []

    def read_info(self, path: Path) -> EntryInfo:
        """An entry's header (CorruptEntry if it has none); the state is not read."""
        try:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                head = fh.read(_PREFIX.size)
                if len(head) == _PREFIX.size and head[: len(MAGIC)] == MAGIC:
                    (_, _, header_len) = _PREFIX.unpack(head)
                    head += fh.read(min(header_len, MAX_HEADER) + _STATE_LEN.size)
        except OSError as exc:
            raise CorruptEntry(f"unreadable ({exc.strerror})") from exc
        try:
            info = parse_header(head, st.st_size, path)
        except CorruptEntry as exc:
            exc.seen = st  # whole files only reach this name (temp + rename): these bytes never become valid
            raise
        info.last_used = st.st_mtime
        return info

    def entries(self, key_id: str | None = None, remove_damaged: bool = False) -> list[EntryInfo]:
        """Every readable entry (of one key, when given: its file names start with the key's id).

        A file that can never be an entry is deleted when `remove_damaged` (a session's reads and
        writes), else left for `llmcli cache clear` (listing only looks)."""
        found = []
        self.skipped, self.removed = [], []
        for path in self._files():
            if key_id is not None and not path.name.startswith(key_id[:32] + "-"):
                continue
            try:
                found.append(self.read_info(path))
            except CorruptEntry as exc:
                removed = remove_damaged and exc.seen is not None and self.remove(path, exc.seen)
                (self.removed if removed else self.skipped).append(path)
        return found

    def best(self, key_id: str, tokens: list[int], remove_damaged: bool = False) -> Match | None:
        """The entry of this key that shares the longest prefix with `tokens`."""
        best: Match | None = None
        for info in self.entries(key_id, remove_damaged):
            if info.key_id != key_id:
                continue
            n = common_prefix(info.tokens, tokens)
            if best is None or n > best.length:
                best = Match(info, n)
        return best

    def load(self, info: EntryInfo) -> tuple[EntryInfo, memoryview]:
        """The entry's header and state, verified; CorruptEntry if the file changed or is damaged."""
        try:
            with open(info.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                data = bytearray(size)
                if fh.readinto(data) != size:
                    raise CorruptEntry("shorter than it was a moment ago")
        except OSError as exc:
            raise CorruptEntry(f"unreadable ({exc.strerror})") from exc
        loaded, state = parse_entry(data, info.path)
        if loaded.key_id != info.key_id or loaded.tokens != info.tokens:
            raise CorruptEntry("replaced while it was being read")
        self.touch(info.path)
        return loaded, state

    @staticmethod
    def touch(path: Path) -> None:
        try:
            os.utime(path)
        except OSError:
            pass  # a read-only cache still serves; its order just does not learn

    # -- writing -----------------------------------------------------------------------------
    def write(
        self,
        key: CacheKey,
        model_name: str,
        tokens: list[int],
        state: bytes | bytearray | memoryview,
    ) -> Path | None:
        """Write one entry (temp file + rename), supersede its prefixes, evict down to the cap.

        None when the entry alone is larger than the cap. OSError (disk full...) propagates after
        the temporary file is removed: nothing half-written remains.
        """
        header = encode_header(key, model_name, tokens)
        total = _PREFIX.size + len(header) + _STATE_LEN.size + len(state) + _CRC.size
        if total > self.max_bytes:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / entry_name(key.id, tokens)
        write_atomic(target, encode_entry(header, state), prefix=TEMP_PREFIX, suffix=SUFFIX, private=True)
        self._supersede(key.id, tokens, keep=target)
        self.evict(keep=target)
        return target

    def _supersede(self, key_id: str, tokens: list[int], keep: Path) -> None:
        for info in self.entries(key_id, remove_damaged=True):
            if (
                info.path != keep
                and len(info.tokens) < len(tokens)
                and tokens[: len(info.tokens)] == info.tokens
            ):
                info.path.unlink(missing_ok=True)

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Delete the least recently used entries until the total fits the cap; sweep dead temp files."""
        now = time.time()
        try:
            for p in self.root.iterdir():
                if p.name.startswith(TEMP_PREFIX) and now - p.lstat().st_mtime > STALE_TEMP_S:
                    p.unlink(missing_ok=True)
        except (FileNotFoundError, OSError):
            pass
        files = []
        for path in self._files():
            try:
                st = path.stat()
            except OSError:
                continue
            files.append((st.st_mtime, path, st.st_size))
        total = sum(size for _, _, size in files)
        evicted = []
        for _, path, size in sorted(files, key=lambda f: (f[0], str(f[1]))):
            if total <= self.max_bytes:
                break
            if path == keep:
                continue
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue  # a read-only cache: it still serves, over its cap
            total -= size
            evicted.append(path)
        return evicted

    def remove(self, path: Path, seen: os.stat_result | None = None) -> bool:
        """Delete one entry file (a damaged one): only a regular *.kv file directly in the root, not a
        writer's temporary file, and when `seen` is given only if the path still names that file."""
        if path.parent != self.root or not path.name.endswith(SUFFIX) or path.name.startswith(TEMP_PREFIX):
            return False
        try:
            now = path.lstat()
            if not stat.S_ISREG(now.st_mode):
                return False
            if seen is not None and (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
                return False  # a writer renamed a new entry onto this name since it was read
            path.unlink()
        except OSError:
            return False
        return True

    def clear(self) -> Cleared:
        """Delete every entry, damaged file and dead temporary file: only regular files named as ours,
        directly in the root. A live writer's temporary file is left to become its entry."""
        cleared = Cleared()
        try:
            paths = list(self.root.iterdir())
        except FileNotFoundError:
            return cleared
        now = time.time()
        for path in paths:
            temp = path.name.startswith(TEMP_PREFIX)
            if not (temp or path.name.endswith(SUFFIX)) or path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            if temp and now - path.stat().st_mtime <= STALE_TEMP_S:
                continue
            whole = False
            if not temp:
                try:
                    self.read_info(path)
                    whole = True
                except CorruptEntry:
                    pass
            path.unlink(missing_ok=True)
            cleared.bytes += size
            if not temp:
                cleared.entries += whole
                cleared.damaged += not whole
        return cleared


# -- a chat session's use of the cache ----------------------------------------------------------
def cache_key(runtime) -> CacheKey:
    """The key for states made by this runtime (an engine.runtime.Runtime)."""
    import llama_cpp

    params = runtime.kv_params
    return CacheKey(
        model=model_identity(runtime.path),
        llama_cpp=str(llama_cpp.__version__),
        n_ctx=runtime.n_ctx,
        n_batch=runtime.n_batch,
        n_ubatch=params["n_ubatch"],
        flash_attn=params["flash_attn"],
        type_k=params["type_k"],
        type_v=params["type_v"],
    )


@dataclass
class Restored:
    """What ② schedule got from the disk: tokens now in the KV cache, and a note when an entry failed."""

    reused: int  # 0 when nothing was loaded
    note: str | None = None


@dataclass
class Saved:
    """What saving a tip has to say: a warning (shown always) or a note (shown with --stats)."""

    warning: str | None = None
    note: str | None = None


@dataclass
class SessionCache:
    """One session's view of the cache: its key, the name to list its model under, whether to save."""

    cache: PrefixCache
    key: CacheKey
    model_name: str
    save: bool = True  # write conversation tips (False: only read)

    def restore(self, runtime, tokens: list[int], better_than: int, limit: int) -> Restored:
        """Load the entry sharing the longest prefix with `tokens` (at most `limit` of them) when it
        beats `better_than` tokens already in the KV cache. Any failure leaves the runtime cleared
        or untouched, and says why in one note."""
        if limit < MIN_TOKENS or limit <= better_than:
            return Restored(0)  # nothing the disk could add: not even a look
        try:
            match = self.cache.best(self.key.id, tokens, remove_damaged=True)
        except OSError as exc:
            return Restored(
                0, f"the prefix cache {self.cache.root} is unreadable ({exc.strerror}); prefilled in full"
            )
        note = (
            "; ".join(
                f"{verb} {n} damaged prefix-cache entr{'y' if n == 1 else 'ies'}"
                for verb, n in (("removed", len(self.cache.removed)), ("skipped", len(self.cache.skipped)))
                if n
            )
            or None
        )
        if match is None:
            return Restored(0, note)
        length = min(match.length, limit)
        if length < MIN_TOKENS or length <= better_than:
            return Restored(0, note)
        try:
            _, state = self.cache.load(match.entry)
        except CorruptEntry as exc:
            self.cache.remove(match.entry.path)
            return Restored(
                0,
                f"the prefix-cache entry {match.entry.path.name} is {exc}; removed it and prefilled in full",
            )
        if not runtime.load_state(state, match.entry.tokens):
            self.cache.remove(match.entry.path)
            return Restored(
                0,
                f"llama.cpp refused the prefix-cache entry {match.entry.path.name} "
                f"({runtime.last_log()}); removed it and prefilled in full",
            )
        return Restored(runtime.keep_prefix(length), note)

    def enforce_cap(self) -> None:
        """Evict down to the cap now (a session that writes calls this as it starts): a lowered
        LLMCLI_CACHE_MAX applies at the next run, whether or not that run saves an entry."""
        if self.save:
            self.cache.evict()

    def save_tip(self, runtime) -> Saved:
        """Write what the KV cache holds now as an entry; a warning (disk full...) instead of raising,
        and a note (shown with --stats) when the entry alone is larger than the cap."""
        tokens = list(runtime.kv_tokens)
        if not self.save or len(tokens) < MIN_TOKENS:
            return Saved()
        from llmcli.errors import RuntimeFailure
        from llmcli.units import format_bytes

        try:
            state = runtime.state_bytes()
            written = self.cache.write(self.key, self.model_name, tokens, state)
        except (OSError, RuntimeFailure) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            return Saved(
                warning=f"could not save the prompt cache in {self.cache.root} ({reason}); "
                "the reply is complete"
            )
        if written is None:
            return Saved(
                note=f"the prompt's KV state ({format_bytes(len(state))}) is larger than "
                f"LLMCLI_CACHE_MAX ({format_bytes(self.cache.max_bytes)}); not saved"
            )
        return Saved()
