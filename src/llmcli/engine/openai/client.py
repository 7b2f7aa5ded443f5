"""A small client for OpenAI-compatible servers (vLLM, SGLang, TGI, llama.cpp's server).

Two calls are all llmcli needs: `GET /models` and a streamed `POST /chat/completions` (SSE).
It is built on the standard library's http.client, so it owns the socket: a Ctrl-C can shut a
stalled stream down at once (`ChatStream.abort`), and a timeout means "the server sent no answer
for N seconds", which is what a user can act on.

Bounds, because a server is input too:
- silence: --timeout seconds without a stream event (keep-alive comments do not count, so a
  server that only pings is cut off like a silent one);
- the whole reply: --timeout x (1 + max_tokens / 100), i.e. --timeout for the first token plus
  --timeout for every 100 tokens after it (`Endpoint.reply_deadline`); GET /models gets twice
  --timeout. A watchdog shuts the socket at the deadline, so a server trickling its headers a
  byte at a time is cut off too;
- size: 1 MiB in one SSE line or event, 16 MiB in a JSON answer;
- length: the stream is cut at max_tokens (text chunks, or the server's own count, whichever is
  higher) even when the server does not stop, and the reply then ends with finish_reason "length".

The API key goes into one header and nowhere else: `Endpoint` keeps it out of its repr, and
every message built from a server's answer goes through `Endpoint.shown`: control characters out,
the key masked, then (and only then) cut to length.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from llmcli.engine.openai.errors import (
    RemoteDropped,
    RemoteError,
    RemoteRefused,
    RemoteTimeout,
    RemoteUnavailable,
)
from llmcli.engine.openai.retry import retry_after_seconds
from llmcli.errors import LlmcliError, UsageError

# http.client, socket and ssl are imported where a connection is made: parsing --endpoint (which
# every command that has it does) must not cost `llmcli list` the network stack.
if TYPE_CHECKING:
    import http.client

DEFAULT_TIMEOUT = (
    120.0  # seconds of silence before a read gives up; prefill of a long prompt on a CPU is slow
)
CONNECT_TIMEOUT = 10.0
MAX_TIMEOUT = 1e6  # seconds (11 days); a socket cannot wait past about 1e10
# A user may paste the URL of an endpoint rather than the API's base; these tails are cut off.
ENDPOINT_TAILS = ("/chat/completions", "/completions", "/models")
MESSAGE_LIMIT = 300  # characters of a server's error message worth showing on one line
NAME_LIMIT = 200  # characters of a model id, a reason phrase, an owner
MAX_JSON = 16 << 20  # bytes of a JSON answer (GET /models)
MAX_ERROR_BODY = 64 << 10  # bytes of an error body read (a line of it is shown)
TOKENS_PER_TIMEOUT = 100  # the slowest pace a reply may keep: this many tokens per --timeout
ASSUMED_MAX_TOKENS = 4096  # for the deadline of a request that leaves max_tokens to the server
# Terminal escapes and invisible formatting a server could use to spoof or garble a line.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_BREAKS = re.compile(r"[\t\n\v\f\r\x85]")
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_INVISIBLE = re.compile(r"[\u00ad\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")


def _without_usage(body: dict) -> dict | None:
    return {k: v for k, v in body.items() if k != "stream_options"}


def _schema_as_json_object(body: dict) -> dict | None:
    """OpenAI's json_schema response_format in the older form llama-cpp-python's server (and
    Anyscale's) takes: {"type": "json_object", "schema": ...}. The reply is validated here either way."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") != "json_schema":
        return None
    return {**body, "response_format": {"type": "json_object", "schema": fmt["json_schema"]["schema"]}}


# Asked for in one form, not required in it: a server that refuses the field by name (400, 422, or
# llama-cpp-python's 500 for a request it cannot validate) gets the request again, rewritten.
FIELD_FALLBACKS = {"stream_options": _without_usage, "response_format": _schema_as_json_object}
FALLBACK_STATUSES = (400, 422, 500)


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
            raise UsageError(
                f"--endpoint '{url}' is not an http(s) URL; give the server's base URL, "
                "e.g. http://localhost:8000/v1"
            )
        if parts.username or parts.password:
            # It would be shown in every message that names the server; keys go in a header.
            raise UsageError(
                "--endpoint should not carry credentials; give the key with --api-key or LLMCLI_API_KEY"
            )
        try:
            parts.port  # noqa: B018  (raises on a port that is not a number)
        except ValueError:
            raise UsageError(
                f"--endpoint '{url}' has a bad port; give e.g. http://localhost:8000/v1"
            ) from None
        path = parts.path.rstrip("/")
        for tail in ENDPOINT_TAILS:
            if path.endswith(tail):
                path = path[: -len(tail)]
                break
        # A bare host means the usual place of the API; any other path is taken as the base.
        path = path or "/v1"
        if timeout is not None and not 0 < timeout <= MAX_TIMEOUT:  # NaN fails this too
            raise UsageError(
                f"--timeout {timeout}: give a number of seconds above 0 and at most {MAX_TIMEOUT:g}"
            )
        return cls(
            f"{parts.scheme}://{parts.netloc}{path}",
            api_key or None,
            timeout if timeout is not None else DEFAULT_TIMEOUT,
        )

    @classmethod
    def from_options(
        cls,
        url: str | None,
        api_key: str | None = None,
        timeout: float | None = None,
        default_api_key: str | None = None,
    ) -> Endpoint | None:
        """--endpoint (or $LLMCLI_ENDPOINT) and --api-key; None when no endpoint is set.

        `default_api_key` ($LLMCLI_API_KEY, read by the command) is used only when there is a
        server and no --api-key; unlike --api-key it is no error without one.
        """
        if not url:
            if api_key:
                raise UsageError(
                    "--api-key is for a server: give --endpoint URL (or set LLMCLI_ENDPOINT) too"
                )
            return None
        return cls.parse(url, api_key or default_api_key or None, timeout)

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

    def shown(self, text: str, limit: int = MESSAGE_LIMIT) -> str:
        """A server's text, fit for one line: printable, the key masked, and only then cut to length
        (cutting first could leave the key's first characters at the end)."""
        text = self.mask(printable(text))
        return text[:limit] + ("…" if len(text) > limit else "")

    def reply_deadline(self, max_tokens: int | None) -> float:
        """Seconds a whole streamed reply may take: --timeout for the first token, then --timeout per
        TOKENS_PER_TIMEOUT tokens (a server slower than that is stuck, whatever it sends)."""
        return self.timeout * (1 + (max_tokens or ASSUMED_MAX_TOKENS) / TOKENS_PER_TIMEOUT)

    def connect(self) -> http.client.HTTPConnection:
        import http.client

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


def printable(text: str) -> str:
    """No terminal escapes, control characters or invisible formatting; line breaks become spaces.
    What is dropped joins its neighbours, so the key cannot hide from the mask behind a NUL."""
    return _INVISIBLE.sub("", _CONTROLS.sub("", _BREAKS.sub(" ", _ESCAPES.sub("", text))))


def shutdown(conn: http.client.HTTPConnection | None) -> None:
    """Make a blocked read on the connection return now (safe from a signal handler or a thread)."""
    sock = conn.sock if conn is not None else None
    if sock is not None:
        import socket  # loaded already with the connection: no import work in a signal handler

        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Watchdog:
    """Shuts a connection down when its time is up: the one bound that also covers a server that
    trickles its status line or headers a byte at a time (each read alone is within the timeout)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.expired = False
        self.conn: http.client.HTTPConnection | None = None
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, conn: http.client.HTTPConnection) -> None:
        self.conn = conn
        if self.expired:
            shutdown(conn)

    def _expire(self) -> None:
        self.expired = True
        shutdown(self.conn)

    def cancel(self) -> None:
        self._timer.cancel()


def _connect_error(ep: Endpoint, exc: OSError) -> LlmcliError:
    import socket
    import ssl

    # What went wrong -> what to tell the user; the first matching type wins.
    table: list[tuple[type, str]] = [
        (
            ConnectionRefusedError,
            "connection refused; is the server running there? (check --endpoint or LLMCLI_ENDPOINT)",
        ),
        (socket.gaierror, "the host name does not resolve; check --endpoint or LLMCLI_ENDPOINT"),
        (TimeoutError, f"no answer within {ep.connect_timeout:g} s; check the address and the network"),
        (ssl.SSLError, f"TLS failed ({exc}); check the URL's scheme (http or https)"),
    ]
    what = next(
        (text for kind, text in table if isinstance(exc, kind)),
        f"{exc.strerror or exc}; check --endpoint or LLMCLI_ENDPOINT",
    )
    return RemoteError(f"cannot connect to {ep.base_url}: {what}")


def read_timeout(ep: Endpoint) -> RemoteTimeout:
    return RemoteTimeout(
        f"the server at {ep.base_url} sent nothing for {ep.timeout:g} s; it may be overloaded "
        "or stuck (raise --timeout if it is only slow)"
    )


def too_slow(ep: Endpoint, what: str, seconds: float) -> RemoteTimeout:
    return RemoteTimeout(
        f"{what} at {ep.base_url} took longer than {seconds:g} s in all; the server is "
        "stuck or far too slow (raise --timeout if it is only slow)"
    )


def dropped(ep: Endpoint, detail: str = "") -> RemoteDropped:
    return RemoteDropped(
        f"the server at {ep.base_url} closed the connection before the reply was complete"
        + (f" ({detail})" if detail else "")
    )


def server_message(body: bytes, ep: Endpoint | None = None) -> str:
    """The human part of an error body: OpenAI's {"error": {"message"}}, FastAPI's {"detail"}, or text;
    on one line, with the endpoint's key masked."""
    text = body.decode("utf-8", "replace").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            text = str(err.get("message") or err.get("detail") or data.get("detail") or text)
        elif isinstance(err, str):
            text = err
    return (ep or Endpoint("")).shown(" ".join(printable(text).split()))


def http_error(
    ep: Endpoint,
    status: int,
    reason: str,
    body: bytes,
    *,
    what: str,
    model: str | None = None,
    retry_after: str | None = None,
) -> LlmcliError:
    """An HTTP error status -> one line that says what to do (refusals exit 2, failures exit 1).
    `retry_after` is the answer's Retry-After header, which a 503 carries to whoever may wait."""
    reason = ep.shown(reason, NAME_LIMIT)
    detail = server_message(body, ep) or reason
    head = f"{what} at {ep.base_url} failed with {status} {reason}".rstrip()
    if status in (401, 403):
        fix = (
            "the server rejected the API key; check --api-key or LLMCLI_API_KEY"
            if ep.api_key
            else "the server wants an API key; give it with --api-key or LLMCLI_API_KEY"
        )
        return RemoteRefused(f"{head}: {fix}")
    if status == 404 and model is not None:
        return RemoteRefused(
            f"{head}: {detail}; is '{ep.shown(model, NAME_LIMIT)}' one of the server's "
            f"models? (`llmcli list --endpoint {ep.base_url}`)"
        )
    if status == 404:
        return RemoteRefused(
            f"{head}: no OpenAI-compatible API there; give the API's base URL, e.g. http://localhost:8000/v1"
        )
    if status in (400, 413, 422):
        return RemoteRefused(f"{head}: {detail}")
    if status == 429:
        return RemoteError(f"{head}: the server is busy ({detail}); try again later")
    if status == 503:
        return RemoteUnavailable(f"{head}: {detail}", retry_after_seconds(retry_after))
    return RemoteError(f"{head}: {detail}")


def get_json(ep: Endpoint, path: str, what: str) -> object:
    import http.client

    dog = Watchdog(2 * ep.timeout)
    conn = ep.connect()
    dog.watch(conn)
    try:
        try:
            conn.request("GET", ep.parts.path + path, headers=ep.headers())
            resp = conn.getresponse()
            body = resp.read(MAX_JSON + 1 if resp.status == 200 else MAX_ERROR_BODY)
            if dog.expired:  # a read cut short by the watchdog may return what it had, without an error
                raise TimeoutError
        except (http.client.HTTPException, OSError) as exc:
            if dog.expired:
                raise too_slow(ep, what, dog.seconds) from None
            if isinstance(exc, TimeoutError):
                raise read_timeout(ep) from None
            raise dropped(ep, type(exc).__name__) from None
        if resp.status != 200:
            raise http_error(
                ep, resp.status, resp.reason, body, what=what, retry_after=resp.getheader("Retry-After")
            )
        if len(body) > MAX_JSON:
            raise RemoteError(
                f"{what} at {ep.base_url} answered with over {MAX_JSON >> 20} MiB; "
                "is it an OpenAI-compatible server?"
            )
        try:
            return json.loads(body)
        except (ValueError, RecursionError):
            raise RemoteError(
                f"{what} at {ep.base_url} did not answer with JSON; is it an OpenAI-compatible "
                "server? (give the API's base URL, e.g. http://localhost:8000/v1)"
            ) from None
    finally:
        dog.cancel()
        conn.close()
