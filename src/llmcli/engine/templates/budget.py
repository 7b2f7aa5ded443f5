"""The budget a chat template renders under: CPU time and the size of what it builds.

The sandbox (sandbox.py) charges the current budget on every loop step, call and chunk of output;
`bounded` makes a budget current for one render.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

from llmcli.errors import TemplateError

RENDER_SECONDS = 2.0  # CPU seconds one render may take; real templates need milliseconds
RENDER_CHARS = 4_000_000  # the largest rendered prompt or intermediate string (far past any context)


class TemplateLimit(TemplateError):
    """A template went past the render budget (time or size)."""


@dataclass
class Budget:
    seconds: float = RENDER_SECONDS
    max_chars: int = RENDER_CHARS
    deadline: float = 0.0
    ticks: int = 0
    json_text: Callable[[str, bool], str] | None = None  # tojson's text of defused data (defuse.py)

    def start(self) -> Budget:
        self.deadline = time.thread_time() + self.seconds
        self.ticks = 0
        return self

    def tick(self) -> None:
        self.ticks += 1
        if self.ticks & 63 == 0 and time.thread_time() > self.deadline:
            raise TemplateLimit(
                f"the chat template ran for over {self.seconds:g} s of CPU and was stopped; "
                "use a model with a sane template"
            )

    def size(self, n: int, what: str = "a string") -> None:
        if n > self.max_chars:
            raise TemplateLimit(
                f"the chat template tried to build {what} of {n:,} characters (limit "
                f"{self.max_chars:,}) and was stopped; use a model with a sane template"
            )


_BUDGET: ContextVar[Budget | None] = ContextVar("llmcli_template_budget", default=None)


def current_budget() -> Budget:
    budget = _BUDGET.get()
    if budget is None:  # rendering outside `bounded()`: still bounded, by a fresh budget
        budget = Budget().start()
        _BUDGET.set(budget)
    return budget


class bounded:
    """`with bounded(budget):` — the budget every guard of the sandbox charges while a render runs."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget.start()

    def __enter__(self) -> Budget:
        self._token = _BUDGET.set(self.budget)
        return self.budget

    def __exit__(self, *exc: object) -> None:
        _BUDGET.reset(self._token)
