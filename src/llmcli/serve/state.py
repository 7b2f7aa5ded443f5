"""What every route shares, made once per process and read from `request.app.state.server`: the
config, the catalog of models, the pool of loaded ones, the engine, the door (keys, rate) and the
gate (queue, tokens), the metrics and the render thread; the checks a model route makes first, the
model lease and the body read. Routes import this, never app.py or each other."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmcli.serve import heavy
from llmcli.serve.access import Door
from llmcli.serve.budget import parse_keep_alive
from llmcli.serve.call import Call, ClientLeft, Deadlines, Services
from llmcli.serve.catalog import Catalog, Served, UnknownModel
from llmcli.serve.config import ServeConfig
from llmcli.serve.engine import Engine
from llmcli.serve.errors import ApiError, unknown_model
from llmcli.serve.gate import Gate
from llmcli.serve.mailbox import Mailbox
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.models import Model
from llmcli.serve.pool import Lease, Pool
from llmcli.serve.protocol import Defaults, Generation

if TYPE_CHECKING:
    from llmcli.serve.prompt import Prompt


@dataclass
class Server:
    """Everything a route needs, made once per process."""

    config: ServeConfig
    engine: Engine
    gate: Gate
    metrics: ServeMetrics
    catalog: Catalog
    pool: Pool
    door: Door = field(init=False)  # the middleware's: keys and the rate limit
    started: float = field(default_factory=time.time)
    on_status: Callable[[Status], None] | None = None  # the terminal's live status line, each second
    deadlines: Deadlines = field(init=False)  # --timeout, --grace, and when a drain's grace ends
    # One thread renders and tokenizes prompts, off the event loop and off the engine thread: the
    # template renderer keeps caches that are not shared between threads.
    renderer: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(1, thread_name_prefix="llmcli-render")
    )
    _mailbox: Mailbox | None = field(default=None, init=False, repr=False)  # see mailbox()

    def __post_init__(self) -> None:
        self.deadlines = Deadlines(self.config.timeout, self.config.grace)
        self.door = Door(self.config)

    @property
    def drain_deadline(self) -> float | None:
        """perf_counter() when a stopping server's grace period ends; None while it runs."""
        return self.deadlines.drained_at

    @classmethod
    def make(cls, config: ServeConfig, catalog: Catalog, on_fatal=lambda: None, **kwargs: Any) -> Server:
        """The engine thread, the gate, the metrics and the pool, wired together (nothing started)."""
        metrics = ServeMetrics()
        engine = Engine(config, metrics, on_fatal=on_fatal)
        gate = Gate(config, metrics)
        pool = Pool(
            config,
            engine,
            metrics,
            one=catalog.one is not None,
            room=lambda waiting: gate.in_flight + waiting < gate.capacity,
        )
        metrics.watch(engine, pool)
        server = cls(config, engine, gate, metrics, catalog, pool, **kwargs)
        pool.renderer = server.renderer
        return server

    def mailbox(self, loop: asyncio.AbstractEventLoop) -> Mailbox:
        """The engine thread's way to the calls on `loop` (made on the first call)."""
        box = self._mailbox
        if box is None or box.loop is not loop:
            box = self._mailbox = Mailbox(loop)
        return box

    def close_mailbox(self) -> None:
        """After the engine thread has stopped, which alone posts to it."""
        if self._mailbox is not None and not self.engine.alive:
            self._mailbox.close()
            self._mailbox = None

    def defaults(self, model: Model) -> Defaults:
        prompts = model.prompts
        return Defaults(self.config.params, self.config.system, model.n_ctx_seq, prompts.tool_form)

    def find(self, name: str | None) -> Served:
        """The model a request names, or a 404 (in the route's shape, as every ApiError)."""
        try:
            return self.catalog.find(name)
        except UnknownModel as exc:
            raise unknown_model(exc.message) from None

    async def lease(
        self, served: Served, keep_alive: Any, t_arrival: float, where: str = "keep_alive"
    ) -> Lease:
        """The model pinned for this request (loaded if need be, within its --timeout); keep_alive as
        the request sent it (None: the server's --keep-alive)."""
        keep = parse_keep_alive(keep_alive, where)
        return await self.pool.acquire(served, keep, deadline=t_arrival + self.config.timeout)

    def services(self) -> Services:
        """What a call on the running loop uses of the server."""
        post = self.mailbox(asyncio.get_running_loop()).post
        return Services(self.gate, self.engine, self.metrics, post, self.prompt, self.deadlines)

    async def start(self, request, body) -> Call:
        """The request's Call, started: the model its body names found (404 otherwise) and leased
        (loaded if need be), its Generation made, its prompt rendered and submitted. The Call gives
        the lease back when it closes; here, if it fails to start. keep_alive: the body's (OpenAI's
        and Ollama's carry one), else the X-Keep-Alive header, else the server's --keep-alive."""
        served = self.find(body.model)
        sent, where = getattr(body, "keep_alive", None), "keep_alive"
        if sent is None:
            sent, where = request.headers.get("x-keep-alive"), "X-Keep-Alive"
        t_leasing = time.perf_counter()
        lease = await self.lease(served, sent, request.state.t_arrival, where)
        # The model's lease (its load, or the wait for room to load it) is its own clock: neither
        # access nor tokenize (load_ms in timings, Ollama's load_duration).
        load_ms = (time.perf_counter() - t_leasing) * 1000
        try:
            from llmcli.serve.embedding import cannot_chat, embedding_only

            if embedding_only(lease.model):
                raise cannot_chat(served.name)
            gen = await heavy.generation(body, self.defaults(lease.model))
            call = Call(self.services(), gen, request.state.who, request.state.t_arrival, lease, load_ms)
            await call.start()
        except BaseException:
            lease.release()
            raise
        # However the request ends, the access middleware closes what it left open (serve/app.py): a
        # stream whose client left before its first piece never runs the call's own close.
        request.state.call = call
        return call

    def drain(self) -> None:
        """SIGTERM: what runs gets the grace period; what comes now is refused."""
        if self.deadlines.drained_at is None:
            self.deadlines.drained_at = time.perf_counter() + self.config.grace

    def ready_or_503(self) -> None:
        """Every route that reads the model answers 503 until it is loaded, as /health does."""
        if self.drain_deadline is not None:
            raise ApiError(503, "the server is shutting down; send the request to another", retry_after=1)
        if self.engine.error is not None or self.pool.error is not None:  # on its way down
            raise ApiError(503, "the engine has stopped; the server is shutting down")
        if self.pool.starting:  # `llmcli serve MODEL` answers once its one model is loaded
            raise ApiError(503, "the model is still loading; try again in a moment", retry_after=1)

    async def read(self, request, model: type[Any], ready: bool = True) -> Any:
        """The body, read no further than --max-body (a chunked body has no Content-Length to check)
        and no later than --timeout after the request arrived (bytes that trickle in keep no one),
        validated into `model`. `ready`: a route that reads a model answers 503 first until the
        server is up (ready_or_503); the store's routes do not wait for a model."""
        from starlette.requests import ClientDisconnect

        if ready:
            self.ready_or_503()
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
        return await heavy.validated(model, data)

    async def prompt_tokens(self, request, body) -> int:
        """How many tokens the body's prompt is, as its model's template renders it; nothing is
        generated (Anthropic's count_tokens, Responses' input_tokens)."""
        served = self.find(body.model)
        lease = await self.lease(served, None, request.state.t_arrival)
        try:
            prompt = await self.prompt(body.generation(self.defaults(lease.model)), lease.model)
        finally:
            lease.release()
        return len(prompt.tokens)

    async def prompt(self, gen: Generation, model: Model) -> Prompt:
        """The request's prompt as token ids with its reply's room, made in the render thread."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.renderer, model.prompts.prepare, gen)


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
                loading=server.pool.starting,
                running=snap.running,
                waiting=server.engine.queued,
                finished=snap.finished,
                tokens_per_s=rate,
                kv_used=snap.kv_used / snap.n_ctx if snap.n_ctx else 0.0,
            )
        )
