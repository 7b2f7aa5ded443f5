"""The lazy grammar, on the real model: with a template whose generation prompt opens <think>, the
model thinks freely and the schema's grammar applies from </think> on.

The 135M model does not close a thinking block by itself, so its chain is shaped by a llama.cpp
grammar sampler that lets it write some lowercase words, then `</think>`, then anything. That
shape stands in for a reasoning model's habits; the schema's grammar is llmcli's own GrammarCheck,
gated by ThinkGate, exactly as in a chat. No mock: every token is drawn from the model's logits."""

from __future__ import annotations

import json

import jsonschema

import llmcli.engine.local.sampler as sampler_module
from llmcli.engine.events import drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.sampler import Sampler
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import constraint_from_schema, finish
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.engine.templates.thinking import opens_thinking
from tests.corpus import corpus_templates

R1_DISTILL = "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja"  # its generation prompt ends in <think>
THINKS_THEN_ANYTHING = r'root ::= [a-z ]{4,24} "\n</think>" [^\x00]*'  # then the schema decides
PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "maxLength": 10},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
    },
}


class ThinkingShapedSampler(Sampler):
    """llmcli's Sampler (with its GrammarCheck for the schema), whose chain is [shape grammar, greedy]."""

    def __init__(self, runtime, params, grammar=None) -> None:
        super().__init__(runtime, params, grammar)
        ll = self.ll
        ll.llama_sampler_free(self._chain)
        self._chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(
            self._chain, ll.llama_sampler_init_grammar(runtime.vocab, THINKS_THEN_ANYTHING.encode(), b"root")
        )
        ll.llama_sampler_chain_add(self._chain, ll.llama_sampler_init_greedy())
        self._stateful = True  # the shape grammar follows every token, the resampled ones too


def test_the_schema_applies_from_the_end_of_the_thinking(runtime, monkeypatch):
    monkeypatch.setattr(sampler_module, "Sampler", ThinkingShapedSampler)  # the chains sequences get
    runtime.clear()
    session = ChatSession(
        runtime,
        params=SamplingParams(temperature=0, max_tokens=80),
        chat_template=TemplateChoice(corpus_templates()[R1_DISTILL], "file", R1_DISTILL),
        constraint=constraint_from_schema(PERSON),
    )
    reply = drain(session.ask("Ann is 31. Give her name and age as JSON."))
    assert opens_thinking(session.last_prompt.text)
    # The thinking was free: words the JSON grammar would never have allowed at the start.
    assert reply.reasoning.strip() and "{" not in reply.reasoning
    assert any(c.isalpha() for c in reply.reasoning)
    assert 0 < reply.stats.reasoning_tokens < reply.stats.completion_tokens
    # The answer, after </think>, follows the schema: it parses and validates.
    checked = finish(session.constraint, reply.text, reply.stats.finish_reason)
    jsonschema.validate(checked.data, PERSON)
    assert json.loads(checked.text) == checked.data and "</think>" not in checked.text
