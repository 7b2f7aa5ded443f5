"""The constraint parser, the supported-subset table, the thinking gate and the final validation."""

from __future__ import annotations

import json
import os
import random

import pytest

from llmcli.engine.local.grammar import ThinkGate, check_gbnf
from llmcli.engine.openai.session import request_body
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.schema_check import SCHEMA_KEYWORDS
from llmcli.engine.structured import (
    check_subset,
    constraint_from_schema,
    finish,
    load_schema,
    parse_constraint,
)
from llmcli.engine.templates.thinking import strip_thinking
from llmcli.errors import RuntimeFailure, UsageError
from llmcli.usecases.constraint import constraint_from_options

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_a_supported_schema_becomes_a_grammar_llama_cpp_parses():
    constraint = constraint_from_schema(PERSON)
    assert constraint.kind == "schema" and "root ::=" in constraint.gbnf
    check_gbnf(constraint.gbnf, "converted")  # raises if llama.cpp refuses it


@pytest.mark.parametrize(
    "schema, words",
    [
        ({"type": "integer", "multipleOf": 2}, "unsupported keyword 'multipleOf'"),
        ({"type": "string", "minimum": 0}, "minimum needs type integer or number"),
        (
            {
                "$schema": "http://json-schema.org/draft-04/schema#",
                "type": "integer",
                "minimum": 0,
                "exclusiveMinimum": True,
            },
            "exclusiveMinimum must be a finite number (draft 2020-12), not True",
        ),
        ({"type": "number", "maximum": float("inf")}, "maximum must be a finite number"),
        ({"type": "integer", "minimum": 3, "maximum": 2}, "minimum 3 and maximum 2 leave no integer at /;"),
        (
            {"type": "string", "minLength": 5, "maxLength": 2},
            "minLength 5 above maxLength 2 leaves no string",
        ),
        (
            {"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 3},
            "minItems 4 above maxItems 3 leaves no array at /;",
        ),
        ({"type": "number", "minimum": 1.5, "exclusiveMaximum": 1.5}, "minimum 1.5 and exclusiveMaximum 1.5"),
        (
            {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 3},
            "exclusiveMinimum 2 and exclusiveMaximum 3 leave no integer",
        ),
        # the tighter bound of each side is named: here exclusiveMinimum 7, not minimum 0
        (
            {"type": "integer", "minimum": 0, "exclusiveMinimum": 7, "maximum": 7},
            "exclusiveMinimum 7 and maximum 7 leave no integer",
        ),
        ({"type": "integer", "minimum": 2.1, "maximum": 2.9}, "minimum 2.1 and maximum 2.9 leave no integer"),
        (
            {"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 0}}},
            "minLength 3 above maxLength 0 leaves no string at /properties/s;",
        ),
        ({"type": "object", "minProperties": 3, "maxProperties": 1}, "unsupported keyword 'minProperties'"),
        ({"type": "string", "format": "email"}, "format 'email' has no grammar"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "^a+$", "minLength": 2}}},
            "at /properties/a",
        ),
        ({"type": "object", "required": ["a"]}, "required names 'a'"),
        ({"typ": "string"}, "unknown keyword 'typ'"),
        ({"anyOf": [{"type": "string"}], "properties": {}}, "anyOf beside properties"),
        ({"type": "array", "minItems": 2}, "minItems/maxItems need items"),
        ({"$ref": "https://example.com/s.json"}, "is not local"),
    ],
)
def test_an_unsupported_schema_is_refused_naming_the_keyword_and_place(schema, words):
    with pytest.raises(UsageError) as err:
        constraint_from_schema(schema)
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": 10**7},
        [1, 2],
        {"typ": "string"},
        {"type": "string", "pattern": "^a(?=b)$"},
    ],
    ids=["bounds", "metaschema", "subset", "converter"],
)
def test_every_check_of_a_schema_names_what_it_came_from_as_the_caller_calls_it(schema):
    """Chat says --schema, the server the request field; one check, each caller's words."""
    with pytest.raises(UsageError) as chat:
        constraint_from_schema(schema)
    with pytest.raises(UsageError) as serve:
        constraint_from_schema(schema, "response_format.schema", name="response_format.schema")
    assert str(chat.value).startswith("--schema")
    assert str(serve.value) == str(chat.value).replace("--schema", "response_format.schema", 1)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "minLength": 2, "maxLength": 2},
        {"type": "array", "items": {"type": "integer"}, "minItems": 0, "maxItems": 0},
        {"type": "number", "minimum": 2, "maximum": 2},
        {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 4},
        {"type": "integer", "minimum": 2.5, "maximum": 3.5},
        {"type": "number", "exclusiveMinimum": -0.5, "exclusiveMaximum": -0.25},
    ],
)
def test_bounds_that_leave_a_value_are_accepted(schema):
    check_gbnf(constraint_from_schema(schema).gbnf, "converted")


