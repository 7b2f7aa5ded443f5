"""Chat as a client of the scheduler, on the real embedded model: its one sequence is one among others."""

from __future__ import annotations

import pytest

from llmcli.engine.events import TextDelta, drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.grammar import ThinkGate, grammar_sampler
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.sampler import GrammarCheck
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.scheduler_config import SchedulerConfig
from llmcli.engine.local.sequence import Request
from llmcli.engine.messages import Message
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import constraint_from_schema, finish
from tests.engine.local.test_scheduler import PROMPTS, assert_near_tie, run_keeping_rows

PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer", "maximum": 99}},
}


@pytest.fixture(scope="module")
def rt8(embedded_path):
    """8 sequences in one KV pool, 1 thread (the same kernels whatever the batch)."""
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=2048, n_threads=1, n_seq_max=8, kv_unified=True))
    yield rt
    rt.close()


def chat_prompt(session: ChatSession, text: str) -> list[int]:
    return session.template.tokenize(session.runtime, session.conversation([Message("user", text)])).tokens


def test_a_chat_reply_is_what_its_prompt_gets_in_a_batch_of_eight(rt8):
    session = ChatSession(rt8, params=SamplingParams(temperature=0.0, max_tokens=24))
    prompts = [chat_prompt(session, p) for p in PROMPTS]  # as chat renders them, with no history yet
    reply = drain(session.ask(PROMPTS[0]))
    ids = session.messages[-1].token_ids
    assert reply.text and ids is not None
    chat_ids = ids + ([rt8.eos_id] if reply.stats.finish_reason == "stop" else [])
    prompt = session.last_prompt.tokens
    sched = Scheduler(rt8, SchedulerConfig(share_prefixes=False))
    seqs = [sched.submit(Request(p, SamplingParams(temperature=0.0, max_tokens=24))) for p in prompts]
    rows = run_keeping_rows(rt8, sched, seqs[:1])[id(seqs[0])]
    assert seqs[0].prompt == prompt
    batched = seqs[0].generated + ([seqs[0].eog_token] if seqs[0].eog_token is not None else [])
    if batched == chat_ids:
        assert seqs[0].text == reply.text
        return
    k = next(i for i, (a, b) in enumerate(zip(batched, chat_ids, strict=False)) if a != b)
    assert_near_tie(rt8, prompt + chat_ids[:k], rows[k], chat_ids[k], batched[k])


def grammar(rt: Runtime) -> GrammarCheck:
    constraint = constraint_from_schema(PERSON)
    ptr = grammar_sampler(rt.vocab, constraint.gbnf, constraint.source, from_schema=True)
    return GrammarCheck(rt, ptr, ThinkGate(None))


def test_each_sequence_of_a_batch_follows_its_own_grammar(rt8):
    """The grammar reads its own sequence's logits row: decoded among unconstrained neighbours, a
    constrained reply is the one it gets alone, and it validates."""
    rt, constraint = rt8, constraint_from_schema(PERSON)
    seeded = SamplingParams(temperature=0.8, seed=5, max_tokens=48)
    head = rt.tokenize("Ann is 31. As JSON:", add_special=True)
    sched = Scheduler(rt, SchedulerConfig(share_prefixes=False))
    alone = sched.submit(Request(head, seeded, grammar=grammar(rt)))
    sched.run()
    sched = Scheduler(rt, SchedulerConfig(share_prefixes=False))
    free = [SamplingParams(temperature=0.8, seed=i, max_tokens=40) for i in range(3)]
    others = [sched.submit(Request(rt.tokenize(PROMPTS[0], add_special=True), free[0]))]
    constrained = sched.submit(Request(head, seeded, grammar=grammar(rt)))  # rows on either side
    others += [
        sched.submit(Request(rt.tokenize(p, add_special=True), f))
        for p, f in zip(PROMPTS[1:3], free[1:], strict=True)
    ]
    sched.run()
    for seq in (alone, constrained):
        assert seq.finish_reason == "stop", seq.text
        finish(constraint, seq.text, "stop")  # parses and validates, or raises
    assert constrained.text == alone.text
    assert not any(o.text.lstrip().startswith("{") for o in others)  # the neighbours were free


def test_a_request_the_caller_stops_reading_gives_its_sequence_back(runtime):
    runtime.clear()
    session = ChatSession(runtime, params=SamplingParams(temperature=0.0, max_tokens=64))
    stream = session.ask("Write a long poem about autumn.")
    deltas = 0
    for event in stream:
        deltas += isinstance(event, TextDelta)
        if deltas == 3:
            break
    stream.close()  # the REPL's Ctrl-C, a closed pipe
    sched = session.scheduler
    assert not sched.running and sched.admission.free_slots == [0]
    mem = runtime.ll.llama_get_memory(runtime.ctx_ptr)
    assert runtime.ll.llama_memory_seq_pos_max(mem, 0) == -1  # its cells were freed
    assert drain(session.ask("Say hello.")).text  # the next request is admitted


def test_a_runtime_cleared_between_turns_is_prefilled_again(runtime):
    runtime.clear()
    session = ChatSession(runtime, params=SamplingParams(temperature=0.0, max_tokens=8))
    first = drain(session.ask("Name a color."))
    assert runtime.kv_tokens and session.scheduler.admission.idle  # the turn's cells are kept, and mirrored
    runtime.clear()
    session.messages.clear()
    again = drain(session.ask("Name a color."))
    assert again.stats.cached_tokens == 0 and again.text == first.text


def test_overlapped_decoding_gives_the_reply_of_the_plain_loop(runtime):
    """Token n's decode submitted before its text is streamed: the same tokens, text and KV cells."""
    results = []
    for overlap in (False, True):
        runtime.clear()
        session = ChatSession(runtime, params=SamplingParams(temperature=0.0, max_tokens=40))
        session.overlap = overlap
        deltas = [e.text for e in session.ask("List ten animals, one per line.") if isinstance(e, TextDelta)]
        stats = session.last_stats
        assert stats is not None
        results.append((deltas, session.messages[-1].token_ids, list(runtime.kv_tokens), stats.finish_reason))
    assert results[0][0] and results[0][1]
    assert results[1] == results[0]
