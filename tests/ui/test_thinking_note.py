"""A one-shot reply that ends inside its thinking (-n reached before any answer) says so once."""

from __future__ import annotations

import io

import pytest

from llmcli.engine.sampling import SamplingParams
from llmcli.environment import Environment, installed
from llmcli.usecases.chat import ChatOptions
from tests.engine.test_thinking import R1_DISTILL, session
from tests.support.grammar import CLOSE_THEN_ANSWER


@pytest.fixture
def own_runtime(embedded_path):
    """one_shot closes its session and the runtime with it: never the shared fixture's."""
    from llmcli.engine.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=1024, n_threads=1))
    yield rt
    rt.close()


def run_one_shot(s, opts: ChatOptions) -> tuple[str, str]:
    from llmcli.ui.chat_flow import one_shot

    out, err = io.StringIO(), io.StringIO()
    with installed(Environment(vars={}, stdin=io.StringIO(""), stdout=out, stderr=err)):
        one_shot(s, "test", "What is two plus two?", opts)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("show", [False, True])
def test_a_reply_cut_inside_its_thinking_is_one_note_not_silence(own_runtime, monkeypatch, show):
    s = session(own_runtime, R1_DISTILL, CLOSE_THEN_ANSWER, monkeypatch)  # the prompt opens <think>
    s.params = SamplingParams(temperature=0, max_tokens=4)  # ends before </think>
    out, err = run_one_shot(s, ChatOptions(stats=False, show_thinking=show))
    assert out == ""
    notes = [line for line in err.splitlines() if line.startswith("llmcli: ")]
    assert notes == [
        "llmcli: the reply ended inside its thinking after 4 tokens, before any answer; raise -n"
        + ("" if show else " or use --show-thinking")
    ], err


def test_a_reply_that_answers_has_no_note(own_runtime, monkeypatch):
    s = session(own_runtime, R1_DISTILL, CLOSE_THEN_ANSWER, monkeypatch)
    out, err = run_one_shot(s, ChatOptions(stats=False))
    assert out.strip() and "thinking" not in err
