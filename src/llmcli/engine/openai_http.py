"""A small client for OpenAI-compatible servers (vLLM, SGLang, TGI, llama.cpp's server).

Two calls are all llmcli needs: `GET /models` and a streamed `POST /chat/completions` (SSE).
It is built on the standard library's http.client, so it owns the socket: a Ctrl-C can shut a
stalled stream down at once (`ChatStream.abort`), and a read timeout means "the server sent
nothing for N seconds", which is what a user can act on.

The API key goes into one header and nowhere else: `Endpoint` keeps it out of its repr, and
every message built from a server's answer has the key masked, in case a server echoes it.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from llmcli.errors import LlmcliError, RuntimeFailure, UsageError

ENDPOINT_ENV = "LLMCLI_ENDPOINT"
API_KEY_ENV = "LLMCLI_API_KEY"
DEFAULT_TIMEOUT = 120.0  # seconds of silence before a read gives up; prefill of a long prompt on a CPU is slow
CONNECT_TIMEOUT = 10.0
# A user may paste the URL of an endpoint rather than the API's base; these tails are cut off.
ENDPOINT_TAILS = ("/chat/completions", "/completions", "/models")
MESSAGE_LIMIT = 300  # characters of a server's error message worth showing on one line
# Asked for, not required: a server that refuses it by name gets the request again without it.
OPTIONAL_FIELD = "stream_options"


class RemoteError(RuntimeFailure):
    """The server could not be reached or failed while the request was fine (exit 1)."""


class RemoteRefused(UsageError):
    """The server refused what we asked for: the key, the model, the request (exit 2)."""


class RemoteTimeout(RemoteError):
    pass


class RemoteDropped(RemoteError):
    """The connection ended before the reply did."""


@dataclass(frozen=True)
class Endpoint:
    """Where the server is: the API's base URL (…/v1) and, optionally, the key it wants."""

    base_url: str
    api_key: str | None = field(default=None, repr=False)
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = CONNECT_TIMEOUT

    @classmethod
    def parse(cls, url: str, api_key: str | None = None, timeout: float | None = None) -> Endpoint:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--endpoint '{url}' is not an http(s) URL; give the server's base URL, "
                             "e.g. http://localhost:8000/v1")
        if parts.username or parts.password:
            # It would be shown in every message that names the server; keys go in a header.
            raise UsageError("--endpoint should not carry credentials; give the key with --api-key or "
                             "LLMCLI_API_KEY")
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise UsageError(f"--endpoint '{url}' has a bad port; give e.g. http://localhost:8000/v1") from None
        path = parts.path.rstrip("/")
        for tail in ENDPOINT_TAILS:
            if path.endswith(tail):
                path = path[: -len(tail)]
                break
        # A bare host means the usual place of the API; any other path is taken as the base.
        path = path or "/v1"
        if timeout is not None and timeout <= 0:
            raise UsageError(f"--timeout {timeout}: give a number of seconds above 0")
        return cls(f"{parts.scheme}://{parts.netloc}{path}", api_key or None,
                   timeout if timeout is not None else DEFAULT_TIMEOUT)

    @classmethod
    def from_options(cls, url: str | None, api_key: str | None = None,
                     timeout: float | None = None) -> Endpoint | None:
        """--endpoint / $LLMCLI_ENDPOINT and --api-key / $LLMCLI_API_KEY; None when no endpoint is set."""
        url = url or os.environ.get(ENDPOINT_ENV) or None
        if url is None:
            if api_key:
                raise UsageError("--api-key is for a server: give --endpoint URL (or set LLMCLI_ENDPOINT) too")
            return None
        return cls.parse(url, api_key or os.environ.get(API_KEY_ENV) or None, timeout)

    def __str__(self) -> str:
        return self.base_url

    @property
    def parts(self):
        return urlsplit(self.base_url)

    def headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": "llmcli"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def mask(self, text: str) -> str:
        """Never let the key into a message, even if a server echoes it back."""
        return text.replace(self.api_key, "***") if self.api_key else text

    def connect(self) -> http.client.HTTPConnection:
        parts = self.parts
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname, parts.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            raise _connect_error(self, exc) from None
        conn.sock.settimeout(self.timeout)  # from now on: the longest silence we wait through
        return conn


