"""One streamed chat completion from an OpenAI-compatible server, bounded in time, size and length.

The bounds are described in openai_http's docstring; this is where the stream keeps them.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator

from llmcli.engine.openai.chunks import BadChunk, TokenBudget, check_chunk
from llmcli.engine.openai.client import (
    FALLBACK_STATUSES,
    FIELD_FALLBACKS,
    MAX_ERROR_BODY,
    Endpoint,
    Watchdog,
    dropped,
    http_error,
    read_timeout,
    server_message,
    shutdown,
    too_slow,
)
from llmcli.engine.openai.errors import RemoteError, RemoteTimeout
from llmcli.engine.openai.sse import MAX_LINE, EventTooLong, sse_events

# More text than this per token is not one token: a bound for a server that ignores max_tokens.
TOKEN_CHARS = 256


class ChatStream:
    """One streamed chat completion: iterate for the server's chunks (checked by `check_chunk`).

    Raises RemoteError/RemoteRefused with a one-line message for every way it can fail. `abort()`
    may be called from a signal handler: it shuts the socket down, so a read blocked on a silent
    server returns at once and the iteration simply ends.
    """

    def __init__(self, ep: Endpoint, body: dict) -> None:
        self.ep, self.body = ep, body
        self.aborted = False
        self.done = False  # the server said [DONE]
        self.capped = False  # the server went on past max_tokens and was cut off here
        self.budget = TokenBudget(_max_tokens(body), TOKEN_CHARS)
        self._conn: http.client.HTTPConnection | None = None
        self._resp: http.client.HTTPResponse | None = None
        self._dog: Watchdog | None = None
        self._progress_at = 0.0  # when the last event arrived: silence is timed from here
        self._heard = False  # bytes (pings, part of a line) arrived since then
        self._rewritten: set[str] = set()  # fields already asked again in their fallback form

    def abort(self) -> None:
        self.aborted = True
        shutdown(self._conn)

    def close(self) -> None:
        if self._dog is not None:
            self._dog.cancel()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _open(self) -> http.client.HTTPResponse:
        ep = self.ep
        assert self._dog is not None, "__iter__ starts the watchdog before it opens the stream"
        self._conn = ep.connect()
        self._dog.watch(self._conn)
        headers = {**ep.headers(), "Content-Type": "application/json", "Accept": "text/event-stream"}
        # Timeouts and broken connections propagate to __iter__, which knows whether we aborted.
        self._conn.request(
            "POST",
            ep.parts.path + "/chat/completions",
            body=json.dumps(self.body).encode("utf-8"),
            headers=headers,
        )
        resp = self._conn.getresponse()
        if resp.status == 200:
            return resp
        try:
            body = resp.read(MAX_ERROR_BODY)
        except (http.client.HTTPException, OSError):
            body = b""
        if resp.status in FALLBACK_STATUSES:
            # A strict server that does not know stream_options (ask again without it: no usage then),
            # or OpenAI's json_schema response_format (ask again in the json_object form). Each field
            # is rewritten at most once: the rewritten body is not rewritten again.
            for field, rewrite in FIELD_FALLBACKS.items():
                if field in self.body and field.encode() in body and field not in self._rewritten:
                    again = rewrite(self.body)
                    if again is not None:
                        self._conn.close()
                        self.body = again
                        self._rewritten.add(field)
                        return self._open()
        raise http_error(
            ep,
            resp.status,
            resp.reason,
            body,
            what="POST /chat/completions",
            model=self.body.get("model"),
            retry_after=resp.getheader("Retry-After"),
        )

    def _read(self) -> bytes:
        """The next bytes of the body, waiting no longer than the silence left since the last event."""
        assert self._dog is not None and self._resp is not None, "read only while __iter__ runs"
        left = self._progress_at + self.ep.timeout - time.monotonic()
        if left <= 0 or self._dog.expired:
            raise TimeoutError
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.settimeout(left)
        block = self._resp.read1(65536)
        self._heard = self._heard or bool(block)
        return block

    def _progress(self) -> None:
        self._progress_at, self._heard = time.monotonic(), False

    def __iter__(self) -> Iterator[dict]:
        ep = self.ep
        dog = self._dog = Watchdog(ep.reply_deadline(self.budget.limit))
        try:
            self._resp = self._open()
            self._progress()
            for event, data in sse_events(self._read, MAX_LINE):
                self._progress()
                if data == "[DONE]":
                    self.done = True
                    return
                chunk = self._chunk(event, data)
                if self.budget.spent(chunk):
                    # The server ignores max_tokens: stop reading, and say why the reply ended.
                    self.capped = True
                    yield {"choices": [{"delta": {}, "finish_reason": "length"}]}
                    return
                yield chunk
            if not (self.aborted or dog.expired):
                raise dropped(ep, "the stream ended without [DONE]")
        except EventTooLong as exc:
            raise RemoteError(
                f"the server at {ep.base_url} sent {exc} in its stream; is it an OpenAI-compatible server?"
            ) from None
        except (http.client.HTTPException, OSError) as exc:
            # After abort() a read fails or ends: that is the cancel working, not an error.
            if not self.aborted:
                raise self._cut_off(exc) from None
        finally:
            self.close()
        if dog.expired and not self.aborted:
            raise too_slow(ep, "the reply from the server", dog.seconds)

    def _cut_off(self, exc: Exception) -> RemoteError:
        ep = self.ep
        assert self._dog is not None, "a stream is cut off only while __iter__ runs"
        if self._dog.expired:
            return too_slow(ep, "the reply from the server", self._dog.seconds)
        if isinstance(exc, TimeoutError) and self._heard:
            return RemoteTimeout(
                f"the server at {ep.base_url} sent no complete event for {ep.timeout:g} s, "
                "only keep-alive comments or part of a line; it may be stuck "
                "(raise --timeout if it is only slow)"
            )
        if isinstance(exc, TimeoutError):
            return read_timeout(ep)
        return dropped(ep, type(exc).__name__)

    def _chunk(self, event: str, data: str) -> dict:
        """One event's data -> a chunk of the expected shape, or the one line that says what is wrong."""
        ep = self.ep
        if event == "error":
            raise self._failed(data)
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            raise RemoteError(
                f"the server at {ep.base_url} sent a stream event that is not JSON: '{ep.shown(data, 80)}'"
            ) from None
        if isinstance(obj, dict) and "error" in obj:
            raise self._failed(data)
        try:
            return check_chunk(obj)
        except BadChunk as exc:
            raise RemoteError(
                f"the server at {ep.base_url} sent a stream chunk of the wrong shape "
                f"({exc}); is it an OpenAI-compatible server?"
            ) from None

    def _failed(self, data: str) -> RemoteError:
        """An error event in the stream (vLLM sends one when its engine dies mid-reply)."""
        detail = server_message(data.encode("utf-8", "replace"), self.ep)
        return RemoteError(f"the server at {self.ep.base_url} failed mid-reply: {detail}")


def _max_tokens(body: dict) -> int | None:
    value = body.get("max_tokens", body.get("max_completion_tokens"))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
