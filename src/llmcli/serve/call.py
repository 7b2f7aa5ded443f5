"""One serve request, from its typed body to its last event: the one record the event loop and the
engine thread share (the engine thread takes it through its inbox and writes its own fields).

`start` has its prompt rendered and tokenized (in the render thread), submits the call and waits
for the engine's answer (a 400 or 503 before any byte is sent);
`events` then yields its text (Pieces, each of one choice: OpenAI's n asks for several) and, last,
its Outcome, which every route consumes in one of two ways: `choices` (or `whole`, the first)
collects the reply, `streamed` renders it piece by piece and then each choice's Ending. The call
closes itself when its events end; a client that leaves, or the request's time limit, cancels the
sequence: the engine frees its cells in its next step. A stream never started (its client left
first) runs no `finally`: the access middleware closes what its request left open (`close` runs once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from llmcli.engine.templates.thinking import REASONING, ReasoningSplitter
from llmcli.engine.tools.reader import ReplyReader
from llmcli.serve.errors import ApiError
from llmcli.serve.gate import Gate, Need, Reservation
from llmcli.serve.outcome import Delta, Outcome, Refused, Started, combined
from llmcli.serve.protocol import Generation
from llmcli.serve.reply import Ending, Piece, Reply

if TYPE_CHECKING:
    from llmcli.serve.metrics import ServeMetrics
    from llmcli.serve.prompt import Prompt

# serve.engine and serve.models take a Call (the engine thread writes its fields), and serve.pool's
# Lease carries a serve.models.Model, so this module names them only through what it uses of them
# (Inbox; the lease and its model as Any): no import runs back.


class Inbox(Protocol):
    """The engine thread's inbox (serve.engine.Engine)."""

    def submit(self, call: Call) -> None: ...

    def cancel(self, call: Call) -> None: ...


POLL_S = 0.25  # how often a non-streamed request looks for a client that left


