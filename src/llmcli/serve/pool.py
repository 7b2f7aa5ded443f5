"""The loaded models, on the event loop: which stay, which go, and the leases that pin them.

A route asks `acquire` for a model by its `Served` name and gets a Lease: the model is loaded if it
was not (in the loader thread, one load at a time, never on the event loop or the engine thread),
and it is never evicted while a lease holds it. `release` starts its keep-alive: a model nobody
holds goes after `keep_alive` seconds (0: at once, math.inf: never). A model that does not fit
(--max-models, --max-memory) first makes room by unloading the least recently used idle models; if
none is idle the request waits, within its --timeout; if it could never fit, 507 names the budget.
The engine thread frees a model once its last sequence is gone (`Engine.remove`).
"""

from __future__ import annotations

import asyncio
import math
import time
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.serve.budget import FOREVER, default_budget, estimate, gb
from llmcli.serve.catalog import Served, not_found
from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError, unknown_model
from llmcli.serve.models import Model


@dataclass
class LoadedModel:
    """A loaded model, as /api/ps and `llmcli ps` show it."""

    name: str
    path: str
    size: int  # bytes, estimated: weights + KV cache
    size_vram: int  # of those, on a device (0 on CPU)
    expires_at: float | None  # epoch seconds; None: never
    context_length: int = 0


@dataclass(eq=False)
class Slot:
    served: Served
    size: int
    ready: asyncio.Future  # the load: done once the engine has the model
    model: Model | None = None
    leases: int = 0
    keep: float = FOREVER
    last_used: float = 0.0
    expires_at: float | None = None
    closing: bool = False  # no new lease: on its way out
    removing: bool = False  # the engine was told to close it
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    timer: asyncio.TimerHandle | None = None


class Lease:
    """A model pinned for one request; `release` once (again: nothing)."""

    def __init__(self, pool: Pool, slot: Slot) -> None:
        self.pool, self.slot, self.released = pool, slot, False
        assert slot.model is not None
        self.model: Model = slot.model
        self.served = slot.served
        self.name = slot.served.name

    def release(self) -> None:
        self.pool.release(self)


