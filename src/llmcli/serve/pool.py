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
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from llmcli.serve.catalog import Served
from llmcli.serve.config import ServeConfig
from llmcli.serve.errors import ApiError
from llmcli.serve.models import Model

FOREVER = math.inf
# Go's time.ParseDuration units, as Ollama reads keep_alive ("5m", "1h30m", "10s", "-1m").
UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
DURATION = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:h|ms|m|s|us|µs|ns)")
MEMORY_MARGIN = 0.1  # of the memory available at start, kept back from the models by default


def parse_keep_alive(value: Any, where: str = "keep_alive") -> float | None:
    """Ollama's keep_alive: a duration ("5m", "1h30m"), or a number of seconds; negative: for ever
    (math.inf); None: the server's default. ApiError (400) naming the field otherwise."""
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return FOREVER if value < 0 else float(value)
    if isinstance(value, str) and 0 < len(value) <= 64:
        text = value.strip()
        sign, body = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
        if re.fullmatch(r"\d+(?:\.\d+)?", body):
            seconds = float(body)
        elif body and re.fullmatch(f"(?:{DURATION.pattern})+", body):
            seconds = 0.0
            for part in DURATION.findall(body):
                unit = re.search(r"[a-zµ]+$", part)
                assert unit is not None
                seconds += float(part[: unit.start()]) * UNIT_S[unit.group()]
        else:
            seconds = -1.0
        if seconds >= 0 and math.isfinite(seconds):
            return FOREVER if sign < 0 and seconds > 0 else seconds
    shown = repr(value)[:80]
    raise ApiError(
        400,
        f'{where} {shown} is not a duration; give one such as "5m", "1h30m" or "10s", a number of '
        "seconds, a negative value to keep the model loaded, or 0 to unload it once idle",
        where,
    )


def parse_duration_option(text: str, flag: str) -> float:
    """A duration flag (--keep-alive) as seconds; UsageError (exit 2) naming the flag."""
    from llmcli.errors import UsageError

    try:
        seconds = parse_keep_alive(text, flag)
    except ApiError as exc:
        raise UsageError(exc.message) from None
    assert seconds is not None
    return seconds


def parse_size_option(text: str, flag: str) -> int:
    """A size flag (--max-memory: 8G, 512M, bytes) as bytes; UsageError (exit 2) naming the flag."""
    from llmcli.environment import SIZE_SUFFIXES
    from llmcli.errors import UsageError

    raw = text.strip().upper().removesuffix("B")
    number, unit = (raw[:-1], raw[-1]) if raw and raw[-1] in SIZE_SUFFIXES else (raw, "")
    try:
        value = float(number) * SIZE_SUFFIXES[unit]
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1):
        raise UsageError(
            f"--max-memory {text[:40]!r} is not a size; give bytes with an optional K, M or G suffix, e.g. 8G"
        )
    return int(value)


def estimate(path: str, ctx: int | None) -> int:
    """Bytes a model takes once loaded: its weights (the file) + its KV cache (n_ctx x the bytes a
    token takes), the arithmetic `--ctx` is checked with (limits.check_context)."""
    from llmcli.engine.local.runtime import DEFAULT_CTX
    from llmcli.gguf_check import model_facts

    facts = model_facts(path)
    n_ctx = ctx or min(facts.context_length or DEFAULT_CTX, DEFAULT_CTX)
    return facts.size + n_ctx * (facts.kv_bytes_per_token() or 0)


def default_budget() -> float:
    """The memory available at start, less a margin for the server itself and the machine."""
    from llmcli.limits import available_memory

    free = available_memory()
    return math.inf if free is None else free * (1 - MEMORY_MARGIN)


@dataclass
class LoadedModel:
    """A loaded model, as /api/ps and `llmcli ps` show it."""

    name: str
    path: str
    size: int  # bytes, estimated: weights + KV cache
    size_vram: int  # of those, on a device (0 on CPU)
    expires_at: float | None  # epoch seconds; None: never
    context_length: int = 0
    facts: dict[str, Any] = field(default_factory=dict)


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
        self.name = slot.served.name

    def release(self) -> None:
        self.pool.release(self)


class Pool:
    def __init__(self, config: ServeConfig, engine, metrics, one: bool = False, room=lambda: True) -> None:
        self.config, self.engine, self.metrics = config, engine, metrics
        self.one = one  # `llmcli serve MODEL`: the model stays for ever, whatever a request asks
        self.room = room  # False when the bounded queue is full (a waiting request is one in it)
        self.keep_alive = FOREVER if one else config.keep_alive
        self.max_models = config.max_models or math.inf
        self.budget = math.inf if one else (config.max_memory or default_budget())
        self.slots: dict[str, Slot] = {}
        self.waiting = 0  # requests waiting for room
        self.error: BaseException | None = None  # the one model's load failed (the server stops)
        self._changed = asyncio.Event()
        self._sizes: dict[str, int] = {}
        self.loader = ThreadPoolExecutor(1, thread_name_prefix="llmcli-loader")

    # -- the contract ----------------------------------------------------------------------------
    async def acquire(
        self, served: Served, keep_alive: float | None = None, deadline: float | None = None
    ) -> Lease:
        """The model, loaded, pinned until the lease is released. `deadline`: perf_counter() by
        which it must be ready (504 after)."""
        keep = self.keep_alive if keep_alive is None or self.one else keep_alive
        while True:
            slot = self.slots.get(served.name)
            if slot is not None and slot.closing:
                await self._wait(slot.closed.wait(), deadline)
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
                    f"the model {served.name} needs about {_size(size)} (weights + KV cache), more than "
                    f"this server's memory budget of {_size(self.budget)} (--max-memory); give a larger "
                    "--max-memory or a smaller --ctx",
                )
            if self._make_room(size):
                self.slots[served.name] = new = Slot(served, size, asyncio.Future())
                new.ready = asyncio.ensure_future(self._load(new))
                continue
            if not self.room():
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
                slot.model.facts,
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
        key = served.path.as_posix()
        if key not in self._sizes:
            loop = asyncio.get_running_loop()
            self._sizes[key] = await loop.run_in_executor(None, estimate, key, self.config.ctx)
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
        self.engine.remove(slot.served.name, lambda: loop.call_soon_threadsafe(self._closed, slot))

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


def _size(n: float) -> str:
    return "unlimited" if n == math.inf else f"{n / 1e9:.2f} GB"
