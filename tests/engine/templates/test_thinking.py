"""Thinking models: the reasoning part of a reply is recognised from the model's own template and
tokens, streamed apart from the answer, counted apart in the stats, and kept in history only as
the template keeps it. The real embedded model writes the thinking block, shaped by a grammar that
goes through llmcli's own constrained decoding (the session's Sampler and its grammar check), as
`--grammar` does; a 135M model does not think by itself."""

from __future__ import annotations

import random
import re

import pytest

from llmcli.engine.events import ReasoningDelta, TextDelta, drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.engine.templates.thinking import (
    ANSWER,
    REASONING,
    ReasoningSplitter,
    ThinkingForm,
    opens_thinking,
)
from tests.corpus import corpus_templates

QWEN3 = "Qwen-Qwen3-0.6B.jinja"
R1_DISTILL = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"

# Shaped as Qwen3 writes it: `<think>\n…\n</think>\n\n` then an answer that starts and ends with a letter.
ANSWER_RULE = "[A-Z] [a-z ]{1,16} [a-z]"
THINK_THEN_ANSWER = f'root ::= "<think>\\n" [a-z ]{{1,16}} "\\n</think>\\n\\n" {ANSWER_RULE}'
# A prompt that opens <think> leaves the reply unconstrained until the model closes the block (as
# llama.cpp's lazy grammar): from there on, the grammar shapes the answer.
ANSWER_AFTER_THINKING = f'root ::= "\\n\\n" {ANSWER_RULE}'


def joined(pieces):
    kinds = {REASONING: "", ANSWER: ""}
    for kind, text in pieces:
        kinds[kind] += text
    return kinds[REASONING], kinds[ANSWER]


@pytest.mark.parametrize("seed", range(30))
def test_the_splitter_gives_the_same_parts_however_the_stream_is_cut(seed):
    rng = random.Random(seed)
    reply = "\n<think>\nfirst I add </thin k> then </think>\n\n The answer <think> is 4."
    cuts = sorted(rng.sample(range(1, len(reply)), rng.randint(1, 20)))
    splitter = ReasoningSplitter(parses=True, opened=False)
    pieces = []
    for a, b in zip([0, *cuts], [*cuts, len(reply)], strict=True):
        pieces += splitter.feed(reply[a:b])
    pieces += splitter.flush()
    assert joined(pieces) == ("\nfirst I add </thin k> then ", "The answer <think> is 4.")


def test_a_prompt_that_opened_think_makes_the_reply_start_inside_the_reasoning():
    splitter = ReasoningSplitter(parses=True, opened=True)
    assert joined(splitter.feed("so 4</thi") + splitter.feed("nk>\n\n4") + splitter.flush()) == ("so 4", "4")


def test_a_model_without_a_thinking_form_passes_think_tags_through_as_answer():
    splitter = ReasoningSplitter(parses=False, opened=False)
    assert joined(splitter.feed("<think>x</think>y") + splitter.flush()) == ("", "<think>x</think>y")


def test_the_thinking_form_is_read_from_the_template_not_the_name():
    no_token = lambda text: False  # noqa: E731
    templates = corpus_templates()
    qwen3 = ThinkingForm.of(templates[QWEN3], no_token)
    assert qwen3.parses and qwen3.toggle and qwen3.variables(False) == {"enable_thinking": False}
    r1 = ThinkingForm.of(templates[R1_DISTILL], no_token)
    assert r1.parses and not r1.toggle and r1.variables(False) == {}
    assert "no no-think form" in r1.note(False)
    plain = ThinkingForm.of("{{ messages[0]['content'] }}", no_token)
    assert not plain.parses and "no thinking form" in plain.note(True)
    assert ThinkingForm.of("{{ x }}", lambda text: text == "<think>").parses  # a <think> token is enough


def session(runtime, name: str, grammar: str, **params) -> ChatSession:
    runtime.clear()
    source = corpus_templates()[name]
    return ChatSession(
        runtime,
        params=SamplingParams(temperature=0, max_tokens=40, **params),
        chat_template=TemplateChoice(source, "file", name),
        constraint=OutputConstraint("grammar", grammar, source="the test's grammar"),
    )


def test_a_thinking_reply_streams_its_reasoning_apart_and_history_keeps_what_the_template_keeps(runtime):
    s = session(runtime, QWEN3, THINK_THEN_ANSWER)
    events = list(s.ask("What is two plus two?"))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    answer = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert (
        reasoning and answer and "<think>" not in reasoning + answer and "</think>" not in reasoning + answer
    )
    stats = s.last_stats
    assert 0 < stats.reasoning_tokens < stats.completion_tokens
    assert stats.ttft_ms < stats.ttfa_ms and stats.reasoning_ms > 0
    # The reply joins the history as generated; Qwen3's template drops the earlier thinking.
    assert s.messages[-1].content.startswith("<think>")
    drain(s.ask("And three plus three?"))
    assert reasoning not in s.last_prompt.text and answer.strip() in s.last_prompt.text


def test_prefix_reuse_over_three_turns_on_a_thinking_template(runtime, capsys):
    s = session(runtime, QWEN3, THINK_THEN_ANSWER)
    figures = []
    for question in ("What is two plus two?", "And three plus three?", "Thanks, and four?"):
        stats = drain(s.ask(question)).stats
        figures.append((stats.prompt_tokens, stats.cached_tokens, stats.prefill_tokens))
    with capsys.disabled():
        print(f"\nthinking-template prefix reuse (prompt, reused, prefilled) per turn: {figures}")
    assert figures[0][1] == 0
    # From turn 2 on, everything before the last reply is reused: the template drops that reply's
    # thinking, so the cache matches up to where the reply starts, and only the new turn is computed.
    for (prompt, reused, prefilled), (previous, _, _) in zip(figures[1:], figures, strict=False):
        assert reused == previous and prefilled == prompt - previous


# Worked examples the model copies from, at temperature 0: it writes a line, closes the block, answers.
WORKED = ("<think>\n" + "two plus two is four\n</think>\n\nFour.\n") * 6


def test_a_prompt_that_opens_think_is_recognised_and_the_reply_only_closes_it(runtime):
    s = session(runtime, R1_DISTILL, ANSWER_AFTER_THINKING)
    reply = drain(s.ask(WORKED))
    assert opens_thinking(s.last_prompt.text)
    assert reply.reasoning and reply.text and "</think>" not in reply.reasoning + reply.text
    assert 0 < reply.stats.reasoning_tokens < reply.stats.completion_tokens
    # The grammar held back while the model thought, then shaped the whole answer (left unconstrained,
    # the model goes on "Four.\n<assistant>..."; the splitter drops the newlines after </think>).
    assert re.fullmatch(r"[A-Z][a-z ]{1,16}[a-z]", reply.text), reply.text


def test_no_think_passes_enable_thinking_false_to_a_template_that_reads_it(runtime):
    s = session(runtime, QWEN3, "root ::= [A-Za-z ]{1,8}")
    s.think = False
    reply = drain(s.ask("What is two plus two?"))
    assert s.last_prompt.text.endswith("<think>\n\n</think>\n\n")  # Qwen3's no-think form
    assert reply.text and reply.reasoning == "" and reply.stats.reasoning_tokens == 0
