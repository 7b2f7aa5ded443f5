"""What `llmcli serve` is told: the listening address, the pool, the access rules, the schedule."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.offload import EVERY_LAYER, GpuLayers
from llmcli.serve.options import (
    GRACE,
    HEADER_TIMEOUT,
    HOST,
    MAX_BODY,
    MAX_QUEUE,
    PARALLEL,
    PORT,
    RANGES,
    TIMEOUT,
)

if TYPE_CHECKING:
    from llmcli.engine.templates.choice import TemplateChoice

# What a browser sends as Origin: a scheme, a host and maybe a port, in lower case; no path. `*`
# allows any, and `localhost` (llama-server's keyword) every loopback origin, which are allowed
# anyway (as Ollama does). The CORS middleware compares origins as strings: anything else never
# matches.
ORIGIN = re.compile(r"\*|localhost|[a-z][a-z0-9+.-]*://([a-z0-9_.~-]+|\[[0-9a-f:.]+\])(:[0-9]{1,5})?")
ORIGIN_RULE = "a browser sends its origin as scheme://host[:port], in lower case, with no path or wildcard"


def origin_refusal(origin: str) -> str | None:
    """Why a --cors-origin can never match a browser's Origin (with a value that would), or None."""
    shown = repr(origin[:80])
    if ORIGIN.fullmatch(origin):
        return None
    if "*" in origin:
        return (
            f"--cors-origin {shown} holds a wildcard, which matches no Origin ({ORIGIN_RULE}); "
            "give each origin whole, or * alone for any"
        )
    if ORIGIN.fullmatch(origin.lower()):
        return (
            f"--cors-origin {shown} has capitals, which match no Origin ({ORIGIN_RULE}); "
            f"give {origin.lower()}"
        )
    return (
        f"--cors-origin {shown} is not an origin ({ORIGIN_RULE}); "
        "give one such as https://app.example.com, or * for any"
    )


LOOPBACK_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:\d+)?"


# Descriptors kept back from connections: the listening socket, the model file, stdio, and the
# connections one pass of asyncio's accept loop takes in before the cap can close any (the server
# itself holds about ten).
RESERVED_FDS = 64
MAX_CONNECTIONS = 1024  # the default cap where the descriptor limit allows more


@dataclass
class ServeConfig:
    """What serve is told (model_name: the one model of `llmcli serve MODEL`, empty when it serves the
    store; the catalog holds its file), checked once, when it is made (check_config): a ServeConfig is
    valid."""

    model_name: str
    host: str = HOST
    port: int = PORT
    parallel: int = PARALLEL  # sequences decoded together
    ctx: int | None = None  # the KV pool, shared by every sequence (None: the runtime's default)
    threads: int | None = None
    gpu_layers: GpuLayers = EVERY_LAYER  # --gpu-layers: every layer by default, as llama.cpp
    pooling: str | None = None  # --pooling: chat models embed too, pooled so (serve/embedding.py)
    system: str | None = None  # prepended to a chat that has no system message of its own
    params: SamplingParams = field(default_factory=SamplingParams)  # defaults a request may override
    stops: list[str] = field(default_factory=list)
    filter_words: list[str] = field(default_factory=list)
    api_keys: list[str] = field(default_factory=list)
    rate_limit: int | None = None  # requests a minute, per key
    token_limit: int | None = None  # prompt + completion tokens a minute, per key
    max_body: int = MAX_BODY
    max_queue: int = MAX_QUEUE  # requests waiting for a sequence; one more is 503 at once
    timeout: float = TIMEOUT  # seconds a request may take from its arrival: body, queue and reply
    header_timeout: float = HEADER_TIMEOUT  # seconds a connection may take to send a request's head
    max_connections: int | None = None  # open connections at most (None: see connection_cap)
    grace: float = GRACE  # seconds in-flight requests get to finish after SIGTERM
    cors_origins: list[str] = field(default_factory=list)  # browser origins allowed beside loopback ones
    read_only: bool = False  # no pull, delete or copy over the API
    ui: bool = True  # the chat page at /ui (--no-ui: off)
    chat_template: TemplateChoice | None = None  # --chat-template FILE: every model's, instead of its own
    keep_alive: float = 300.0  # seconds an idle model stays loaded (math.inf: for ever)
    max_models: int | None = None  # models loaded at once (None: as many as --max-memory holds)
    max_memory: int | None = None  # bytes the loaded models may take (None: what is free at start, less 10%)
    # The connection cap: --max-connections, or what the descriptor limit allows (set when checked).
    connections: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        check_config(self)

    def __repr__(self) -> str:  # the keys never reach a log or a traceback
        return f"ServeConfig(model={self.model_name!r}, {self.host}:{self.port}, keys={len(self.api_keys)})"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