def _wake(waiter: asyncio.Future | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(None)


class ClientLeft(Exception):
    """The client closed the connection before its answer was ready."""


@dataclass
class Deadlines:
    """The server's clocks for a request: its --timeout, its --grace, and when a stopping server's
    grace period ends (perf_counter(); None while it runs)."""

    timeout: float
    grace: float
    drained_at: float | None = None


@dataclass(frozen=True)
class Services:
    """What a call uses of the server, and nothing else of it."""

    gate: Gate  # the queue places and the token reservations
    engine: Inbox
    metrics: ServeMetrics  # the inter-token latencies the engine saw, observed on the loop
    post: Callable[[Callable[[Any], None], Any], None]  # the loop's mailbox: from the engine thread
    render: Callable[[Generation, Any], Awaitable[Prompt]]  # (the request, its model): the render thread
    deadlines: Deadlines


class Call:
    """One request. The event loop makes it, starts it and reads its events; once submitted, the
    engine thread writes the fields below the line (its sequences and their counters), and the loop
    reads the request's progress only through the events the engine delivers."""

    def __init__(
        self, services: Services, gen: Generation, who: str, t_arrival: float, lease: Any, load_ms: float
    ) -> None:
        self.services = services
        self.gen = gen
        self.who = who
        self.t_arrival = t_arrival  # time.perf_counter() when the request arrived
        self.lease = lease  # serve.pool.Lease: its model pinned until the call closes
        self.served = lease.served  # serve.catalog.Served: the model's name and file, as found
        self.model = lease.model  # serve.models.Model: its template, its engine-thread side
        self.queue: asyncio.Queue = asyncio.Queue()
        self._loop = asyncio.get_running_loop()
        # From the engine thread, onto this request's queue on the loop's thread, in the engine's order.
        self.deliver: Callable[[object], None] = partial(services.post, self._arrive)
        self.deadline = t_arrival + services.deadlines.timeout
        self.load_ms = load_ms  # the model's lease: its load, or the wait for room to load it
        self.access_ms = 0.0  # arrival to rendering, the lease left out: key, limits, body, parse
        self.tokenize_ms = 0.0  # the render thread's, then the engine thread's admission
        self.prompt: Prompt | None = None  # rendered and tokenized before the engine sees the call
        self.outcome: Outcome | None = None  # the request's (its choices' together)
        self.outcomes: list[Outcome | None] = [None] * gen.n  # each choice's
        self.logprobs: list[list[Any]] = [[] for _ in range(gen.n)]  # each choice's TokenLogprobs
        self._logprobs_taken = [0] * gen.n
        self.readers: list[ReplyReader] = []  # each choice's (once started): reasoning, answer, calls
        self.postprocess_s = 0.0  # stage ⑤ on this side: splitting, building chunks
        self.return_s = 0.0  # stage ⑥: handing them to the connection
        self._counted = False
        self.reservation: Reservation | None = None  # its tokens against --token-limit (None: no limit)
        self._started = False  # the engine has queued its sequences (Started came)
        self._polled = time.perf_counter()
        self._waiter: asyncio.Future | None = None  # what _next awaits while the queue is empty
        self._timer: asyncio.TimerHandle | None = None  # wakes _next to look at its clocks (_arrival)
        # -- the engine thread's, once submitted --------------------------------------------------
        self.seqs: list = []  # its Sequences (engine/local), one a choice
        self.t_last: float | None = None  # when choice 0's last token was sampled (inter-token latency)
        self.n_seen = 0  # choice 0's reply tokens counted in the metrics so far
        self.logprobs_sent: list[int] = []  # each choice's logprobs delivered so far
        self.left = 0  # choices still running
        self.dropped = False  # cancelled before the engine took it

    def _arrive(self, event: object) -> None:
        """On the event loop, in the engine's order, whether anyone still reads the queue or not: the
        token ledger learns the exact prompt (Started) and what the request used (its Outcome; a
        cancelled, disconnected or timed-out one's too, as the engine answers a cancel with one)."""
        gate = self.services.gate
        if isinstance(event, Started):
            self._started = True
            refused = gate.resize(self.reservation, self._need(event))
            if refused is not None:
                event = refused  # start() answers it; its close() cancels the sequence
        elif isinstance(event, Outcome):
            self.services.metrics.observe_itl()  # the engine's latencies so far, on this thread, not its
            self.outcomes[event.index] = event
            if all(self.outcomes):
                whole = combined([o for o in self.outcomes if o is not None])
                gate.settle(self.reservation, whole.prompt_tokens + whole.completion_tokens)
        elif isinstance(event, Refused):
            gate.settle(self.reservation, 0)
        self.queue.put_nowait(event)
        _wake(self._waiter)

    def _need(self, started: Started) -> Need:
        asked = self.gen.max_tokens is not None
        return Need(started.prompt_tokens, started.max_tokens, asked, exact=True, choices=self.gen.n)

    async def start(self) -> Started:
        services = self.services
        self.reservation = services.gate.admit(self.who, Need.estimate(self.gen, self.model.snapshot.n_ctx))
        self._counted = True  # admit took a place in the queue: close gives it back
        t_rendering = time.perf_counter()
        self.access_ms = (t_rendering - self.t_arrival) * 1000 - self.load_ms
        try:
            prompt = services.render(self.gen, self.model)
            self.prompt = await asyncio.wait_for(prompt, max(self.deadline - t_rendering, 0.001))
        except asyncio.TimeoutError:
            self.close()
            raise self._timeout() from None
        except BaseException:  # refused (too long, a failing template), or cancelled
            self.close()
            raise
        self.tokenize_ms = (time.perf_counter() - t_rendering) * 1000
        services.engine.submit(self)
        try:
            event = await asyncio.wait_for(self.queue.get(), max(self.deadline - time.perf_counter(), 0.001))
        except asyncio.TimeoutError:
            self.close()
            raise self._timeout() from None
        except BaseException:  # cancelled (the server's grace period ran out): give the place back
            self.close()
            raise
        if isinstance(event, Refused):
            self.close()
            raise ApiError(event.status, event.message, event.param, code=event.code)
        if isinstance(event, ApiError):  # the exact prompt made it over the token limit
            self.close()
            raise event
        assert isinstance(event, Started)
        parses, tools = self.model.prompts.thinking.parses, self.gen.tools
        self.readers = [
            ReplyReader(tools, ReasoningSplitter(parses, event.opens_thinking)) for _ in range(self.gen.n)
        ]
        return event

    def ending(self, index: int) -> Ending:
        """How choice `index` ended (once its Outcome has come): the engine's outcome and its calls."""
        outcome, reader = self.outcomes[index], self.readers[index]
        assert outcome is not None
        if not reader.reads_calls:
            return Ending(outcome)
        parsed = reader.parsed()
        return Ending(outcome, tuple(parsed.calls), parsed.malformed)

    def take_logprobs(self, index: int) -> list[Any]:
        """The TokenLogprobs of choice `index` that arrived since the last take (a stream's chunk)."""
        entries = self.logprobs[index][self._logprobs_taken[index] :]
        self._logprobs_taken[index] = len(self.logprobs[index])
        return entries

    async def events(
        self, disconnected: Callable[[], Awaitable[bool]] | None = None
    ) -> AsyncIterator[Piece | Outcome]:
        """Pieces of the choices' replies and, last, the request's Outcome (each choice's is then in
        self.outcomes); a choice read for tool calls gives its calls as Pieces of kind CALL.
        `disconnected`: polled while waiting (a streamed response learns of a client that left from
        its own send instead)."""
        assert self.readers
        left = self.gen.n
        try:
            while True:
                event = await self._next(disconnected)
                t0 = time.perf_counter()
                if isinstance(event, Refused):
                    raise ApiError(event.status, event.message, event.param)
                if isinstance(event, Delta):
                    self.logprobs[event.index] += event.logprobs
                    read = self.readers[event.index].feed(event.text)
                else:
                    assert isinstance(event, Outcome)
                    read = self.readers[event.index].finish()
                    left -= 1
                self.postprocess_s += time.perf_counter() - t0
                for kind, text, call in read:
                    yield Piece(kind, text, event.index, call)
                if not left:
                    self.outcome = combined([o for o in self.outcomes if o is not None])
                    yield self.outcome
                    return
        finally:
            self.close()

    async def whole(self, disconnected: Callable[[], Awaitable[bool]]) -> Reply:
        """The reply (the first choice), collected: see `choices`."""
        return (await self.choices(disconnected))[0]

    async def choices(self, disconnected: Callable[[], Awaitable[bool]]) -> list[Reply]:
        """Every choice's reply, collected. Raises ClientLeft (the client closed the connection; the
        sequences are cancelled) or ApiError (the time limit, or the engine failed)."""
        parts: list[dict[str, list[str]]] = [{REASONING: [], "answer": []} for _ in range(self.gen.n)]
        try:
            async for item in self.events(disconnected):
                if isinstance(item, Piece) and item.call is None:  # calls are collected by the readers
                    parts[item.choice][item.kind if item.kind == REASONING else "answer"].append(item.text)
        finally:
            self.close()
        assert self.outcome is not None  # the last item events yields
        return [
            Reply("".join(p["answer"]), "".join(p[REASONING]), self.ending(i), self.logprobs[i])
            for i, p in enumerate(parts)
        ]

    async def streamed(
        self,
        render: Callable[[Piece | Ending], str | bytes | None],
        failed: Callable[[ApiError], str | bytes],
    ) -> AsyncIterator[str | bytes]:
        """Each piece of the reply, then each choice's Ending (self.outcome is set by then), as
        `render(item)` words it (None: nothing to send yet); rendering counts as stage ⑤
        (post-process), the wait until the connection asks for the next piece as ⑥ (return). The time
        limit or an engine failure ends the stream with `failed(error)`, and self.outcome stays None
        (a stream's status was sent with its start)."""
        try:
            async for item in self.events():
                items = [self.ending(i) for i in range(self.gen.n)] if isinstance(item, Outcome) else [item]
                for each in items:
                    t0 = time.perf_counter()
                    data = render(each)
                    t1 = time.perf_counter()
                    self.postprocess_s += t1 - t0
                    if data is None:
                        continue
                    yield data
                    self.return_s += time.perf_counter() - t1
        except ApiError as exc:
            yield failed(exc)

    async def _next(self, disconnected: Callable[[], Awaitable[bool]] | None) -> object:
        while True:
            now = time.perf_counter()
            drained = self.services.deadlines.drained_at
            left = min(self.deadline, drained if drained is not None else self.deadline) - now
            if left <= 0:
                raise self._timeout() if drained is None or self.deadline <= drained else self._drained()
            # Tokens may arrive faster than POLL_S: look for a client that left on a clock, not only
            # when the queue is quiet.
            if disconnected is not None and now - self._polled >= POLL_S:
                self._polled = now
                if await disconnected():
                    raise ClientLeft()
            if self.queue.empty():
                await self._arrival(min(left, POLL_S))
                if self.queue.empty():
                    continue  # the wait ran out: the clock and the client again
            return self.queue.get_nowait()

    async def _arrival(self, timeout: float) -> None:
        """Until the engine queues an event, or `timeout` s at most: one future a token, where
        asyncio.wait_for(queue.get()) made a task, a second future and a timer for every token. The
        timer stays for the waits after (it may wake one early: the caller looks at its clocks and
        waits again); a new one is made when it has rung or would ring too late."""
        loop = self._loop
        self._waiter = waiter = loop.create_future()
        at = loop.time() + timeout
        if self._timer is None or self._timer.when() > at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(at, self._ring)
        try:
            await waiter
        finally:
            self._waiter = None

    def _ring(self) -> None:
        self._timer = None
        _wake(self._waiter)

    def _drained(self) -> ApiError:
        """The server is stopping and the grace period ran out before this reply was done: a 503 (in
        the route's shape) for a whole answer, the last event of a stream, never a cut-off reply."""
        return ApiError(
            503,
            f"the server is shutting down and the {self.services.deadlines.grace:g} s grace period "
            "(--grace) ran out before the reply was done; send the request again",
            retry_after=1,
        )

    def _timeout(self) -> ApiError:
        return ApiError(
            504, f"the request took longer than {self.services.deadlines.timeout:g} s, the server's --timeout"
        )

    def close(self) -> None:
        """Once: cancel the sequence if it has not finished and give back its place. Its tokens are
        charged when the engine's Outcome comes (_arrive), read or not. The model's lease goes too:
        a sequence still running is cancelled first, in the engine's inbox order."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._counted:
            self.lease.release()
            return
        self._counted = False
        gate = self.services.gate
        gate.leave()
        if self.outcome is None:
            self.services.engine.cancel(self)
            if not self._started:  # a call the engine drops before queueing it never answers
                gate.release(self.reservation)
        self.lease.release()
