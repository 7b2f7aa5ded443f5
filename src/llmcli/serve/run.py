"""Run the server until SIGTERM or Ctrl-C: bind, load the model behind /health, serve, drain.

SIGTERM (and the first Ctrl-C) stops accepting, gives in-flight requests the grace period to
finish, then stops the engine thread, which frees every cell. uvicorn would re-raise the signal
once drained (the process would die of it); here the caller gets it back as a value instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import math
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from llmcli.errors import LlmcliError, RuntimeFailure, UsageError
from llmcli.serve.catalog import Catalog
from llmcli.serve.config import ServeConfig

# accept() out of a resource: descriptors (the process's, the system's), socket buffers, memory.
NO_ROOM = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
ACCEPT_QUIET_S = 0.5  # after a failed accept(), the rest of that accept pass is skipped


class Listener(socket.socket):
    """The listening socket, telling `on_exhausted` when accept() finds no descriptor (or memory) left.

    asyncio's accept loop (CPython 3.10-3.12) logs a traceback for each failed accept() and goes on
    through its whole backlog, scheduling a retry for each: millions of lines a minute, and no
    time left to serve. Here the first failure goes up (asyncio then pauses accepting for a
    second) and the rest of that pass ends as if no connection were waiting."""

    on_exhausted: Callable[[OSError], None] | None = None
    _quiet_until = 0.0

    def accept(self):
        if time.monotonic() < self._quiet_until:
            raise BlockingIOError(errno.EAGAIN, "accepting paused: out of descriptors")
        try:
            return super().accept()
        except OSError as exc:
            if exc.errno not in NO_ROOM:
                raise
            self._quiet_until = time.monotonic() + ACCEPT_QUIET_S
            if self.on_exhausted is not None:
                self.on_exhausted(exc)
            raise


def quiet_accept_errors(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The loop's exception handler: a failed accept() was reported by the Listener; the rest as usual."""
    exc = context.get("exception")
    if isinstance(exc, OSError) and exc.errno in NO_ROOM:
        return
    loop.default_exception_handler(context)


def bind(host: str, port: int) -> Listener:
    """The listening socket, made here so that a taken port is one clear line (and port 0 works)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise UsageError(
            f"--host {host} is not an address here ({exc.strerror}); give an IP or a host name"
        ) from None
    family, kind, proto, _, address = infos[0]
    sock = Listener(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port") from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def serve(
    config: ServeConfig,
    catalog: Catalog,
    on_listening: Callable[[str], None],
    on_status: Callable[[Any], None] | None = None,
    debug: bool = False,
    on_warning: Callable[[str], None] = lambda text: None,
) -> int:
    """Serve the catalog's models until told to stop; the signal that stopped it (0: none). Raises
    what failed the engine (or the load of `llmcli serve MODEL`'s one model).
    on_status: given a state.Status every second (a terminal's live status line). debug: uvicorn's
    own log lines and tracebacks on stderr (else it says nothing: llmcli speaks for itself).
    on_warning: a line about the server's health (running out of descriptors), at most once a minute."""
    import uvicorn

    from llmcli.gguf_check import model_facts
    from llmcli.serve.app import create_app
    from llmcli.serve.connections import Doorman, protocol_class
    from llmcli.serve.state import Server

    if catalog.one is not None:  # a file llama.cpp would refuse (or crash on) fails before we listen
        model_facts(catalog.one.path)
    sock = bind(config.host, config.port)
    uv: Any = None

    def engine_stopped() -> None:  # from the engine thread: main_loop reads the flag every 0.1 s
        if uv is not None:
            uv.should_exit = True

    server = Server.make(config, catalog, on_fatal=engine_stopped, on_status=on_status)
    doorman = Doorman(config.connections, config.header_timeout, server.metrics, warn=on_warning)
    sock.on_exhausted = doorman.out_of_descriptors
    app = create_app(server)
    uv = _server(
        server.drain,
        uvicorn.Config(
            app,
            log_config=None,
            log_level="warning" if debug else "critical",
            access_log=False,  # a request line is nobody's business on stderr (and never a key)
            server_header=False,
            http=protocol_class(doorman),  # h11, with the head deadline and the connection cap
            ws="none",  # no WebSocket routes: an Upgrade header is ignored
            # uvicorn's idle timer; the doorman's deadline (the same, to the second) holds even when
            # bytes trickle in.
            timeout_keep_alive=max(1, math.ceil(config.header_timeout)),
            # At --grace each reply still running ends with a 503 or a stream's error event (call.py);
            # uvicorn cancels what is left a little later.
            timeout_graceful_shutdown=round(config.grace) + 2,
            lifespan="on",
        ),
    )
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    on_listening(f"http://{shown}:{port}")
    asyncio.run(_serve(uv, sock))
    error = server.engine.error or server.pool.error
    if error is not None:
        if isinstance(error, LlmcliError):
            raise error
        raise RuntimeFailure(f"the engine stopped: {type(error).__name__}: {error}")
    return uv.stopped_by


async def _serve(uv: Any, sock: Listener) -> None:
    asyncio.get_running_loop().set_exception_handler(quiet_accept_errors)
    await uv.serve(sockets=[sock])


def _server(on_stop: Callable[[], None], config) -> Any:
    """uvicorn.Server with the signals kept: handled and reported, never re-raised."""
    import uvicorn

    class Server(uvicorn.Server):
        stopped_by = 0

        @contextlib.contextmanager
        def capture_signals(self):
            handled = (signal.SIGINT, signal.SIGTERM)
            before = {sig: signal.signal(sig, self.on_signal) for sig in handled}
            try:
                yield
            finally:
                for sig, handler in before.items():
                    signal.signal(sig, handler)

        def on_signal(self, sig, frame) -> None:
            self.stopped_by = self.stopped_by or sig
            on_stop()
            self.handle_exit(sig, frame)

    return Server(config)


def find_model(store, text: str | None, default_model: str | None, home, pulling):
    """MODEL as `chat` reads it (a store name, a GGUF path, REPO[:QUANT], pulled if need be), else
    $LLMCLI_MODEL, else the embedded model."""
    from llmcli.model_ref import default_model_ref, model_ref
    from llmcli.usecases.pull import find_or_pull

    ref = model_ref(text, home) if text else default_model_ref(default_model, home)
    return find_or_pull(ref, store, pulling=pulling)