def test_every_refused_keyword_in_the_table_has_a_reason():
    refused = {k: v for k, v in SCHEMA_KEYWORDS.items() if v not in ("grammar", "annotation")}
    assert "multipleOf" in refused and "not" in refused
    for keyword, reason in refused.items():
        with pytest.raises(UsageError) as err:
            check_subset({keyword: 1})
        assert f"unsupported keyword '{keyword}' ({reason})" in str(err.value)


def test_the_three_options_are_mutually_exclusive(tmp_path):
    with pytest.raises(UsageError, match="--schema and --grammar each constrain the reply; give only one"):
        parse_constraint(schema="{}", grammar=tmp_path / "g.gbnf")


def test_a_schema_file_and_inline_json_read_the_same(tmp_path):
    path = tmp_path / "person.json"
    path.write_text(json.dumps(PERSON))
    assert load_schema(str(path))[0] == load_schema(json.dumps(PERSON))[0] == PERSON


def test_format_json_accepts_any_value_and_refuses_other_formats():
    assert parse_constraint(fmt="json").schema == {}
    with pytest.raises(UsageError, match="the one format is json"):
        parse_constraint(fmt="yaml")


def test_a_malformed_or_empty_grammar_is_refused(tmp_path):
    bad = tmp_path / "bad.gbnf"
    for text, words in [
        ('root ::= "a', "is not a valid GBNF grammar (unexpected end of input)"),
        ('root ::= ("a" | "b"\n', "(expecting ')' at the end of the grammar (line 1));"),
        ('root ::= "a"\nx ::= ( "b" \ny ::= "c"\n', "(expecting ')' at line 3, column 3: ::= \"c\");"),
        ('item ::= "a"', "root"),
        ("", "is empty"),
    ]:
        bad.write_text(text)
        with pytest.raises(UsageError, match=None) as err:
            constraint_from_options(None, None, bad, None)
        assert words in str(err.value), err.value


@pytest.mark.parametrize(
    "reply, finish_reason, words",
    [
        ('{"name": "Ann"', "length", 'incomplete JSON (max tokens reached: raise -n): {"name": "Ann"'),
        (
            '{"nickname": "Annabel", "name": "Ann", "ag',
            "length",
            '-n): …ickname": "Annabel", "name": "Ann", "ag',
        ),  # cut: "…"
        ("", "stop", "incomplete JSON"),
        ('{"name": "Ann", "age": "31"}', "stop", "at $.age"),
        ('{"name": "Ann"}', "stop", "'age' is a required property"),
        ('{"name": "Ann", "age": 31} and more', "stop", "not JSON"),
    ],
)
def test_a_reply_that_fails_is_a_runtime_failure_naming_the_path(reply, finish_reason, words):
    with pytest.raises(RuntimeFailure) as err:
        finish(constraint_from_schema(PERSON), reply, finish_reason)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_valid_reply_keeps_its_text_and_parses():
    reply = finish(constraint_from_schema(PERSON), '<think>easy</think>\n{"name": "Ann", "age": 31}\n')
    assert reply.text == '{"name": "Ann", "age": 31}' and reply.data == {"name": "Ann", "age": 31}


def test_the_grammar_waits_for_the_end_of_a_thinking_block():
    gate = ThinkGate(think_token=7)
    assert gate.state == "undecided"
    assert gate.first(7) is True and not gate.constrained
    for piece in ["I should ", "answer </", "think", ">"]:  # the closing tag split across tokens
        gate.observe(piece)
    assert gate.constrained
    # Without a thinking token the grammar applies at once; a template may open the block itself.
    assert ThinkGate(None).constrained
    assert ThinkGate(7, opened_in_prompt=True).state == "thinking"
    assert ThinkGate(7).first(3) is False


