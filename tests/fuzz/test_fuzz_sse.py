"""Hostile SSE, from a loopback server: `llmcli chat --endpoint URL "hi"` against mutated streams.

Each case is a seeded plan: a good stream (role chunk, text chunks, finish, usage, [DONE]) with
some of these done to it: comments, random line ends, garbage lines, chunks of the wrong shape,
invalid UTF-8, a huge line (within the 1 MiB bound or past it), the key echoed in errors and in
fields nobody reads, more text than max_tokens, no [DONE], an early close, a stall, an HTTP error
status, and always random write boundaries. The client must end every case with exit < 128, no
traceback, at most one line on stderr for an error, the key nowhere, and a stream kept to
max_tokens; a stream changed only in harmless ways must print exactly its text.

~40 cases per seed by default (well under a minute); LLMCLI_FUZZ_LONG=1 runs 400 (seeds:
tests/fuzz/__init__.py). The counts are printed (pytest -s): cases, clean errors, successes, failures.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Event, Thread

import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.support.cli import Hung, cli

KEY = "fz9Q-Wm4t-Hc7v-Rb2k-Nx5p"
CASES = cases(default=40, long=400)
FIXED_SEED = 20240614
HANG_GUARD_S = 30  # a case that takes longer hangs (not a speed test: a case ends in about a second)
WORDS = ["Hello", " world", " 中文", " 🙂", ".", "\n", " the", " end", "é", " a\tb", " <b>", " \\"]
TIMEOUT = 2  # --timeout of each run: a stalled case ends after this much silence
# Values of the wrong type or range, as JSON text (Python's json reads NaN and 1e400 as floats).
WEIRD = [
    "null",
    "0",
    "-1",
    "1.5",
    '"s"',
    "[]",
    "{}",
    "true",
    '[1, {"a": null}]',
    "NaN",
    "1e400",
    "1" + "0" * 30,
]
GARBAGE = [
    b"data: {",
    b'data: {"choices": [',
    b"retry: 100",
    b"id: 7",
    b"event: ",
    b"event: ping",
    b"nonsense",
    b"data",
    b"data:",
    b"\xff\xfe\x00garbage",
    b": " + b"c" * 5000,
    b"data: [DONE] no",
]


HARMLESS = ("key-in-unread-fields", "comments", "mixed-line-ends")  # changes after which the text is exact


@dataclass
class Case:
    index: int
    status: int = 200
    reason: str = "OK"
    writes: list[bytes] = field(default_factory=list)
    chunked: bool = True
    stall: bool = False  # keep the connection open after the last write
    max_tokens: int | None = None
    expected: str | None = None  # the exact stdout, when only harmless changes were made
    mutations: list[str] = field(default_factory=list)


def _chunk(content: str | None = None, finish: str | None = None, **extra) -> dict:
    delta = {"content": content} if content is not None else {"role": "assistant"}
    return {
        "id": "f",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }


def _mutate_shape(rng: random.Random, chunk: dict) -> str:
    """A chunk's JSON with one field set to something of the wrong type (as raw JSON text)."""
    raw = rng.choice(WEIRD)
    where = rng.choice(
        [
            "choices",
            "choice",
            "delta",
            "content",
            "finish",
            "usage",
            "usage.completion_tokens",
            "timings",
            "timings.prompt_ms",
            "whole",
        ]
    )
    marker = '"@@"'
    doc = json.loads(json.dumps(chunk))
    target = {
        "choices": (doc, "choices"),
        "choice": (doc["choices"], 0),
        "delta": (doc["choices"][0], "delta"),
        "content": (doc["choices"][0]["delta"], "content"),
        "finish": (doc["choices"][0], "finish_reason"),
        "usage": (doc, "usage"),
        "timings": (doc, "timings"),
    }
    if where == "whole":
        return raw
    if where == "usage.completion_tokens":
        doc["usage"] = {"completion_tokens": "@@"}
    elif where == "timings.prompt_ms":
        doc["timings"] = {"prompt_ms": "@@"}
    else:
        parent, key = target[where]
        parent[key] = "@@"
    return json.dumps(doc, ensure_ascii=False).replace(marker, raw)


