"""Seeded hostile JSON Schemas through `chat --schema`, in a bounded child (tests/fuzz/batch.py).

Each case is a generated schema: nested objects, arrays, strings, enums, consts, anyOf and
recursive $ref, with counts (maxItems, minItems, maxLength, minLength, pattern {n,m}, enum and
anyOf sizes) from small to far past the limits (a maxItems of 10^9 once took gigabytes), and
property names, enum values and consts full of quotes, backslashes, control characters and
unicode. The model is missing on purpose: a schema that passes every check (the subset, the
bounds, the conversion, llama.cpp's parse of the grammar made from it) ends on "no such file",
a refused one on one line that speaks of --schema, never of a grammar to fix. Every case must
end with an exit below 128, no traceback and exactly one stderr line.

12 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 400 (seeds: tests/fuzz/__init__.py). The
counts are printed (pytest -s): cases, clean errors, successes, failures.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.batch import run_many
from tests.fuzz.bounded import NO_MODEL, outcome
from tests.support.cli import Result

CASES = cases(default=12, long=400)  # per seed
FIXED_SEED = 20261203
CHARS = [
    '"',
    "\\",
    "/",
    "\n",
    "\x00",
    "\x1f",
    "\x7f",
    "é",
    "日",
    "🙂",
    "\u2028",
    "{",
    "}",
    " ",
    "a",
    "_",
    "-",
]


def _text(rng: random.Random, longest: int = 8) -> str:
    if rng.random() < 0.03:
        return "x" * rng.randint(4000, 5000)  # around the string limit
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(0, longest)))


def _count(rng: random.Random) -> int:
    return rng.choice([rng.randint(0, 6), rng.randint(240, 260), 10**9])


def _leaf(rng: random.Random) -> dict:
    kind = rng.choice(
        ["string", "integer", "number", "boolean", "null", "enum", "const", "pattern", "lengths"]
    )
    if kind == "enum":
        n = rng.choice([rng.randint(1, 6), rng.randint(1000, 1100)])
        return {"enum": [_text(rng) if rng.random() < 0.8 else rng.randint(-9, 9) for _ in range(n)]}
    if kind == "const":
        return {"const": rng.choice([_text(rng), {"k": _text(rng)}, [1, _text(rng)], None, 1.5])}
    if kind == "pattern":
        low = rng.randint(0, 3)
        high = rng.choice([low + rng.randint(0, 5), rng.randint(250, 300), 10**6])
        return {"type": "string", "pattern": f"^[a-z]{{{low},{high}}}(x|y)?$"}
    if kind == "lengths":
        low = rng.randint(0, 4)
        return {"type": "string", "minLength": low, "maxLength": rng.choice([low + 3, _count(rng)])}
    if kind in ("integer", "number") and rng.random() < 0.5:
        return {"type": kind, "minimum": rng.randint(-50, 0), "maximum": rng.randint(0, 50)}
    return {"type": kind}


def _node(rng: random.Random, depth: int) -> dict:
    if depth <= 0 or rng.random() < 0.3:
        return _leaf(rng)
    kind = rng.choice(["object", "array", "anyOf", "ref"])
    if kind == "object":
        width = rng.choice([rng.randint(0, 4), 300])
        props = {_text(rng, 6): _child(rng, depth - 1, width) for _ in range(width)}
        required = [name for name in props if rng.random() < 0.5]
        node = {"type": "object", "properties": props, "required": required}
        if rng.random() < 0.2:
            node["additionalProperties"] = False
        return node
    if kind == "array":
        low = _count(rng) if rng.random() < 0.3 else rng.randint(0, 2)
        return {
            "type": "array",
            "items": _node(rng, depth - 1),
            "minItems": low,
            "maxItems": max(low, _count(rng)),
        }
    if kind == "anyOf":
        n = rng.choice([rng.randint(1, 4), rng.randint(120, 140)])
        return {"anyOf": [_child(rng, depth - 2, n) for _ in range(n)]}
    return {"$ref": "#/$defs/tree"}


def _child(rng: random.Random, depth: int, siblings: int) -> dict:
    """A wide node's children are leaves: 300 nested subtrees of 300 each once built a 4 GB schema in
    the test process itself, which killed its pytest worker (seed 2026120316)."""
    return _leaf(rng) if siblings > 10 else _node(rng, depth)


PLAIN = ["string", "integer", "number", "boolean", "null"]  # leaves every check passes


def make_schema(rng: random.Random, index: int = 2) -> dict:
    """A schema; the first one is refused (not a JSON Schema at all) and the second a plain leaf that
    passes every check, so that every seed reaches both outcomes. The rest are drawn."""
    if index == 1:
        return {"type": rng.choice(PLAIN)}
    schema = _node(rng, rng.randint(1, 4))
    if "$ref" in json.dumps(schema) or rng.random() < 0.2:
        # A recursive definition: a tree whose children are trees.
        tree = {
            "type": "object",
            "properties": {"v": _leaf(rng), "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}},
            "required": ["v"],
        }
        schema = {"$defs": {"tree": tree}, **schema}
    if rng.random() < 0.1 or index == 0:
        schema["maxItems"] = -1  # not a valid JSON Schema at all
    return schema


def make_case(index: int, folder: Path, seed: int) -> str:
    """The --schema argument: inline JSON, or a file when it is long (a command line has limits)."""
    text = json.dumps(make_schema(random.Random(seed * 1000 + index), index))
    if len(text) < 60_000 and index % 3:
        return text
    path = folder / f"case{index}.json"
    path.write_text(text)
    return str(path)


def judge(result: Result | None) -> tuple[str, str]:
    if result is None:
        return "failure", "no end within 120 s"
    kind, what = outcome(result, forbidden=("fix the grammar", "not a valid GBNF"))
    if kind == "error" and "--schema" not in what and "over the 1,048,576-byte limit" not in what:
        return "failure", f"a schema error that does not name --schema: {what!r}"
    return kind, what


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_schemas_end_cleanly(tmp_path, seed):
    args = [make_case(i, tmp_path, seed) for i in range(CASES)]
    # All in one bounded child (tests/fuzz/batch.py): a Python start per case was most of the time.
    outcomes = [
        judge(result)
        for result in run_many([("chat", "-m", NO_MODEL, "--schema", arg, "hi") for arg in args])
    ]
    counts = {kind: sum(1 for k, _ in outcomes if k == kind) for kind in ("error", "ok", "failure")}
    print(
        f"\nfuzz schema (seed {seed}): {CASES} cases, {counts['error']} clean errors, "
        f"{counts['ok']} successes, {counts['failure']} failures"
    )
    failures = [f"case {i}: {what}" for i, (kind, what) in enumerate(outcomes) if kind == "failure"]
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert_reached(counts, "error", "ok", seed=seed)
