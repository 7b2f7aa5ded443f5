"""A reply's reasoning counted token by token, and its budget: past it, the close is forced."""

from __future__ import annotations

import pytest

from llmcli.engine.local.reasoning import ReasoningCount, ReasoningPlan

CLOSE = (901, 902, 903)  # stands for FORCED_CLOSE's tokens: only their order matters here


def read(count: ReasoningCount, pieces: list[str]) -> list[int | None]:
    """Each piece accepted in turn; what `forced` said before each one."""
    said = []
    for piece in pieces:
        said.append(count.forced())
        count.observe(piece.encode())
    return said


@pytest.mark.parametrize(
    "plan, pieces, reasoning",
    [
        # the prompt left <think> open: every token up to the one that closes it
        (ReasoningPlan(True, True), ["a", " b", "</think>", "\n\n", "yes"], 3),
        # the reply opens it, after whitespace the reader drops: the whitespace counts with it
        (ReasoningPlan(True, False), ["\n", "<think>", "a", "</", "think>", "yes"], 5),
        # a reply that never opens it: nothing, however it starts
        (ReasoningPlan(True, False), ["\n", "yes", " <think>"], 0),
        (ReasoningPlan(False, False), ["<think>", "a"], 0),
    ],
    ids=["opened-in-prompt", "opened-by-reply", "never-opened", "no-thinking-form"],
)
def test_the_tokens_of_the_thinking_block_are_counted(plan, pieces, reasoning):
    count = ReasoningCount(plan)
    assert read(count, pieces) == [None] * len(pieces)
    assert count.tokens == reasoning


def test_past_the_budget_the_close_is_forced_then_the_sampler_draws_again():
    count = ReasoningCount(ReasoningPlan(True, True, budget=2, close=CLOSE))
    said = read(count, ["a", " b", "\n", "</think>", "\n\n", "answer"])
    assert said == [None, None, 901, 902, 903, None]
    assert count.ended_by_budget and count.tokens == 4  # the budget, and the close up to its tag


def test_a_budget_of_0_closes_at_once_and_one_the_model_keeps_to_forces_nothing():
    at_once = ReasoningCount(ReasoningPlan(True, True, budget=0, close=CLOSE))
    assert at_once.forced() == 901
    kept = ReasoningCount(ReasoningPlan(True, True, budget=5, close=CLOSE))
    assert read(kept, ["a", "</think>", "b", "c", "d", "e", "f"]) == [None] * 7
    assert not kept.ended_by_budget and kept.tokens == 2
