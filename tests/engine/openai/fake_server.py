"""A tiny OpenAI-compatible server that misbehaves on purpose, in a thread of the test process.

The first path segment picks the behaviour: http://127.0.0.1:PORT/<scenario>/v1. In the "ok"
scenario a user message may carry a marker, e.g. "hello [drop]", to fail one turn of a REPL.
"loading" answers every route with 503 and Retry-After, as llama-server does while it loads its
model, for LOADING_S after its first request (`loading_since` forgets it); "neverready" never stops.
Replies are streamed the way uvicorn does (HTTP/1.1, chunked), with llama.cpp-style `timings`
and OpenAI-style `usage` in the last chunk.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"
REPLY = ["Hello", " from", " the", " fake", " server", ": ", "中", "文", " 🙂", "."]
MARKER = re.compile(r"\[([\w-]+)\]")
LOADING_S = 1.5


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests: list[dict] = []  # method, path, authorization, body
        self.release = threading.Event()  # ends every stall when the server stops
        self.lock = threading.Lock()
        self.posts = 0
        self.loading_since: dict[str, float] = {}  # scenario -> its first request, while "loading"
        self.unavailable = 0  # 503s answered

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def endpoint(self, scenario: str = "ok") -> str:
        return f"{self.url}/{scenario}/v1"

    def start(self) -> FakeServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def handle_error(self, request, client_address) -> None:
        pass  # clients that hang up (timeouts, Ctrl-C) are what these tests are about

    def stop(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeServer

    def log_message(self, *args) -> None:  # quiet
        pass

    # -- helpers ------------------------------------------------------------------------------
    def _record(self, body: dict | None) -> None:
        with self.server.lock:
            self.server.requests.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": body,
                }
            )

    def _json(self, status: int, data: object) -> None:
        payload = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _event(self, obj: object) -> None:
        self._chunk(b"data: " + json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\r\n\r\n")

    def _delta(self, text: str | None = None, finish: str | None = None, **extra) -> dict:
        delta = {"content": text} if text is not None else {}
        return {
            "id": "c1",
            "object": "chat.completion.chunk",
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }

    def _loading(self, scenario: str) -> bool:
        """Answer 503 (and say so) while a loading scenario's model is not ready."""
        if scenario not in ("loading", "neverready"):
            return False
        with self.server.lock:
            since = self.server.loading_since.setdefault(scenario, time.monotonic())
            if scenario == "loading" and time.monotonic() - since >= LOADING_S:
                return False
            self.server.unavailable += 1
        payload = json.dumps(
            {"error": {"message": "Loading model", "type": "unavailable_error", "code": 503}}
        )
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload.encode())
        return True

    def _scenario(self) -> tuple[str, str]:
        parts = self.path.strip("/").split("/")
        return parts[0], "/" + "/".join(parts[1:])

    # -- routes -------------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._record(None)
        scenario, rest = self._scenario()
        if self._loading(scenario):
            return None
        if scenario == "401":
            return self._json(401, {"error": {"message": "Invalid API key", "type": "auth"}})
        if scenario == "notjson":
            payload = b"<html>hello</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        if rest != "/v1/models" or scenario == "missing":  # "missing": no API at this address
            return self._json(404, {"detail": "Not Found"})
        models = [MODEL, "other-model"] if scenario == "two" else [MODEL]
        self._json(
            200,
            {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "tests"} for m in models]},
        )

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        self._record(body)
        scenario, rest = self._scenario()
        if rest != "/v1/chat/completions":
            return self._json(404, {"detail": "Not Found"})
        if self._loading(scenario):
            return None
        last = (body.get("messages") or [{}])[-1].get("content", "")
        marker = MARKER.search(last)
        if scenario == "ok" and marker:
            scenario = marker.group(1)
        if scenario == "401":
            return self._json(401, {"error": {"message": "Invalid API key", "type": "auth"}})
        with self.server.lock:
            self.server.posts += 1
            nth = self.server.posts
        if scenario == "flaky" and nth % 2 == 0:  # every other request fails (the first one works)
            scenario = "500"
        if scenario == "strict" and "stream_options" in body:  # an older server with a strict schema
            return self._json(
                422, {"detail": [{"loc": ["body", "stream_options"], "msg": "extra fields not permitted"}]}
            )
        if scenario == "500":
            return self._json(500, {"error": {"message": "the engine is on fire", "code": 500}})
        if body.get("model") not in (MODEL, "other-model"):
            return self._json(404, {"error": {"message": f"The model `{body.get('model')}` does not exist."}})

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._chunk(b": ping\r\n\r\n")  # a comment line, as sse-starlette sends
        self._event(self._delta(None, role="assistant"))
        max_tokens = int(body.get("max_tokens") or len(REPLY))
        delay = 0.05 if scenario == "slow" else 0.002
        pieces = REPLY if scenario == "runon" else REPLY[:max_tokens]  # "runon" ignores max_tokens
        # "overcount": the text keeps to max_tokens, the usage says 5 tokens more
        completion_tokens = len(pieces) + (5 if scenario == "overcount" else 0)
        for i, piece in enumerate(pieces):
            if scenario in ("midfail", "drop", "stall") and i == 3:
                return self._fail(scenario)
            if piece == "中":
                # one event's bytes split inside a UTF-8 character, across two TCP writes
                raw = b"data: " + json.dumps(self._delta(piece), ensure_ascii=False).encode() + b"\r\n\r\n"
                cut = raw.index("中".encode()) + 1
                self._chunk(raw[:cut])
                time.sleep(0.02)
                self._chunk(raw[cut:])
            else:
                self._event(self._delta(piece))
            time.sleep(delay)
        finish = "length" if max_tokens < len(REPLY) else "stop"
        self._event(self._delta(None, finish))
        # The last chunk: usage (OpenAI/vLLM) and timings (llama.cpp's server).
        self._event(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "model": MODEL,
                "choices": [],
                "usage": {
                    "prompt_tokens": 42,
                    "completion_tokens": completion_tokens,
                    "total_tokens": 42 + completion_tokens,
                    "prompt_tokens_details": {"cached_tokens": 10},
                },
                "timings": {
                    "prompt_n": 32,
                    "prompt_ms": 12.5,
                    "prompt_per_second": 2560.0,
                    "cache_n": 10,
                    "predicted_n": len(pieces),
                    "predicted_ms": 50.0,
                    "predicted_per_second": len(pieces) / 0.05,
                },
            }
        )
        self._chunk(b"data: [DONE]\r\n\r\n")
        self._chunk(b"")

    def _fail(self, scenario: str) -> None:
        if scenario == "midfail":
            # What vLLM sends when the engine dies mid-generation: an error event, then [DONE].
            self._event(
                {"error": {"message": "CUDA out of memory", "type": "InternalServerError", "code": 500}}
            )
            self._chunk(b"data: [DONE]\r\n\r\n")
            self._chunk(b"")
        elif scenario == "drop":
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
        elif scenario == "stall":
            self.server.release.wait(60)
            self.close_connection = True
