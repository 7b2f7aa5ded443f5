"""On the embedded model, sampled runs (temperature 0.8, seeds 0..RUNS-1) for each schema all parse
and validate: 6 per schema by default, 50 with LLMCLI_FUZZ_LONG=1. One loaded model (the session's
runtime), one session per schema; each run starts a fresh conversation, so the prompt comes from the
KV cache and only the reply is decoded. The schemas bound every string, array and number, so a reply
always fits max tokens."""

from __future__ import annotations

import json

import jsonschema
import pytest

from llmcli.engine.events import drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import constraint_from_schema, finish
from tests.fuzz import cases

RUNS = cases(default=6, long=50)
MAX_TOKENS = 64  # the longest schema below needs about 40 tokens at its longest
NAME = {"type": "string", "maxLength": 8}

SCHEMAS = {
    "nested objects": {
        "type": "object",
        "required": ["person"],
        "properties": {
            "person": {
                "type": "object",
                "required": ["name", "home"],
                "properties": {
                    "name": NAME,
                    "home": {"type": "object", "required": ["city"], "properties": {"city": NAME}},
                },
            }
        },
    },
    "arrays with minItems/maxItems": {
        "type": "object",
        "required": ["tags"],
        "properties": {"tags": {"type": "array", "items": NAME, "minItems": 2, "maxItems": 3}},
    },
    "enums": {
        "type": "object",
        "required": ["color", "size"],
        "properties": {
            "color": {"enum": ["red", "green", "blue"]},
            "size": {"enum": ["S", "M", "L", 42, None]},
        },
    },
    "integers and numbers with bounds": {
        "type": "object",
        "required": ["age", "score", "delta"],
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "delta": {"type": "number", "minimum": -2.5, "exclusiveMaximum": 2.5},
        },
    },
    "strings with maxLength": {
        "type": "object",
        "required": ["title", "code"],
        "properties": {
            "title": {"type": "string", "maxLength": 5},
            "code": {"type": "string", "minLength": 2, "maxLength": 4},
        },
    },
    "required and optional fields": {
        "type": "object",
        "required": ["id"],
        "properties": {
            "id": {"type": "integer", "minimum": 1, "maximum": 999},
            "note": NAME,
            "done": {"type": "boolean"},
        },
    },
}
PROMPT = "Describe a person as JSON: name, home city, tags, color, age, score."


@pytest.mark.parametrize("label", list(SCHEMAS))
def test_sampled_replies_all_parse_and_validate(runtime, label):
    schema = SCHEMAS[label]
    runtime.clear()
    session = ChatSession(runtime, constraint=constraint_from_schema(schema))
    seen = set()
    for seed in range(RUNS):
        session.clear()
        session.params = SamplingParams(temperature=0.8, seed=seed, max_tokens=MAX_TOKENS)
        reply = drain(session.ask(PROMPT))
        checked = finish(session.constraint, reply.text, reply.stats.finish_reason)  # raises if not
        jsonschema.validate(checked.data, schema)
        assert json.loads(checked.text) == checked.data
        seen.add(checked.text)
    assert len(seen) > 1  # the seeds did sample differently
