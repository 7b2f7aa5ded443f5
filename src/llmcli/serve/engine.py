"""The engine thread: it alone touches the llama contexts, and steps the loaded models in turn.

The event loop hands it commands through a thread-safe queue (submit, cancel, add a loaded model,
remove one, stop) and gets each request's events back through the `deliver` callback the request
brought, which puts them on that request's asyncio.Queue with loop.call_soon_threadsafe. Before each
step it drains its inbox, so a cancel (a client that left) frees the sequence's cells within one step,
and a new request on another model waits for at most one step of the busy one: the busy models take
turns, one scheduler step (one llama_decode) each. When nothing is busy it blocks on the inbox: no
polling, no spinning. Loading happens elsewhere (the pool's loader thread); a loaded Model arrives
here through the inbox, and leaves through it too, closed here once its last sequence is gone.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from llmcli.serve.config import ServeConfig
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.models import Model, Snapshot
from llmcli.serve.outcome import Refused
from llmcli.serve.protocol import Generation

__all__ = ["Engine", "Job", "Snapshot"]


@dataclass
class Job:
    """One request on its way through the engine thread."""

    gen: Generation
    deliver: Callable[[object], None]  # thread-safe: onto the request's asyncio.Queue
    t_arrival: float  # time.perf_counter() when the request arrived
    model: str = ""  # the loaded model (its store name) that answers it
    access_ms: float = 0.0
    prompt: Any = None  # its serve.prompt.Prompt, rendered and tokenized before it reaches the engine
    seqs: list = field(default_factory=list)  # its Sequences (engine/local), one a choice, once submitted
    tokenize_ms: float = 0.0
    t_last: float | None = None  # when choice 0's last token was sampled (inter-token latency)
    n_seen: int = 0  # choice 0's reply tokens counted in the metrics so far
    logprobs_sent: list[int] = field(default_factory=list)  # each choice's logprobs delivered so far
    left: int = 0  # choices still running
    dropped: bool = field(default=False)  # cancelled before the engine took it


class Engine:
    def __init__(self, config: ServeConfig, metrics: ServeMetrics, on_fatal: Callable[[], None]) -> None:
        self.config = config
        self.metrics = metrics
        self.on_fatal = on_fatal  # called from the engine thread when it stops for good
        self.ready = threading.Event()  # the thread runs
        self.error: BaseException | None = None
        self.snapshot = Snapshot(ready=True)  # every loaded model's together
        self._inbox: queue.Queue = queue.Queue()
        self._models: dict[str, Model] = {}  # the engine thread's own: the event loop never reads it
        self._removing: dict[str, Callable[[], None]] = {}  # name -> called once it is closed
        self._turn = 0  # round robin: the index of the model whose step comes next
        self._thread = threading.Thread(target=self._main, name="llmcli-engine", daemon=True)

    # -- the event loop's side ---------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self._inbox.put(("submit", job))

    def cancel(self, job: Job) -> None:
        self._inbox.put(("cancel", job))

    def add(self, model: Model) -> None:
        """A model the loader made: requests for it may be submitted right after (the inbox is FIFO)."""
        self._inbox.put(("add", model))

    def remove(self, name: str, done: Callable[[], None]) -> None:
        """Close the model once its last sequence is gone (it gets no new ones), then call `done`
        (from the engine thread)."""
        self._inbox.put(("remove", (name, done)))

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what is left, free every cell, close every model; wait for the thread."""
        self._inbox.put(("stop", None))
        self._thread.join(timeout)

    @property
    def queued(self) -> int:
        return self.snapshot.waiting + self._inbox.qsize()

    # -- the engine thread -------------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.ready.set()
            self._loop()
        except BaseException as exc:  # reported by the command once the server has stopped
            self.error = exc
            for model in self._models.values():
                for job in {id(job): job for job, _ in model.jobs.values()}.values():
                    job.deliver(Refused(500, f"the engine failed: {exc}"))
            self.on_fatal()
        finally:
            for model in self._models.values():
                model.close()
            self._models.clear()
            for done in self._removing.values():
                done()
            self.snapshot = Snapshot()

    def _busy(self) -> bool:
        return any(model.busy for model in self._models.values())

    def _loop(self) -> None:
        while True:
            try:
                command = self._inbox.get(block=not self._busy())
            except queue.Empty:
                command = None
            stopping = False
            while command is not None:
                stopping = self._handle(*command) or stopping
                try:
                    command = self._inbox.get_nowait()
                except queue.Empty:
                    command = None
            if stopping:
                for model in self._models.values():
                    for job, _ in list(model.jobs.values()):
                        model.cancel(job)
                while self._busy():
                    self._step_next()
                return
            self._step_next()
            self._retire()

    def _handle(self, kind: str, what: Any) -> bool:
        """One command; True for stop."""
        if kind == "stop":
            return True
        if kind == "add":
            self._models[what.name] = what
        elif kind == "remove":
            name, done = what
            if name in self._models:
                self._removing[name] = done
            else:
                done()
        elif kind == "submit":
            model = self._models.get(what.model)
            if model is None:  # the pool never lets this happen: a lease keeps its model here
                what.deliver(Refused(503, f"the model {what.model} is not loaded; try again"))
                return False
            try:
                model.submit(what)
            except Exception as exc:
                # Rendering or tokenizing this one request failed before its sequence was
                # queued: the scheduler never saw it, so it alone fails and the rest go on.
                what.deliver(Refused(500, f"the request failed: {type(exc).__name__}: {exc}"))
        else:
            model = self._models.get(what.model)
            if model is not None:
                model.cancel(what)
        return False

    def _step_next(self) -> None:
        """One step of the next busy model, in turn."""
        models = list(self._models.values())
        for i in range(len(models)):
            model = models[(self._turn + i) % len(models)]
            if model.busy:
                self._turn = (self._turn + i + 1) % len(models)
                model.step(self.metrics)
                self._publish()
                return

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
        snaps = [model.snapshot for model in self._models.values()]
        self.snapshot = Snapshot(
            **{
                name: sum(getattr(s, name) for s in snaps)
                for name in ("running", "waiting", "kv_used", "kv_cached", "n_ctx", "finished", "generated")
            },
            ready=True,
        )