def _connect_error(ep: Endpoint, exc: OSError) -> LlmcliError:
    # What went wrong -> what to tell the user; the first matching type wins.
    table: list[tuple[type, str]] = [
        (ConnectionRefusedError, "connection refused; is the server running there? "
                                 "(check --endpoint or LLMCLI_ENDPOINT)"),
        (socket.gaierror, "the host name does not resolve; check --endpoint or LLMCLI_ENDPOINT"),
        (TimeoutError, f"no answer within {ep.connect_timeout:g} s; check the address and the network"),
        (ssl.SSLError, f"TLS failed ({exc}); check the URL's scheme (http or https)"),
    ]
    what = next((text for kind, text in table if isinstance(exc, kind)),
                f"{exc.strerror or exc}; check --endpoint or LLMCLI_ENDPOINT")
    return RemoteError(f"cannot connect to {ep.base_url}: {what}")


def _read_timeout(ep: Endpoint) -> RemoteTimeout:
    return RemoteTimeout(f"the server at {ep.base_url} sent nothing for {ep.timeout:g} s; it may be overloaded "
                         "or stuck (raise --timeout if it is only slow)")


def _dropped(ep: Endpoint, detail: str = "") -> RemoteDropped:
    return RemoteDropped(f"the server at {ep.base_url} closed the connection before the reply was complete"
                         + (f" ({detail})" if detail else ""))


def server_message(body: bytes) -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("detail") or data.get("detail") or text)
        elif isinstance(err, str):
            text = err
    text = " ".join(text.split())
    return text[:MESSAGE_LIMIT] + ("…" if len(text) > MESSAGE_LIMIT else "")


def http_error(ep: Endpoint, status: int, reason: str, body: bytes, *, what: str, model: str | None = None
               ) -> LlmcliError:
    """An HTTP error status -> one line that says what to do (refusals exit 2, failures exit 1)."""
    detail = ep.mask(server_message(body)) or reason
    head = f"{what} at {ep.base_url} failed with {status} {reason}".rstrip()
    if status in (401, 403):
        fix = ("the server rejected the API key; check --api-key or LLMCLI_API_KEY" if ep.api_key else
               "the server wants an API key; give it with --api-key or LLMCLI_API_KEY")
        return RemoteRefused(f"{head}: {fix}")
    if status == 404 and model is not None:
        return RemoteRefused(f"{head}: {detail}; is '{model}' one of the server's models? "
                             f"(`llmcli list --endpoint {ep.base_url}`)")
    if status == 404:
        return RemoteRefused(f"{head}: no OpenAI-compatible API there; give the API's base URL, "
                             "e.g. http://localhost:8000/v1")
    if status in (400, 413, 422):
        return RemoteRefused(f"{head}: {detail}")
    if status == 429:
        return RemoteError(f"{head}: the server is busy ({detail}); try again later")
    return RemoteError(f"{head}: {detail}")


def _get_json(ep: Endpoint, path: str, what: str) -> object:
    conn = ep.connect()
    try:
        try:
            conn.request("GET", ep.parts.path + path, headers=ep.headers())
            resp = conn.getresponse()
            body = resp.read()
        except TimeoutError:
            raise _read_timeout(ep) from None
        except (http.client.HTTPException, OSError) as exc:
            raise _dropped(ep, type(exc).__name__) from None
        if resp.status != 200:
            raise http_error(ep, resp.status, resp.reason, body, what=what)
        try:
            return json.loads(body)
        except ValueError:
            raise RemoteError(f"{what} at {ep.base_url} did not answer with JSON; is it an OpenAI-compatible "
                              "server? (give the API's base URL, e.g. http://localhost:8000/v1)") from None
    finally:
        conn.close()


@dataclass
class RemoteModel:
    id: str
    owned_by: str = ""
    created: int | None = None
    max_model_len: int | None = None  # vLLM says it; others do not


def list_models(ep: Endpoint) -> list[RemoteModel]:
    data = _get_json(ep, "/models", "GET /models")
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise RemoteError(f"GET /models at {ep.base_url} did not return a model list; "
                          "is it an OpenAI-compatible server?")
    return [RemoteModel(str(m["id"]), str(m.get("owned_by") or ""), m.get("created"), m.get("max_model_len"))
            for m in items if isinstance(m, dict) and m.get("id")]


