"""A server that attacks its client: it echoes the API key it was sent into every string it
returns, sends terminal escapes in model ids, pings forever, sends endless lines and never stops.

Same URL scheme as fake_server: http://127.0.0.1:PORT/<scenario>/v1. Scenarios not handled here
fall through to the fake server's.
"""

from __future__ import annotations

import json

from tests.engine.openai.fake_server import MARKER, MODEL, FakeServer, Handler

# Where the key lands right at the edge of the client's cut (300 characters of a message, 80 of a
# non-JSON event): masking after cutting would leave its first characters showing.
EDGE = 300 - 6


class HostileHandler(Handler):
    def _key(self) -> str:
        return (self.headers.get("Authorization") or "").removeprefix("Bearer ")

    def _raw(self, status: int, reason: str, payload: bytes) -> None:
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _stream_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        scenario, _ = self._scenario()
        if scenario not in POSTS and not scenario.startswith("echo-") and scenario != "slowlist":
            return super().do_GET()
        self._record(None)
        key = self._key()
        if scenario == "echo-models":
            ids = [f"\x1b[31m{key}\x1b[0m", f"evil\nmodel {key}\r", "\u202eplain\x07", "x" * EDGE + key]
            return self._json(
                200,
                {
                    "data": [
                        {
                            "id": i,
                            "owned_by": f"\x1b]0;{key}\x07",
                            "created": "soon",
                            "max_model_len": {"a": key},
                        }
                        for i in ids
                    ]
                },
            )
        if scenario == "slowlist":  # a byte of the model list every 0.2 s, forever: never silent
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 30))
            self.end_headers()
            while not self.server.release.wait(0.2):
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
            return
        if scenario == "echo-list-reason":
            return self._raw(
                500, f"Broken \x1b[2J{key}", json.dumps({"error": {"message": "x" * EDGE + key}}).encode()
            )
        return self._json(200, {"data": [{"id": MODEL, "owned_by": "tests"}]})

    def do_POST(self) -> None:  # noqa: N802
        scenario, _ = self._scenario()
        if scenario not in POSTS and scenario != "echo-repl":
            return super().do_POST()
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self._record(body)
        if scenario == "echo-repl":  # a REPL's turns: "hello [echo-sse]" picks the behaviour
            marker = MARKER.search((body.get("messages") or [{}])[-1].get("content", ""))
            scenario = marker.group(1) if marker else "echo-usage"
        try:
            POSTS[scenario](self, self._key(), body)
        except OSError:
            pass  # the client hung up: what a bounded client does to an endless server
        self.close_connection = True

    # -- the key, echoed --------------------------------------------------------------------------
    def echo_reason(self, key: str, body: dict) -> None:
        self._raw(
            500, f"Oops {key} \x1b[31mred", json.dumps({"error": {"message": "x" * EDGE + key}}).encode()
        )

    def echo_401(self, key: str, body: dict) -> None:
        self._raw(401, f"Unauthorized {key}", json.dumps({"error": {"message": f"bad key {key}"}}).encode())

    def echo_404(self, key: str, body: dict) -> None:
        self._raw(404, f"No {key}", json.dumps({"error": {"message": "m" * EDGE + key}}).encode())

    def echo_400(self, key: str, body: dict) -> None:
        self._raw(400, key * 3, ("t" * EDGE + key).encode())

    def echo_sse(self, key: str, body: dict) -> None:
        self._stream_head()
        self._event(self._delta("Hi"))
        self._chunk(
            b"event: error\r\ndata: "
            + json.dumps({"error": {"message": "y" * EDGE + key}}).encode()
            + b"\r\n\r\n"
        )
        self._chunk(b"")

    def echo_notjson(self, key: str, body: dict) -> None:
        self._stream_head()
        self._chunk(f"data: {'z' * 74}{key}\n\n".encode())
        self._chunk(b"")

    def echo_usage(self, key: str, body: dict) -> None:
        """A good reply whose reports carry the key in fields the client does not read."""
        self._stream_head()
        self._event({**self._delta("Hi"), "model": key, "system_fingerprint": key})
        self._event(
            {
                **self._delta(None, key),
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "echo": key, "details": {"k": key}},
                "timings": {"prompt_ms": 1.0, "note": key},
            }
        )
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    # -- bounds -----------------------------------------------------------------------------------
    def pings(self, key: str, body: dict) -> None:
        """Headers, then keep-alive comments forever: never silent, never a reply."""
        self._stream_head()
        while not self.server.release.wait(0.1):
            self._chunk(b": ping\r\n\r\n")

    def trickle(self, key: str, body: dict) -> None:
        """An event with no text every 0.2 s, forever: never silent, never done."""
        self._stream_head()
        while not self.server.release.wait(0.2):
            self._event(self._delta(""))

    def hugeline(self, key: str, body: dict) -> None:
        """One data line of 100 MiB (and no end to it)."""
        self._stream_head()
        self._chunk(b'data: {"choices": [{"delta": {"content": "')
        block = b"a" * (1 << 20)
        for _ in range(100):
            self._chunk(block)
        self._chunk(b'"}}]}\n\n')

    def nostop(self, key: str, body: dict) -> None:
        """200,000 text chunks whatever max_tokens says."""
        self._stream_head()
        event = b"data: " + json.dumps(self._delta("w ")).encode() + b"\n\n"
        for _ in range(2000):
            self._chunk(event * 100)
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")

    def shape(self, key: str, body: dict) -> None:
        self._stream_head()
        self._event(self._delta("Hi"))
        self._chunk(b"data: " + SHAPES[self._scenario()[0]].encode() + b"\n\n")
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


# Chunks of the wrong shape -> the words the client's message must name.
SHAPES = {
    "shape-choices": '{"choices": "abc"}',
    "shape-choice": '{"choices": [5]}',
    "shape-delta": '{"choices": [{"delta": []}]}',
    "shape-content": '{"choices": [{"delta": {"content": {"t": 1}}}]}',
    "shape-finish": '{"choices": [{"delta": {}, "finish_reason": 7}]}',
    "shape-usage": '{"choices": [], "usage": {"completion_tokens": "many"}}',
    "shape-usage-nan": '{"choices": [], "usage": {"completion_tokens": NaN}}',
    "shape-usage-list": '{"choices": [], "usage": [1, 2]}',
    "shape-timings": '{"choices": [], "timings": {"prompt_ms": 1e400}}',
    "shape-details": '{"choices": [], "usage": {"prompt_tokens_details": {"cached_tokens": -1}}}',
    "shape-list": "[1, 2, 3]",
    "shape-nested": "[" * 100000 + "]" * 100000,
    "shape-bigint": '{"choices": [], "usage": {"completion_tokens": 1' + "0" * 400 + "}}",
}
POSTS = {
    "echo-reason": HostileHandler.echo_reason,
    "echo-401": HostileHandler.echo_401,
    "echo-404": HostileHandler.echo_404,
    "echo-400": HostileHandler.echo_400,
    "echo-sse": HostileHandler.echo_sse,
    "echo-notjson": HostileHandler.echo_notjson,
    "echo-usage": HostileHandler.echo_usage,
    "pings": HostileHandler.pings,
    "trickle": HostileHandler.trickle,
    "hugeline": HostileHandler.hugeline,
    "nostop": HostileHandler.nostop,
    **{name: HostileHandler.shape for name in SHAPES},
}


class HostileServer(FakeServer):
    def __init__(self) -> None:
        super().__init__()
        self.RequestHandlerClass = HostileHandler
