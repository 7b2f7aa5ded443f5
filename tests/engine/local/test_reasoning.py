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


# -- on the real model, through the scheduler ------------------------------------------------------
@pytest.mark.parametrize("in_graph", [False, True], ids=["host-argmax", "graph-greedy"])
def test_the_scheduler_forces_the_close_at_the_budget_and_the_reply_goes_on(embedded_path, in_graph):
    """Greedy picks made on the host or in llama.cpp's graph (a GPU's default) alike give way to the
    forced close; the model then writes its answer after it."""
    from llmcli.engine.local.reasoning import FORCED_CLOSE
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.local.scheduler import Scheduler
    from llmcli.engine.local.scheduler_config import SchedulerConfig
    from llmcli.engine.local.sequence import Request
    from llmcli.engine.sampling import SamplingParams

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=512, n_threads=1, n_seq_max=1))
    try:
        close = tuple(rt.tokenize(FORCED_CLOSE, parse_special=True))
        prompt = rt.tokenize(
            "<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n<think>\n", parse_special=True
        )
        plan = ReasoningPlan(True, True, budget=4, close=close)
        sched = Scheduler(rt, SchedulerConfig(greedy_in_graph=in_graph))
        seq = sched.submit(Request(prompt, SamplingParams(temperature=0.0, max_tokens=16), reasoning=plan))
        while sched.busy:
            sched.step()
        sched.close()
    finally:
        rt.close()
    assert tuple(seq.generated[4 : 4 + len(close)]) == close
    assert len(seq.generated) > 4 + len(close)  # the answer after it
    assert seq.reasoning is not None and seq.reasoning.ended_by_budget
    assert 4 < seq.reasoning.tokens < 4 + len(close)  # the tag's tokens, not the break after it
    assert "</think>" in seq.text and seq.text.split("</think>", 1)[1].strip()
