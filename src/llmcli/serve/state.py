"""What every route shares, made once per process and read from `request.app.state.server`: the
config, the engine, the access gate, the metrics and the render thread; the checks a model route
makes first (loaded?) and the body read. Routes import this, never app.py or each other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llmcli.serve.access import Gate
from llmcli.serve.catalog import Catalog
from llmcli.serve.config import ServeConfig
from llmcli.serve.engine import Engine
from llmcli.serve.errors import ApiError
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.protocol import Defaults, Generation, read_body, validate


@dataclass
class Server:
    """Everything a route needs, made once per process."""

    config: ServeConfig
    engine: Engine
    gate: Gate
    metrics: ServeMetrics
    catalog: Catalog  # the models a request may name: the store's, or the one served
    started: float = field(default_factory=time.time)
    on_status: Callable[[Status], None] | None = None  # the terminal's live status line, each second
    # One thread renders and tokenizes prompts, off the event loop and off the engine thread: the
    # template renderer keeps caches that are not shared between threads.
    drain_deadline: float | None = None  # perf_counter() when a stopping server's grace period ends
    renderer: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="llmcli-render")
    )

    @property
    def defaults(self) -> Defaults:
        from llmcli.engine.tools import detect

        sched = getattr(self.engine, "sched", None)  # loaded: every model route checks that first
        form = detect(self.engine.template_source)  # a few substring tests of the template
        return Defaults(self.config.params, self.config.system, sched.n_ctx_seq if sched else 0, form)

    def drain(self) -> None:
        """SIGTERM: what runs gets the grace period; what comes now is refused."""
        if self.drain_deadline is None:
            self.drain_deadline = time.perf_counter() + self.config.grace

    def ready_or_503(self) -> None:
        """Every route that reads the model answers 503 until it is loaded, as /health does."""
        if self.drain_deadline is not None:
            raise ApiError(503, "the server is shutting down; send the request to another", retry_after=1)
        if self.engine.error is not None:  # the server is on its way down
            raise ApiError(503, "the engine has stopped; the server is shutting down")
        if not self.engine.ready.is_set():
            raise ApiError(503, "the model is still loading; try again in a moment", retry_after=1)

    async def read(self, request, model: type[Any]) -> Any:
        """The body, read no further than --max-body (a chunked body has no Content-Length to check)
        and no later than --timeout after the request arrived (bytes that trickle in keep no one),
        validated into `model`."""
        from starlette.requests import ClientDisconnect

        from llmcli.serve.call import ClientLeft

        cap, timeout = self.config.max_body, self.config.timeout

        async def read() -> bytes:
            data = bytearray()
            async for chunk in request.stream():
                data += chunk
                if len(data) > cap:
                    raise too_large(cap)
            return bytes(data)

        # The deadline cancels this task, as asyncio.timeout does (3.11+): wait_for's own task would
        # cost a turn of the loop, in which a client that sent its body and left looks gone before
        # its body is read.
        task, expired = asyncio.current_task(), []
        assert task is not None
        left = request.state.t_arrival + timeout - time.perf_counter()
        timer = asyncio.get_running_loop().call_later(max(left, 0.0), lambda: expired.append(task.cancel()))
        try:
            data = await read()
        except asyncio.CancelledError:
            if not expired:  # cancelled by the server (its grace period ran out)
                raise
            if hasattr(task, "uncancel"):  # Python 3.11+
                task.uncancel()
            raise ApiError(
                408, f"the request body took longer than {timeout:g} s, the server's --timeout; send it whole"
            ) from None
        except ClientDisconnect:  # gone mid-body (or closed to make room for another connection)
            raise ClientLeft() from None
        finally:
            timer.cancel()
        return validate(model, read_body(data))

    async def prompt(self, gen: Generation) -> Any:
        """The request's prompt as token ids (serve.prompt.Prompt), made in the render thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.renderer, self.engine.prompts.prepare, gen)


def too_large(cap: int) -> ApiError:
    return ApiError(413, f"the body is over {cap:,} bytes, this server's --max-body; send less")


@dataclass
class Status:
    """What a terminal's status line shows."""

    loading: bool
    running: int
    waiting: int
    finished: int
    tokens_per_s: float  # generated in the last interval
    kv_used: float  # 0..1


async def report_status(server: Server, every: float = 1.0) -> None:
    assert server.on_status is not None
    last_tokens, last_t = 0, time.perf_counter()
    while True:
        await asyncio.sleep(every)
        snap, now = server.engine.snapshot, time.perf_counter()
        rate = (snap.generated - last_tokens) / (now - last_t) if snap.generated >= last_tokens else 0.0
        last_tokens, last_t = snap.generated, now
        server.on_status(
            Status(
                loading=not snap.ready,
                running=snap.running,
                waiting=server.engine.queued,
                finished=snap.finished,
                tokens_per_s=rate,
                kv_used=snap.kv_used / snap.n_ctx if snap.n_ctx else 0.0,
            )
        )
