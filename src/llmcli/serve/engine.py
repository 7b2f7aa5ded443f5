"""The engine thread: it alone touches the llama contexts, and steps the loaded models in turn.

The event loop hands it commands through a thread-safe inbox (submit, cancel, add a loaded model,
remove one, stop) and gets each request's events back through the `deliver` callback the request
brought, which posts them to the loop's mailbox (serve/mailbox.py), onto that request's
asyncio.Queue. Before each step it drains its inbox, so a cancel (a client that left) frees the
sequence's cells within one step, and a new request on another model waits for at most one step of
the busy one: the busy models take turns, one scheduler step (one llama_decode) each. When nothing
is busy it blocks on the inbox: no polling, no spinning. Loading happens elsewhere (the pool's
loader thread); a loaded Model arrives here through the inbox, and leaves through it too, closed
here once its last sequence is gone.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llmcli.serve.config import ServeConfig
from llmcli.serve.embedding import EmbedQueue
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.models import Model, Snapshot
from llmcli.serve.outcome import Refused

if TYPE_CHECKING:
    from llmcli.serve.call import Call

__all__ = ["Engine", "Snapshot"]


class Engine:
    def __init__(self, config: ServeConfig, metrics: ServeMetrics, on_fatal: Callable[[], None]) -> None:
        self.config = config
        self.metrics = metrics
        self.on_fatal = on_fatal  # called from the engine thread when it stops for good
        self.error: BaseException | None = None
        self.snapshot = Snapshot()  # every loaded model's together
        # A deque and an Event rather than a queue.Queue: a busy engine looks at its inbox before every
        # step, and an empty Queue answers get_nowait with a lock taken and an exception raised.
        self._inbox: deque[tuple[str, Any]] = deque()
        self._mail = threading.Event()  # set after each put: an idle engine waits on it
        self._models: dict[str, Model] = {}  # the engine thread's own: the event loop never reads it
        self._removing: dict[str, Callable[[], None]] = {}  # name -> called once it is closed
        self._embeds = EmbedQueue()  # embedding and rerank jobs: one decode a turn, beside the chat steps
        self._turn = 0  # round robin: the index of the model whose step comes next
        self._thread = threading.Thread(target=self._main, name="llmcli-engine", daemon=True)

    # -- the event loop's side ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, call: Call) -> None:
        """A call whose prompt is tokenized and fits: its sequences are queued in the next step."""
        self._post("submit", call)

    def cancel(self, call: Call) -> None:
        self._post("cancel", call)

    def embed(self, job: Any) -> None:
        """An embedding request, run with the others drained beside it in one decode, or a rerank
        (serve/embedding.py)."""
        self._post("embed", job)

    def add(self, model: Model) -> None:
        """A model the loader made: requests for it may be submitted right after (the inbox is FIFO)."""
        self._post("add", model)

    def remove(self, name: str, done: Callable[[], None]) -> None:
        """Close the model once its last sequence is gone (it gets no new ones), then call `done`
        (from the engine thread)."""
        self._post("remove", (name, done))

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what is left, free every cell, close every model; wait for the thread."""
        self._post("stop", None)
        self._thread.join(timeout)

    def _post(self, kind: str, what: Any) -> None:
        self._inbox.append((kind, what))  # before the wake-up: the engine clears it, then drains
        self._mail.set()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def queued(self) -> int:
        return self.snapshot.waiting + len(self._inbox)

    # -- the engine thread -------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # reported by the command once the server has stopped
            self.error = exc
            for model in self._models.values():
                for call in {id(call): call for call, _ in model.calls.values()}.values():
                    call.deliver(Refused(500, f"the engine failed: {exc}"))
            self._embeds.refuse_all(f"the engine failed: {exc}")
            self.on_fatal()
        finally:
            for model in self._models.values():
                model.close()
            self._models.clear()
            for done in self._removing.values():
                done()
            self.snapshot = Snapshot()

    def _busy(self) -> bool:
        for model in self._models.values():
            if model.busy:
                return True
        return False

    def _loop(self) -> None:
        inbox, mail = self._inbox, self._mail
        busy = False  # a model has sequences left after the last step
        while True:
            if not inbox and not busy and not self._embeds.pending:
                mail.wait()
            if mail.is_set():
                mail.clear()  # before the drain: a command posted from here on sets it again
            stopping = False
            while inbox:
                stopping = self._handle(*inbox.popleft()) or stopping
            if stopping:
                self._embeds.refuse_all("the server is stopping; send the request again")
                for model in self._models.values():
                    for call, _ in list(model.calls.values()):
                        model.cancel(call)
                while self._busy():
                    self._step_next()
                return
            if self._embeds.pending:
                self._embeds.step(self._models, self.metrics)
            busy = self._step_next()
            if self._removing:
                self._retire()

    def _handle(self, kind: str, what: Any) -> bool:
        """One command; True for stop."""
        if kind == "stop":
            return True
        if kind == "embed":
            self._embeds.add(what)
        elif kind == "add":
            self._models[what.name] = what
        elif kind == "remove":
            name, done = what
            if name in self._models:
                self._removing[name] = done
            else:
                done()
        elif kind == "submit":
            model = self._models.get(what.model.name)
            if model is None:  # the pool never lets this happen: a lease keeps its model here
                what.deliver(Refused(503, f"the model {what.model.name} is not loaded; try again"))
                return False
            try:
                model.submit(what)
            except Exception as exc:
                # Queueing this one request's sequences failed: the scheduler never ran them, so it
                # alone fails and the rest go on.
                what.deliver(Refused(500, f"the request failed: {type(exc).__name__}: {exc}"))
        else:
            model = self._models.get(what.model.name)
            if model is not None:
                model.cancel(what)
        return False

    def _step_next(self) -> bool:
        """One step of the next busy model, in turn; whether any model is busy after it."""
        if len(self._models) == 1:  # no turns to take; its snapshot is the server's
            (model,) = self._models.values()
            sched = model.sched
            if not sched.busy:
                return False
            model.step(self.metrics)
            self.snapshot = model.snapshot
            return sched.busy
        models = list(self._models.values())
        for i in range(len(models)):
            model = models[(self._turn + i) % len(models)]
            if model.busy:
                self._turn = (self._turn + i + 1) % len(models)
                model.step(self.metrics)
                self._publish()
                break
        return self._busy()

    def _retire(self) -> None:
        """Close the models asked to go whose last sequence has gone."""
        from llmcli.serve.models import give_back_memory

        for name in [n for n in self._removing if not self._models[n].busy]:
            model = self._models.pop(name)
            model.close()
            del model
            give_back_memory()
            self._publish()
            self._removing.pop(name)()

    def _publish(self) -> None:
        if len(self._models) == 1:  # its snapshot is the server's: no sum to build after every step
            (model,) = self._models.values()
            self.snapshot = model.snapshot
            return
        snaps = [model.snapshot for model in self._models.values()]
        self.snapshot = Snapshot(
            **{
                name: sum(getattr(s, name) for s in snaps)
                for name in ("running", "waiting", "kv_used", "kv_cached", "n_ctx", "finished", "generated")
            },
        )