# Why no client could send a key, as (test, what is wrong, the fix), first match wins. A key travels
# in an HTTP header (`Authorization: Bearer KEY` or `x-api-key: KEY`), whose value is visible ASCII
# with spaces inside only: servers and clients trim the spaces around it, and refuse or mangle the rest.
UNSENDABLE = (
    (lambda key: not key.strip(), "is empty", "give a key"),
    (lambda key: any(ord(c) > 0x7F for c in key), "holds a character that is not ASCII", "use ASCII only"),
    (
        lambda key: any(ord(c) < 0x20 or ord(c) == 0x7F for c in key),
        "holds a control character (a NUL, a tab, an escape...)",
        "remove it",
    ),
    (lambda key: key != key.strip(" "), "begins or ends with a space", "remove the spaces around it"),
)


def check_key(key: str, where: str) -> None:
    """Refuse a key no client could send, naming where it came from (never the key itself)."""
    for test, what, fix in UNSENDABLE:
        if test(key):
            raise UsageError(f"{where} {what}; {fix} (an HTTP header carries visible ASCII only)")


def check_config(config: ServeConfig) -> None:
    """Refuse what must not start: a key no client could send, an open address without a key,
    numbers out of their range (the table in options.py). ServeConfig calls it when it is made."""
    many = len(config.api_keys) > 1
    for i, key in enumerate(config.api_keys, 1):
        check_key(key, f"--api-key #{i}" if many else "--api-key")
    if not config.api_keys and not is_loopback(config.host):
        raise UsageError(
            f"--host {config.host} listens beyond this machine and no key is set; "
            "add --api-key KEY (or --api-key-file FILE), or listen on 127.0.0.1"
        )
    for name, bounds in RANGES.items():
        refusal = bounds.refusal(getattr(config, name))
        if refusal:
            raise UsageError(refusal)
    from llmcli.limits import check, check_threads

    if config.ctx is not None:
        check("--ctx", config.ctx, "ctx", "give a smaller --ctx")
    check_threads(config.threads)
    for origin in config.cors_origins:
        refusal = origin_refusal(origin)
        if refusal:
            raise UsageError(refusal)
    config.connections = connection_cap(config)


def descriptor_limit() -> int | None:
    """This process's soft limit on open files (`ulimit -n`); None where there is none to read."""
    try:
        import resource
    except ImportError:  # not a Unix
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(config: ServeConfig) -> int:
    """--max-connections, or min(1024, ulimit -n - 64): below the descriptor limit either way, so
    that the cap, not a failing accept(), decides who is let in."""
    fds = descriptor_limit()
    room = MAX_CONNECTIONS if fds is None else fds - RESERVED_FDS
    if room < 1:
        raise UsageError(
            f"ulimit -n is {fds}, too few open files to serve; raise it (`ulimit -n 1024`) and start again"
        )
    if config.max_connections is None:
        return min(MAX_CONNECTIONS, room)
    if config.max_connections < 1:
        raise UsageError(f"--max-connections must be at least 1, not {config.max_connections}")
    if config.max_connections > room:
        raise UsageError(
            f"--max-connections {config.max_connections} is more than this process may open "
            f"(ulimit -n is {fds}, {RESERVED_FDS} kept for the server itself); "
            f"give at most {room}, or raise ulimit -n"
        )
    return config.max_connections


def read_key_file(path: Path) -> list[str]:
    """One key a line; blank lines and `#` comments are skipped. An empty file is a mistake, and so
    is a key no client could send (named by its line, never shown)."""
    from llmcli.limits import limit

    cap = limit("option_file_bytes")
    with open(path, "rb") as fh:
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise UsageError(f"--api-key-file {path} is over {cap:,} bytes; give a file of keys, one a line")
    # utf-8-sig: an editor's byte order mark would otherwise be the first key's first character, and
    # that key would never match. Bytes that are not UTF-8 stay as surrogates, refused as not ASCII.
    text = data.decode("utf-8-sig", "surrogateescape")
    keys = []
    # Lines end at \n (and \r\n) only: str.splitlines would also cut a key at \v, \f or \x1c and make
    # two keys of it, where a control character in a key is refused.
    for n, line in enumerate(text.split("\n"), 1):
        line = line.removesuffix("\r")
        if line.strip() and not line.lstrip().startswith("#"):
            check_key(line, f"--api-key-file {path} line {n}: the key")
            keys.append(line)
    if not keys:
        raise UsageError(f"--api-key-file {path} holds no key; write one key a line")
    return keys