class Pool:
    def __init__(
        self, config: ServeConfig, engine, metrics, one: bool = False, room=lambda waiting: True
    ) -> None:
        self.config, self.engine, self.metrics = config, engine, metrics
        self.one = one  # `llmcli serve MODEL`: the model stays for ever, whatever a request asks
        self.room = room  # room(waiting): False when the bounded queue is full (a waiting request is in it)
        self.keep_alive = FOREVER if one else config.keep_alive
        self.max_models = config.max_models or math.inf
        self.budget = math.inf if one else (config.max_memory or default_budget())
        self.slots: dict[str, Slot] = {}
        self.waiting = 0  # requests waiting for room
        self.error: BaseException | None = None  # the one model's load failed (the server stops)
        self._changed = asyncio.Event()
        self._sizes: dict[tuple[Path, tuple[int, int]], int] = {}
        self._retiring: set[asyncio.Future] = set()  # unloads of models whose file changed
        # Names a delete is removing: a request that found one before is a 404, and never loads it
        # again between the unload and the removal.
        self.deleting: set[str] = set()
        self.loader = ThreadPoolExecutor(1, thread_name_prefix="llmcli-loader")
        self.renderer: Executor | None = None  # the server's render thread (Server.make sets it)

    # -- the contract ----------------------------------------------------------------------------
    async def acquire(
        self, served: Served, keep_alive: float | None = None, deadline: float | None = None
    ) -> Lease:
        """The model, loaded, pinned until the lease is released. `deadline`: perf_counter() by
        which it must be ready (504 after)."""
        keep = self.keep_alive if keep_alive is None or self.one else keep_alive
        while True:
            if served.name in self.deleting:  # found before the delete began: gone once it ends
                raise unknown_model(not_found(served.name).message)
            slot = self.slots.get(served.name)
            if slot is not None and slot.closing:
                await self._wait(slot.closed.wait(), deadline)
                continue
            if slot is not None and slot.served != served and not self.one:
                # The name's file changed since it was loaded (pulled or converted again): the old
                # model goes once its requests have ended, and this request loads the new file.
                slot.closing = True
                self._retiring.add(task := asyncio.ensure_future(self.unload(served.name)))
                task.add_done_callback(self._retiring.discard)
                continue
            if slot is not None:
                slot.leases += 1
                slot.keep = keep
                self._stop_timer(slot)
                try:
                    await self._wait(asyncio.shield(slot.ready), deadline)
                except BaseException as exc:
                    self._let_go(slot)
                    if isinstance(exc, Exception) and not isinstance(exc, ApiError):
                        raise ApiError(500, f"the model {served.name} failed to load: {exc}") from exc
                    raise
                slot.last_used = time.monotonic()
                return Lease(self, slot)
            size = await self._estimate(served)
            if served.name in self.slots:
                continue  # another request began its load meanwhile
            if size > self.budget:
                raise ApiError(
                    507,
                    f"the model {served.name} needs about {gb(size)} (weights + KV cache), more than "
                    f"this server's memory budget of {gb(self.budget)} (--max-memory); give a larger "
                    "--max-memory or a smaller --ctx",
                )
            if self._make_room(size):
                self.slots[served.name] = new = Slot(served, size, asyncio.Future())
                new.ready = asyncio.ensure_future(self._load(new))
                continue
            if not self.room(self.waiting):
                raise ApiError(503, "the server is busy (the queue is full); try again", retry_after=1)
            self.waiting += 1
            try:
                await self._wait(self._changed.wait(), deadline)
            finally:
                self.waiting -= 1

    def release(self, lease: Lease) -> None:
        if lease.released:
            return
        lease.released = True
        self._let_go(lease.slot)

    def loaded(self) -> list[LoadedModel]:
        return [
            LoadedModel(
                name,
                slot.served.path.as_posix(),
                slot.size,
                round(slot.size * slot.model.on_device),
                slot.expires_at if slot.leases == 0 else self._expiry(slot),
                slot.model.snapshot.n_ctx,
            )
            for name, slot in self.slots.items()
            if slot.model is not None and not slot.closing
        ]

    async def unload(self, name: str) -> bool:
        """Unload the model once its requests have ended; False when it was not loaded."""
        slot = self.slots.get(name)
        if slot is None:
            return False
        slot.closing = True
        while not slot.removing:
            if slot.ready.done() and slot.leases == 0:
                if slot.model is None:  # its load failed: already gone
                    return False
                self._remove(slot)
                break
            changed = self._changed
            await changed.wait()
        await slot.closed.wait()
        return True

    # -- the rest --------------------------------------------------------------------------------
    @property
    def starting(self) -> bool:
        """`llmcli serve MODEL` before its model is loaded (the store's server is ready at once)."""
        return self.one and not any(slot.model is not None for slot in self.slots.values())

    async def preload(self, served: Served) -> None:
        """`llmcli serve MODEL`: the one model, loaded at start. A failed load stops the server."""
        try:
            lease = await self.acquire(served)
        except BaseException as exc:
            self.error = exc.__cause__ or exc
            raise
        self.release(lease)

    def close(self) -> None:
        for slot in self.slots.values():
            self._stop_timer(slot)
        self.loader.shutdown(wait=False, cancel_futures=True)

    async def _estimate(self, served: Served) -> int:
        key = (served.path, served.stamp)  # a file replaced under the same path is estimated again
        if key not in self._sizes:
            loop = asyncio.get_running_loop()
            path = served.path.as_posix()
            self._sizes[key] = await loop.run_in_executor(None, estimate, path, self.config.ctx)
        return self._sizes[key]

    def _make_room(self, size: int) -> bool:
        """Unload the least recently used idle models until `size` more would fit; True when it fits
        now (False: wait for the models on their way out, or for one to become idle)."""
        staying = [s for s in self.slots.values() if not s.closing]
        while len(staying) + 1 > self.max_models or sum(s.size for s in staying) + size > self.budget:
            idle = [s for s in staying if s.leases == 0 and s.model is not None]
            if not idle:
                return False
            victim = min(idle, key=lambda s: s.last_used)
            self._remove(victim)
            staying.remove(victim)
        every = self.slots.values()
        return len(every) + 1 <= self.max_models and sum(s.size for s in every) + size <= self.budget

    async def _load(self, slot: Slot) -> None:
        loop = asyncio.get_running_loop()
        name, path = slot.served.name, slot.served.path.as_posix()
        t0 = time.perf_counter()
        try:
            model = await loop.run_in_executor(self.loader, Model, name, path, self.config)
        except BaseException:
            del self.slots[name]
            slot.closed.set()
            self._notify()
            raise
        self.engine.add(model)
        slot.model, slot.last_used = model, time.monotonic()
        self.metrics.loads.labels(model_name=name).inc()
        self.metrics.load_time.observe(time.perf_counter() - t0)
        self._notify()

    def _let_go(self, slot: Slot) -> None:
        slot.leases -= 1
        slot.last_used = time.monotonic()
        if slot.leases == 0 and slot.model is not None:
            slot.expires_at = self._expiry(slot)
            if slot.keep == 0:
                self._remove(slot)
            elif slot.keep != FOREVER:
                slot.timer = asyncio.get_running_loop().call_later(slot.keep, self._expire, slot)
        self._notify()

    def _expiry(self, slot: Slot) -> float | None:
        return None if slot.keep == FOREVER else time.time() + slot.keep

    def _expire(self, slot: Slot) -> None:
        slot.timer = None
        if self.slots.get(slot.served.name) is slot and slot.leases == 0 and not slot.removing:
            self._remove(slot)

    def _stop_timer(self, slot: Slot) -> None:
        if slot.timer is not None:
            slot.timer.cancel()
            slot.timer = None

    def _remove(self, slot: Slot) -> None:
        """Tell the engine to close an idle, loaded model; it stays counted until it is closed."""
        self._stop_timer(slot)
        slot.closing = slot.removing = True
        loop = asyncio.get_running_loop()

        def tell_engine() -> None:
            self.engine.remove(slot.served.name, lambda: loop.call_soon_threadsafe(self._closed, slot))

        # Through the render thread first: a request that gave its lease back while its prompt was
        # still being rendered (its client left) has that render finish before the model is closed.
        try:
            if self.renderer is None:
                raise RuntimeError("no render thread")
            self.renderer.submit(tell_engine)
        except RuntimeError:  # the server is stopping: the engine closes every model itself
            tell_engine()

    def _closed(self, slot: Slot) -> None:
        if self.slots.get(slot.served.name) is slot:
            del self.slots[slot.served.name]
        slot.model = None
        slot.closed.set()
        self.metrics.unloads.labels(model_name=slot.served.name).inc()
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait(self, awaitable, deadline: float | None) -> Any:
        if deadline is None:
            return await awaitable
        try:
            return await asyncio.wait_for(awaitable, max(deadline - time.perf_counter(), 0.001))
        except asyncio.TimeoutError:
            raise ApiError(
                504, f"the request took longer than {self.config.timeout:g} s, the server's --timeout"
            ) from None
