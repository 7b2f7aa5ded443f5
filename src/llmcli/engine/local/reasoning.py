"""A reply's reasoning, token by token, on the engine thread: how many of its tokens were reasoning
(the `reasoning_tokens` of OpenAI's usage), and a budget for them (Anthropic's `thinking.budget_tokens`).

Past the budget the thinking is ended the way llama-server's reasoning budget and vLLM's thinking
budget processor end it: the closing tag's tokens are forced into the reply, one a step, in place of
what the sampler would draw, and the model goes on to its answer from there. The tokens are the same
ones the model would write itself, so the reader (templates/thinking.py) and a grammar waiting for
the answer see an ordinary end of thinking.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.templates.thinking import CLOSE, ReasoningSplitter

# What is forced to end the thinking: the tag on a line of its own, and the break before the answer
# (the shape Qwen3 and the DeepSeek-R1 distills write; the reader drops the whitespace).
FORCED_CLOSE = f"\n{CLOSE}\n\n"


@dataclass(frozen=True)
class ReasoningPlan:
    """What a request's reply may hold: reasoning (its template's form), begun in the prompt or not,
    and at most `budget` reasoning tokens (None: no budget)."""

    parses: bool  # the template's thinking form: a reply may open <think>
    opened: bool  # the prompt left <think> open: the reply starts inside the reasoning
    budget: int | None = None
    close: tuple[int, ...] = ()  # FORCED_CLOSE's tokens, forced once the budget is spent

    @property
    def reads(self) -> bool:
        """Whether a reply can hold reasoning at all (else nothing is counted)."""
        return self.parses or self.opened


class ReasoningCount:
    """One sequence's reasoning tokens: each accepted token is read (`observe`), and past the budget
    the close comes from `forced` instead of the sampler."""

    def __init__(self, plan: ReasoningPlan) -> None:
        self.plan = plan
        self.splitter = ReasoningSplitter(plan.parses, plan.opened)
        self.tokens = 0  # reasoning tokens so far (the tags included)
        self.ended_by_budget = False
        self._undecided = 0  # tokens read before the reply showed whether it opens <think>
        self._forcing: list[int] = []
        self._check_budget()

    def forced(self) -> int | None:
        """The next token of the forced close, or None: the sampler draws."""
        return self._forcing.pop(0) if self._forcing else None

    def observe(self, piece: bytes) -> None:
        """An accepted token's bytes (a tag's bytes are ASCII: a character cut between two tokens
        cannot hide one)."""
        splitter = self.splitter
        before = splitter.state
        if before in ("gap", "answer"):
            return
        splitter.feed(piece.decode("utf-8", "replace"))
        after = splitter.state
        if before == "thinking":
            self.tokens += 1
        elif after == "start":  # only whitespace, or the start of a <think> not yet whole
            self._undecided += 1
            return
        elif after in ("thinking", "gap"):  # this token opened the block: the ones before it too
            self.tokens += self._undecided + 1
        self._undecided = 0
        self._check_budget()

    def _check_budget(self) -> None:
        plan = self.plan
        if (
            plan.budget is not None
            and not self.ended_by_budget
            and self.splitter.state == "thinking"
            and self.tokens >= plan.budget
        ):
            self.ended_by_budget = True
            self._forcing = list(plan.close)
