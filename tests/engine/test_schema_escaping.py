"""Every string a schema allows can be written and validates: literals are escaped for GBNF.

llama-cpp-python's converter escaped only `"`, CR and LF in literals: an enum value with a
backslash became a different JSON escape, and one with a quote a grammar that did not parse.
The property tests walk llama.cpp's own grammar sampler (the sampling path's GrammarCheck, on
the embedded model's vocabulary) through the tokens of a value's JSON text.
"""

from __future__ import annotations

import json
import random

import pytest

from llmcli.engine.schema_grammar import json_text, schema_to_gbnf
from tests.support.cli import cli

SEED = 20261203
# Quotes, backslashes, JSON's control characters, DEL, and unicode from several planes.
ALPHABET = ['"', "\\", "/", "\n", "\r", "\t", "\b", "\f", "\x00", "\x01", "\x1f", "\x7f", "a", "Z", " "]
ALPHABET += [
    "é",
    "ß",
    "日",
    "本",
    "🙂",
    "\u2028",
    "\u202e",
    "\ufeff",
    "\U0001f600",
    "{",
    "}",
    "[",
    "]",
    ":",
    ",",
]


def random_values(n: int) -> list[str]:
    rng = random.Random(SEED)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def grammar_accepts(runtime, gbnf: str, text: str) -> bool:
    """Does the grammar take `text`, token by token, and then allow the end of the reply?"""
    from llmcli.engine.local.grammar import ThinkGate, grammar_sampler
    from llmcli.engine.local.sampler import GrammarCheck

    check = GrammarCheck(runtime, grammar_sampler(runtime.vocab, gbnf, "test"), ThinkGate(None))
    try:
        for token in runtime.tokenize(text):
            if not check.allows(token):
                return False
            runtime.ll.llama_sampler_accept(check._grammar, token)
        return check.allows(runtime.eos_id)
    finally:
        check.close()


@pytest.mark.parametrize("value", random_values(24))
def test_an_enum_value_is_accepted_exactly_as_its_json_text(runtime, value):
    gbnf = schema_to_gbnf({"enum": [value]})
    text = json_text(value)
    assert json.loads(text) == value
    assert grammar_accepts(runtime, gbnf, text), (value, gbnf)
    if "\\\\" in text:  # the converter's bug wrote a lone backslash: a different escape
        assert not grammar_accepts(runtime, gbnf, text.replace("\\\\", "\\", 1))


@pytest.mark.parametrize("name", random_values(12))
def test_a_property_name_is_accepted_as_json_text(runtime, name):
    schema = {"type": "object", "properties": {name: {"const": 1}}, "required": [name]}
    gbnf = schema_to_gbnf(schema)
    text = "{" + json.dumps(name) + ": 1}"
    assert json.loads(text) == {name: 1}
    assert grammar_accepts(runtime, gbnf, text), (name, gbnf)


def test_a_recursive_ref_is_one_rule_that_refers_to_itself(runtime):
    tree = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {
                    "v": {"type": "integer"},
                    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                },
                "required": ["v", "kids"],
            }
        },
        "$ref": "#/$defs/node",
    }
    gbnf = schema_to_gbnf(tree)
    text = '{"v": 1, "kids": [{"v": 2, "kids": []}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]}'
    assert grammar_accepts(runtime, gbnf, text)
    assert not grammar_accepts(runtime, gbnf, '{"v": 1, "kids": [{"v": 2}]}')  # kids is required below too


@pytest.mark.parametrize(
    "schema",
    [
        {"enum": ['say "hi"', "C:\\dir\\new"]},
        {
            "type": "object",
            "properties": {'a "quoted" \\ key': {"type": "boolean"}},
            "required": ['a "quoted" \\ key'],
        },
    ],
    ids=["enum", "property"],
)
def test_quotes_and_backslashes_in_a_schema_give_valid_json_on_the_model(embedded_path, schema):
    result = cli(
        "chat",
        embedded_path,
        "--schema",
        json.dumps(schema),
        "--temp",
        "0",
        "-n",
        "40",
        "--no-log",
        "Answer.",
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    import jsonschema

    jsonschema.validate(data, schema)


@pytest.mark.parametrize(
    "bad",
    [
        {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
        {
            "$defs": {"a": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/b"}]}, "b": {"$ref": "#/$defs/a"}},
            "type": "object",
            "properties": {"x": {"$ref": "#/$defs/a"}},
        },
    ],
    ids=["itself", "through-anyOf"],
)
def test_a_ref_that_reaches_itself_before_any_value_is_refused_in_the_schemas_words(bad):
    result = cli("chat", "-m", "/nonexistent/model.gguf", "--schema", json.dumps(bad), "hi")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("llmcli: error: --schema: $ref '#/$defs/a' refers to itself before any")
    assert "grammar" not in result.stderr