def make_case(index: int, seed: int) -> Case:
    rng = random.Random(seed * 100_003 + index)
    case = Case(index)
    case.max_tokens = rng.choice([None, 1, 3, 8, 50])
    n_text = rng.randint(0, 25)
    texts = [rng.choice(WORDS) for _ in range(n_text)]
    harmful = False

    def did(name: str, p: float) -> bool:
        drawn = rng.random() < p
        # The first two cases are an HTTP error and a stream changed only in harmless ways, so that
        # every seed reaches both outcomes; the rest draw each change.
        if index == 0:
            drawn = name == "http-error"
        elif index == 1:
            drawn = drawn and name in HARMLESS
        if drawn:
            case.mutations.append(name)
            return True
        return False

    if did("http-error", 0.08):
        case.status = rng.choice([400, 401, 404, 429, 500, 503])
        case.reason = rng.choice(["Bad", f"Nope {KEY}", f"x\x1b[2J{KEY}"])
        body = rng.choice(
            [json.dumps({"error": {"message": "e" * rng.randint(0, 400) + KEY}}), KEY * 20, "[" * 5000, ""]
        )
        case.writes = [body.encode()]
        case.chunked = False
        return case

    events: list[str] = [json.dumps(_chunk(), ensure_ascii=False)]
    limit = case.max_tokens if case.max_tokens is not None else 10**9
    if not did("ignores-max-tokens", 0.2):
        texts = texts[:limit]
    events += [json.dumps(_chunk(t), ensure_ascii=False) for t in texts]
    events.append(json.dumps(_chunk(None, "length" if len(texts) >= limit else "stop"), ensure_ascii=False))
    usage = {"prompt_tokens": 5, "completion_tokens": len(texts), "total_tokens": 5 + len(texts)}
    last: dict = {"id": "f", "choices": [], "usage": usage}
    if did("key-in-unread-fields", 0.15):
        last.update(model=KEY, system_fingerprint=KEY, timings={"note": KEY, "prompt_ms": 1.0})
        usage["echo"] = KEY
    events.append(json.dumps(last, ensure_ascii=False))
    shown = texts[:limit]  # what a correct client prints
    lines: list[bytes] = []
    for data in events:
        lines += [b"data: " + data.encode("utf-8"), b""]

    if did("wrong-shape", 0.25):
        harmful = True
        at = rng.randrange(1, len(events))
        lines.insert(2 * at, b"data: " + _mutate_shape(rng, _chunk("x")).encode("utf-8"))
        lines.insert(2 * at + 1, b"")
    if did("garbage", 0.2):
        harmful = True
        for _ in range(rng.randint(1, 3)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(GARBAGE))
    if did("invalid-utf8", 0.08):
        harmful = True
        lines.insert(
            rng.randrange(len(lines) + 1), b'data: {"choices": [{"delta": {"content": "\xc3\x28\xff"}}]}'
        )
    if did("error-event", 0.1):
        harmful = True
        lines.insert(
            rng.randrange(len(lines) + 1),
            b"event: error\ndata: "
            + json.dumps({"error": {"message": "m" * rng.randint(0, 400) + KEY}}).encode()
            + b"\n",
        )
    if did("not-json-with-key", 0.08):
        harmful = True
        lines.insert(rng.randrange(len(lines) + 1), ("data: " + "z" * rng.randint(0, 90) + KEY).encode())
    if did("huge-line", 0.1):
        harmful = True
        size = rng.choice([200_000, 1_000_000, 1_200_000])
        lines.insert(2, b'data: {"choices": [{"delta": {"content": "' + b"h" * size + b'"}}]}')
        lines.insert(3, b"")
    if did("comments", 0.3):
        for _ in range(rng.randint(1, 10)):
            lines.insert(rng.randrange(len(lines) + 1), rng.choice([b":", b": ping", b":" + b"k" * 300]))
    if not did("no-done", 0.15):
        lines += [b"data: [DONE]", b""]
    else:
        harmful = True
    ends = [b"\n", b"\r\n", b"\r"]
    mixed = did("mixed-line-ends", 0.3)
    fixed = rng.choice(ends)
    stream, after = b"", b""
    for line in lines:
        end = rng.choice(ends) if mixed else fixed
        if after == b"\r" and not line and end == b"\n":
            end = b"\r"  # "\r" then "\n" would be one line end (\r\n), and two events would merge
        stream += line + end
        after = end
    if did("early-close", 0.12):
        harmful = True
        stream = stream[: rng.randrange(len(stream) + 1)]
    case.stall = did("stall", 0.05)
    harmful = harmful or case.stall or "ignores-max-tokens" in case.mutations
    case.chunked = rng.random() < 0.8
    # Random write boundaries: anywhere, including inside a UTF-8 character or a \r\n.
    cuts = (
        sorted(rng.sample(range(1, len(stream)), min(len(stream) - 1, rng.randint(0, 60))))
        if len(stream) > 1
        else []
    )
    bounds = [0, *cuts, len(stream)]
    case.writes = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    text = "".join(shown)  # chat ends the reply with a newline unless it has one (or is empty)
    case.expected = None if harmful else text + ("\n" if text and not text.endswith("\n") else "")
    return case


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FuzzServer

    def log_message(self, *args) -> None:
        pass

    def _case(self) -> Case:
        return self.server.cases[int(self.path.strip("/").split("/")[1])]

    def do_GET(self) -> None:  # noqa: N802
        payload = json.dumps({"data": [{"id": "fuzz-model", "owned_by": "fuzz"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        case = self._case()
        self.close_connection = True
        try:
            self.send_response(case.status, case.reason)
            if case.status != 200:
                self.send_header("Content-Length", str(len(case.writes[0])))
            elif case.chunked:
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
            self.end_headers()
            for piece in case.writes:
                self.wfile.write(
                    f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
                    if case.chunked and case.status == 200
                    else piece
                )
                self.wfile.flush()
            if case.stall:
                self.server.release.wait(TIMEOUT * 5)
            elif case.chunked and case.status == 200:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass  # the client hung up (a bounded client does, on a bad stream)


class FuzzServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, cases: dict[int, Case]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.cases = cases
        self.release = Event()

    def handle_error(self, request, client_address) -> None:
        pass


def leaks(text: str) -> list[str]:
    pieces = {KEY[:4]} | {KEY[i : i + 6] for i in range(len(KEY) - 5)}
    return [p for p in pieces if p in text]


def run_case(url: str, case: Case) -> tuple[str, str]:
    """('ok' | 'error' | 'failure', what happened) for one case."""
    args = ["chat", "--endpoint", f"{url}/case/{case.index}/v1", "--api-key", KEY, "--timeout", str(TIMEOUT)]
    if case.max_tokens is not None:
        args += ["-n", str(case.max_tokens)]
    start = time.monotonic()
    try:
        result = cli(*args, "hi", time_limit=60)
    except Hung:
        return "failure", "no end within 60 s"
    elapsed = time.monotonic() - start
    out, err = result.stdout, result.stderr
    lines = err.strip().splitlines()
    problems = []
    if not 0 <= result.exit_code < 128:
        problems.append(f"exit {result.exit_code}")
    if "Traceback" in err or "internal error" in err:
        problems.append("a traceback or an internal error")
    if leaks(out) or leaks(err):
        problems.append("the key shows")
    if result.exit_code != 0 and (len(lines) != 1 or not lines[0].startswith("llmcli: error: ")):
        problems.append(f"{len(lines)} stderr lines for an error")
    if result.exit_code == 0 and err.strip():
        problems.append("stderr on success")
    if case.max_tokens is not None and len(out) > case.max_tokens * 256 + 1:
        problems.append(f"{len(out)} characters past max_tokens {case.max_tokens}")
    if case.expected is not None and (result.exit_code != 0 or out != case.expected):
        problems.append(f"a harmless change broke the reply (exit {result.exit_code}, {out[:60]!r})")
    if elapsed > HANG_GUARD_S:
        problems.append(f"took {elapsed:.0f} s")
    if problems:
        return "failure", f"{'; '.join(problems)} [{', '.join(case.mutations)}] {err.strip()[:200]!r}"
    return ("ok" if result.exit_code == 0 else "error"), lines[0] if lines else ""


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_sse_streams_end_cleanly(seed):
    cases = {i: make_case(i, seed) for i in range(CASES)}
    server = FuzzServer(cases)
    Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        # In this process, one case after another: the client's parsing is what is fuzzed, and a
        # child per case cost a Python start each (an escaping exception fails the test outright).
        outcomes = [run_case(url, case) for case in cases.values()]
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()
    counts = {kind: sum(1 for k, _ in outcomes if k == kind) for kind in ("error", "ok", "failure")}
    print(
        f"\nfuzz sse (seed {seed}): {CASES} cases, {counts['error']} clean errors, {counts['ok']} successes, "
        f"{counts['failure']} failures"
    )
    failures = [f"case {i}: {what}" for i, (kind, what) in enumerate(outcomes) if kind == "failure"]
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert_reached(counts, "error", "ok", seed=seed)  # the mutations did reach the client
