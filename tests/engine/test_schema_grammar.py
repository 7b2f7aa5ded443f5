"""Numeric bounds in the grammar: every spelling the grammar allows is inside the bounds, and every
canonical spelling inside the bounds is allowed (checked exhaustively over a window of values)."""

from __future__ import annotations

import itertools
import json
import random
import re
from decimal import Decimal

import pytest

from llmcli.engine.local.grammar import check_gbnf
from llmcli.engine.schema_grammar import EmptyRange, bounded_rule, integer_range, schema_to_gbnf


def as_regex(gbnf: str) -> re.Pattern:
    """The rules built here use only literals, classes, groups, |, ? and {m,n}: regex syntax."""
    out, i = [], 0
    while i < len(gbnf):
        ch = gbnf[i]
        if ch == '"':
            end = gbnf.index('"', i + 1)
            out.append(re.escape(gbnf[i + 1 : end]))
            i = end + 1
            continue
        if ch != " ":
            out.append(ch)
        i += 1
    return re.compile("".join(out))


def allowed(rule: str, text: str) -> bool:
    return as_regex(rule).fullmatch(text) is not None


@pytest.mark.parametrize(
    "lo, hi",
    [
        (0, 0),
        (1, 9),
        (0, 100),
        (7, 1234),
        (-15, 15),
        (-300, -7),
        (95, 205),
        (10, 99),
        (100, 999),
        (-1, 0),
        (0, None),
        (None, -3),
        (None, None),
    ],
)
def test_the_integer_grammar_allows_exactly_the_integers_in_range(lo, hi):
    rule = integer_range(lo, hi)
    for n in range(-1500, 1500):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert allowed(rule, str(n)) == inside, (rule, n)
    for junk in ["-0", "007", "01", "1.0", "1e2", "+1", ""]:
        assert not allowed(rule, junk) or (junk == "-0" and False), (rule, junk)
    if hi is None:
        assert allowed(rule, "9" * 16) and not allowed(rule, "1" + "0" * 16)  # the converter's 16 digits


def decimal_spellings(limit: int = 40):
    """Integer parts 0..limit and fractions of up to three digits (trailing zeros too), signed."""
    fractions = [""] + ["".join(p) for k in (1, 2, 3) for p in itertools.product("0123456789", repeat=k)]
    for whole in range(limit + 1):
        for frac in fractions:
            body = f"{whole}.{frac}" if frac else str(whole)
            yield body
            if body != "0":
                yield "-" + body


@pytest.mark.parametrize(
    "schema",
    [
        {"minimum": 0, "maximum": 1},
        {"minimum": 0.5, "maximum": 2.25},
        {"exclusiveMinimum": 0, "exclusiveMaximum": 1},
        {"minimum": -1.5, "exclusiveMaximum": 3},
        {"exclusiveMinimum": -2.75, "maximum": -0.125},
        {"minimum": 1.05, "maximum": 1.3},
        {"exclusiveMinimum": 1.05, "exclusiveMaximum": 1.3},
        {"minimum": 3.3, "maximum": 3.3},
        {"exclusiveMaximum": 0},
        {"minimum": 0},
        {"exclusiveMinimum": 9.99},
        {"minimum": -10, "maximum": 38.5},
    ],
)
def test_the_number_grammar_allows_exactly_the_decimals_in_range(schema):
    rule = bounded_rule({"type": "number", **schema})
    lo = max([Decimal(repr(v)) for k, v in schema.items() if "inimum" in k], default=None)
    hi = min([Decimal(repr(v)) for k, v in schema.items() if "aximum" in k], default=None)

    def inside(x: Decimal) -> bool:
        return (lo is None or (x > lo if "exclusiveMinimum" in schema else x >= lo)) and (
            hi is None or (x < hi if "exclusiveMaximum" in schema else x <= hi)
        )

    pattern = as_regex(rule)
    for text in decimal_spellings():
        matched = pattern.fullmatch(text) is not None
        if text.startswith("-") and Decimal(text) == 0:  # -0.0 is 0, a spelling the grammar need not give
            assert not matched or inside(Decimal(text)), (schema, text, rule)
            continue
        assert matched == inside(Decimal(text)), (schema, text, rule)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 2.5, "maximum": 3.5},  # only 3
        {"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 4},  # only 3
    ],
)
def test_fractional_or_exclusive_integer_bounds_round_inwards(schema):
    rule = bounded_rule(schema)
    assert [n for n in range(-10, 10) if allowed(rule, str(n))] == [3]


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "integer", "minimum": 5, "maximum": 4},
        {"type": "integer", "exclusiveMinimum": 3, "exclusiveMaximum": 4},
        {"type": "number", "exclusiveMinimum": 1, "maximum": 1},
    ],
)
def test_an_empty_range_is_refused(schema):
    with pytest.raises(EmptyRange):
        bounded_rule(schema)


def test_bounded_fields_in_a_schema_become_a_grammar_llama_cpp_parses():
    schema = {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 0, "maximum": 130},
            "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "items": {"type": "array", "items": {"type": "integer", "minimum": -5}, "maxItems": 3},
        },
        "required": ["age", "score"],
    }
    gbnf = schema_to_gbnf(schema)
    check_gbnf(gbnf, "converted")
    assert "age ::= " in gbnf and "integer" not in gbnf.split("age ::= ")[1].split("\n")[0]


def test_a_sampled_value_from_a_random_range_is_inside_it():
    # Random bounds: the grammar's spellings (drawn by a random walk over the regex) stay inside.
    rng = random.Random(3)
    for _ in range(200):
        a, b = sorted(round(rng.uniform(-50, 50), rng.choice([0, 1, 2])) for _ in range(2))
        keys = (rng.choice(["minimum", "exclusiveMinimum"]), rng.choice(["maximum", "exclusiveMaximum"]))
        schema = {"type": "number", keys[0]: a, keys[1]: b}
        try:
            rule = bounded_rule(schema)
        except EmptyRange:
            assert a == b and "exclusive" in json.dumps(schema)
            continue
        pattern = as_regex(rule)
        for text in (f"{x / 100:.2f}" for x in range(int(a * 100) - 300, int(b * 100) + 300)):
            x = Decimal(text)
            ok = (x > Decimal(repr(a)) if keys[0].startswith("ex") else x >= Decimal(repr(a))) and (
                x < Decimal(repr(b)) if keys[1].startswith("ex") else x <= Decimal(repr(b))
            )
            assert (pattern.fullmatch(text) is not None) == ok, (schema, text)


def test_a_string_never_takes_a_raw_control_character(runtime):
    # llama-cpp-python 0.3.36's own char rule let a raw newline into a string (a sampled run at
    # temperature 0.8 wrote one, and json.loads refused it); the rule here is JSON's.
    from llmcli.engine.local.grammar import ThinkGate, grammar_sampler
    from llmcli.engine.local.sampler import GrammarCheck

    gbnf = schema_to_gbnf({"type": "string", "maxLength": 8})
    check = GrammarCheck(runtime, grammar_sampler(runtime.vocab, gbnf, "test"), ThinkGate(None))
    try:
        for token in runtime.tokenize('"a'):
            assert check.allows(token)
            runtime.ll.llama_sampler_accept(check._grammar, token)
        for raw in ["\n", "\t", "\x01"]:
            assert not check.allows(runtime.tokenize(raw)[0]), repr(raw)
        assert check.allows(runtime.tokenize("\\")[0]) and check.allows(runtime.tokenize("b")[0])
    finally:
        check.close()
