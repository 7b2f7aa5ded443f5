"""A one-shot reply that ends inside its thinking (-n reached before any answer) says so once."""

from __future__ import annotations

import io

import pytest

from llmcli.engine.sampling import SamplingParams
from llmcli.environment import Environment
from llmcli.usecases.chat import ChatOptions
from tests.engine.templates.test_thinking import (
    ANSWER_AFTER_THINKING,
    QWEN3,
    R1_DISTILL,
    THINK_THEN_ANSWER,
    session,
)


@pytest.fixture
def own_runtime(embedded_path):
    """one_shot closes its session and the runtime with it: never the shared fixture's."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=1024, n_threads=1))
    yield rt
    rt.close()


def run_one_shot(s, opts: ChatOptions) -> tuple[str, str]:
    from llmcli.ui.answer import AnswerView
    from llmcli.usecases.answer import ask_once

    out, err = io.StringIO(), io.StringIO()
    view = AnswerView(Environment(vars={}, stdin=io.StringIO(""), stdout=out, stderr=err), opts, "test")
    answer = ask_once(s, "What is two plus two?", opts.constraint, view.hooks())
    view.show(answer, lambda: None)
    return out.getvalue(), err.getvalue()


@pytest.mark.parametrize("show", [False, True])
def test_a_reply_cut_inside_its_thinking_is_one_note_not_silence(own_runtime, show):
    # The prompt opens <think>; the grammar waits for the model to close it, which 4 tokens never do.
    s = session(own_runtime, R1_DISTILL, ANSWER_AFTER_THINKING)
    s.params = SamplingParams(temperature=0, max_tokens=4)  # ends before </think>
    out, err = run_one_shot(s, ChatOptions(stats=False, show_thinking=show))
    assert out == ""
    notes = [line for line in err.splitlines() if line.startswith("llmcli: ")]
    assert notes == [
        "llmcli: the reply ended inside its thinking after 4 tokens, before any answer; raise -n"
        + ("" if show else " or use --show-thinking")
    ], err


def test_a_reply_that_answers_has_no_note(own_runtime):
    s = session(own_runtime, QWEN3, THINK_THEN_ANSWER)  # the grammar thinks, closes, then answers
    out, err = run_one_shot(s, ChatOptions(stats=False))
    assert out.strip() and "thinking" not in err


def test_a_repl_turn_cut_inside_its_thinking_is_one_note_naming_the_repl_setting(own_runtime, tmp_path):
    from llmcli.store import Store
    from llmcli.ui.repl import Repl

    s = session(own_runtime, R1_DISTILL, ANSWER_AFTER_THINKING)
    s.params = SamplingParams(temperature=0, max_tokens=4)  # ends before </think>
    out, err = io.StringIO(), io.StringIO()
    env = Environment(vars={}, stdin=io.StringIO(""), stdout=out, stderr=err)
    repl = Repl(env, s, "test", Store(tmp_path), ChatOptions(stats=False))
    repl._turn("What is two plus two?")
    notes = [line for line in err.getvalue().splitlines() if line.startswith("llmcli: ")]
    assert notes == [
        "llmcli: the reply ended inside its thinking after 4 tokens, before any answer; "
        "raise it with /set max_tokens N"
    ], err.getvalue()
    assert out.getvalue().strip() == ""