def test_strip_thinking_cuts_only_a_leading_block():
    assert strip_thinking("<think>a</think>{}") == "{}"
    assert strip_thinking("plan</think>{}") == "{}"  # the template opened the block
    assert strip_thinking('{"a": "<think>x</think>"}') == '{"a": "<think>x</think>"}'


def test_the_request_body_carries_response_format_and_refuses_a_grammar(tmp_path):
    params = SamplingParams()
    body = request_body("m", [], params, [], constraint_from_schema(PERSON))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": PERSON, "strict": True},
    }
    assert request_body("m", [], params, [], parse_constraint(fmt="json"))["response_format"] == {
        "type": "json_object"
    }
    grammar = tmp_path / "yes.gbnf"
    grammar.write_text('root ::= "yes" | "no"')
    with pytest.raises(UsageError, match="--grammar needs the local engine"):
        request_body("m", [], params, [], parse_constraint(grammar=grammar))


# -- fuzz: random documents never give a traceback ------------------------------------------------
KEYS = [*SCHEMA_KEYWORDS, "x", "name", ""]


def random_value(rng: random.Random, depth: int):
    kinds = (
        ["int", "str", "bool", "null", "type", "list", "dict", "dict"]
        if depth < 4
        else ["int", "str", "type"]
    )
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, 1, -1, 5, 2**40])
    if kind == "str":
        return rng.choice(["", "^a+$", "#/$defs/a", "date", "email", "a", "(", "^[0-9]{2,}$"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "type":
        return rng.choice(
            ["object", "array", "string", "integer", "number", "boolean", "null", ["string", "null"]]
        )
    if kind == "list":
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(KEYS): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def random_schema(rng: random.Random, depth: int):
    """Mostly schema-shaped (keywords with values of the right kind), sometimes junk."""
    if depth > 3 or rng.random() < 0.1:
        return random_value(rng, depth)
    shaped = {
        "type": lambda: rng.choice(["object", "array", "string", "integer", "number", "boolean", "null"]),
        "properties": lambda: {
            rng.choice(["a", "b", "c"]): random_schema(rng, depth + 1) for _ in range(rng.randint(0, 3))
        },
        "required": lambda: rng.sample(["a", "b", "c"], rng.randint(0, 2)),
        "items": lambda: random_schema(rng, depth + 1),
        "anyOf": lambda: [random_schema(rng, depth + 1) for _ in range(rng.randint(1, 3))],
        "enum": lambda: [random_value(rng, 3) for _ in range(rng.randint(1, 3))],
        "minItems": lambda: rng.randint(0, 3),
        "maxItems": lambda: rng.randint(0, 5),
        "maxLength": lambda: rng.randint(0, 8),
        "minLength": lambda: rng.randint(0, 3),
        "minimum": lambda: rng.choice([0, -3, 2.5, 10**20]),
        "maximum": lambda: rng.choice([0, 7, 99.75, -1]),
        "exclusiveMinimum": lambda: rng.choice([0, -0.5]),
        "exclusiveMaximum": lambda: rng.choice([1, 1e-3]),
        "pattern": lambda: rng.choice(["^a+$", "^[0-9]{2,4}$", "^(x|y)$", "(", "^(?=a)$"]),
        "format": lambda: rng.choice(["date", "uuid", "email"]),
        "additionalProperties": lambda: rng.choice([True, False, {"type": "string"}]),
    }
    keys = rng.sample(list(shaped), rng.randint(1, 3)) + ([rng.choice(KEYS)] if rng.random() < 0.2 else [])
    return {k: shaped[k]() if k in shaped else random_value(rng, depth + 1) for k in keys}


def test_fuzz_random_documents_are_accepted_or_refused_in_one_line():
    rng = random.Random(12)
    runs = 20000 if os.environ.get("LLMCLI_FUZZ_LONG") == "1" else 1500
    accepted = 0
    for _ in range(runs):
        doc = random_schema(rng, 0)
        try:
            constraint = constraint_from_schema(doc)
        except UsageError as err:
            assert "\n" not in str(err) and str(err)
            continue
        accepted += 1
        check_gbnf(constraint.gbnf, "converted")  # what we accept, llama.cpp parses
    assert accepted > runs // 20  # the generator reaches the accepting side too