def pick_model(ep: Endpoint, models: list[RemoteModel], spec: str | None) -> str:
    """--model among the server's models (exact, else an unambiguous prefix); none given: the only one."""
    ids = [m.id for m in models]
    if not ids:
        raise RemoteError(f"the server at {ep.base_url} lists no models; load one into the server first")
    if spec is None:
        if len(ids) == 1:
            return ids[0]
        raise UsageError(f"the server at {ep.base_url} serves {len(ids)} models ({', '.join(ids)}); "
                         "pick one with -m MODEL")
    if spec in ids:
        return spec
    matches = [i for i in ids if i.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(f"'{spec}' matches {len(matches)} of the server's models ({', '.join(matches)}); "
                         "give more of the name")
    raise UsageError(f"the server at {ep.base_url} has no model '{spec}'; it serves: {', '.join(ids)}")


class ChatStream:
    """One streamed chat completion: iterate for the server's chunks (parsed JSON), then it is done.

    Raises RemoteError/RemoteRefused with a one-line message for every way it can fail. `abort()`
    may be called from a signal handler: it shuts the socket down, so a read blocked on a silent
    server returns at once and the iteration simply ends.
    """

    def __init__(self, ep: Endpoint, body: dict) -> None:
        self.ep, self.body = ep, body
        self.aborted = False
        self.done = False  # the server said [DONE] (or finished a choice and closed cleanly)
        self._conn: http.client.HTTPConnection | None = None

    def abort(self) -> None:
        self.aborted = True
        conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _open(self) -> http.client.HTTPResponse:
        ep = self.ep
        self._conn = ep.connect()
        headers = {**ep.headers(), "Content-Type": "application/json", "Accept": "text/event-stream"}
        # Timeouts and broken connections propagate to __iter__, which knows whether we aborted.
        self._conn.request("POST", ep.parts.path + "/chat/completions",
                           body=json.dumps(self.body).encode("utf-8"), headers=headers)
        resp = self._conn.getresponse()
        if resp.status == 200:
            return resp
        try:
            body = resp.read()
        except (http.client.HTTPException, OSError):
            body = b""
        if resp.status in (400, 422) and OPTIONAL_FIELD in self.body and OPTIONAL_FIELD.encode() in body:
            # A strict server that does not know stream_options: ask again without it (no usage then).
            self.close()
            self.body = {k: v for k, v in self.body.items() if k != OPTIONAL_FIELD}
            return self._open()
        raise http_error(ep, resp.status, resp.reason, body, what="POST /chat/completions",
                         model=self.body.get("model"))

    def __iter__(self) -> Iterator[dict]:
        ep = self.ep
        try:
            resp = self._open()
            for event, data in _sse_events(resp):
                if data == "[DONE]":
                    self.done = True
                    return
                try:
                    chunk = json.loads(data)
                except ValueError:
                    raise RemoteError(f"the server at {ep.base_url} sent a stream event that is not JSON: "
                                      f"{ep.mask(data[:80])!r}") from None
                if event == "error" or (isinstance(chunk, dict) and "error" in chunk):
                    detail = ep.mask(server_message(data.encode("utf-8")))
                    raise RemoteError(f"the server at {ep.base_url} failed mid-reply: {detail}")
                if isinstance(chunk, dict):
                    yield chunk
            if not self.aborted:
                raise _dropped(ep, "the stream ended without [DONE]")
        except TimeoutError:
            if not self.aborted:
                raise _read_timeout(ep) from None
        except (http.client.HTTPException, OSError) as exc:
            # After abort() a read fails or ends: that is the cancel working, not an error.
            if not self.aborted:
                raise _dropped(ep, type(exc).__name__) from None
        finally:
            self.close()


def _sse_events(resp: http.client.HTTPResponse) -> Iterator[tuple[str, str]]:
    """Server-sent events -> (event type, data). Lines end in \\n, \\r\\n or \\r; ':' lines are pings.

    The data is decoded per complete line: a newline byte never occurs inside a UTF-8 sequence,
    so a character split across TCP reads is whole by the time its line is.
    """
    event, data = "message", []
    for raw in _lines(resp):
        line = raw.decode("utf-8", "replace")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:  # a last event without its blank line
        yield event, "\n".join(data)


def _lines(resp: http.client.HTTPResponse) -> Iterator[bytes]:
    """The body's lines as they arrive (http.client undoes chunked transfer encoding for us)."""
    pending = b""
    while True:
        block = resp.read1(65536)
        if not block:
            break
        pending += block
        while (cut := _line_end(pending)) is not None:
            end, width = cut
            yield pending[:end]
            pending = pending[end + width:]
    if pending:
        yield pending


def _line_end(buf: bytes) -> tuple[int, int] | None:
    n = buf.find(b"\n")
    r = buf.find(b"\r")
    if r == -1 and n == -1:
        return None
    if r != -1 and (n == -1 or r < n):
        if r + 1 == len(buf):
            return None  # a \r at the end may be half of \r\n
        return (r, 2) if buf[r + 1:r + 2] == b"\n" else (r, 1)
    return n, 1
