"""A lazy grammar (tool_choice auto) on the embedded model: the reply is free until it writes the
trigger, and follows the grammar from there on; in chat's session and in the scheduler serve uses."""

from __future__ import annotations

import pytest

from llmcli.engine.events import drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.grammar import Grammars, ThinkGate
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.sequence import Request
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.tools import FORMATS, parse_reply
from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
from tests.fuzz import cases

SEEDS = range(cases(2, 8))  # LLMCLI_FUZZ_LONG: 8
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 12}},
                "required": ["city"],
            },
        },
    }
]
# Few-shot prompts that make even the 135M model open a call of each form on its own.
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "%s"}}\n</tool_call>'
FEW_SHOT = {
    "hermes": (
        f"Question: weather in Rome?\nAnswer: {CALL % 'Rome'}\n"
        f"Question: weather in Oslo?\nAnswer: {CALL % 'Oslo'}\n"
        "Question: weather in Paris?\nAnswer:"
    ),
    "generic": (
        'Question: city of the Eiffel tower?\nAnswer: {"tool_calls": [{"name": "get_weather", "arguments": '
        '{"city": "Paris"}}]}\nQuestion: weather in Oslo?\nAnswer:'
    ),
}


def sample(rt, prompt: str, constraint: OutputConstraint | None, seed: int, max_tokens: int = 60):
    """One reply to a raw prompt from the scheduler (serve's path), and its grammar check."""
    check = Grammars(rt).check(constraint, False) if constraint else None
    sched = Scheduler(rt)
    params = SamplingParams(temperature=0.8, seed=seed, max_tokens=max_tokens)
    seq = sched.submit(Request(rt.tokenize(prompt, add_special=True), params, grammar=check))
    sched.run()
    sched.close()
    return seq, check


@pytest.mark.parametrize("family", list(FEW_SHOT))
def test_once_the_reply_opens_a_call_the_grammar_makes_it_well_formed(runtime, family):
    form = FORMATS[family]
    constraint = tool_constraint(TOOLS, form, ToolChoice("auto"), parallel=False)
    triggered = 0
    for seed in SEEDS:
        seq, check = sample(runtime, FEW_SHOT[family], constraint, seed)
        parsed = parse_reply(seq.text, form, ["get_weather"])
        if check.gate.state == "constrained":
            triggered += 1
            # One call, then the grammar ends the reply: the model alone writes more calls (below).
            assert seq.finish_reason == "stop", seq.text
            assert parsed.malformed is None and len(parsed.calls) == 1, seq.text
            assert parsed.calls[0].name == "get_weather" and len(parsed.calls[0].arguments["city"]) <= 12
        else:
            assert not parsed.calls, seq.text
    assert triggered, "no seed opened a call: the prompt no longer shows the test anything"
    free = [
        parse_reply(sample(runtime, FEW_SHOT[family], None, seed)[0].text, form, ["get_weather"])
        for seed in SEEDS
    ]
    assert any(reply.malformed or len(reply.calls) != 1 for reply in free)


def test_a_reply_that_never_writes_the_trigger_is_exactly_the_free_reply(runtime):
    runtime.clear()
    session = ChatSession(runtime)
    lazy = tool_constraint(TOOLS, FORMATS["hermes"], ToolChoice("auto"))
    for seed in SEEDS:
        replies = []
        for constraint in (None, lazy):
            session.clear()
            session.constraint = constraint
            session.params = SamplingParams(temperature=0.8, seed=seed, max_tokens=48)
            replies.append(drain(session.ask("Tell me about the weather in Paris.")).text)
        assert "<tool_call>" not in replies[1]
        assert replies[1] == replies[0]


def test_in_chat_the_text_before_the_trigger_is_free_and_the_grammar_takes_over_at_it(runtime):
    """A trigger the model writes on its own: the word Paris, after which the grammar wants `!!!`."""
    runtime.clear()
    session = ChatSession(runtime)
    lazy = OutputConstraint("grammar", 'root ::= "Paris!!!"\n', source="test", trigger="Paris")
    seen = 0
    for seed in SEEDS:
        replies = []
        for constraint in (None, lazy):
            session.clear()
            session.constraint = constraint
            session.params = SamplingParams(temperature=0.8, seed=seed, max_tokens=64)
            replies.append(drain(session.ask("Tell me about Paris in one sentence.")).text)
        free, constrained = replies
        if "Paris" not in free:
            assert constrained == free
            continue
        seen += 1
        before = free[: free.index("Paris")]
        assert constrained == before + "Paris!!!"
    assert seen, "the model never wrote the trigger"


def test_a_trigger_at_the_start_counts_only_there():
    gate = ThinkGate(None, trigger="{", at_start=True)
    assert gate.state == "waiting"
    for piece, verdict in ((b" \n", "text"), (b' {"', "fires")):
        assert gate.verdict(piece) == verdict
        gate.advance(piece, gate.verdict(piece))
    assert gate.state == "constrained"
    late = ThinkGate(None, trigger="{", at_start=True)
    assert late.verdict(b"Sure {") == "miss"
    late.advance(b"Sure {", "miss")
    assert late.state == "free"


def test_a_trigger_split_over_tokens_fires_on_the_token_that_completes_it():
    gate = ThinkGate(None, trigger="<tool_call>")
    for piece in (b"text <", b"tool", b"_", b"call"):
        assert gate.verdict(piece) == "text"
        gate.advance(piece, "text")
    assert gate.verdict(b">\n") == "fires"
    assert gate.from_trigger(b">\n") == b"<tool_call>\n"


def test_after_thinking_a_lazy_grammar_waits_for_its_trigger():
    gate = ThinkGate(7, trigger="<tool_call>")
    assert gate.first(7) and gate.state == "thinking"
    gate.observe("hmm</think>")
    assert gate.state == "waiting"
