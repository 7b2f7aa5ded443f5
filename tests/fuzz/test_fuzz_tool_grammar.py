"""Seeded hostile tools through `tool_constraint`, in-process: every form, every tool_choice.

Each case is a list of tools whose names are mostly what check_tools takes (letters, digits, `_`,
`-`, `.`), some full of quotes, backslashes, newlines, control characters and unicode, and whose
`parameters` are the schema fuzzer's small schemas (leaves and shallow nodes, some refused), or not
schemas at all. check_tools and `tool_constraint` must either refuse the case with one BadTool line
naming the field (`tools[i].function.parameters`) or the choice, or give a grammar that llama.cpp
parses (usecases/constraint.checked asks it) or refuses in one UsageError line. Any other exception
fails.

200 cases per seed by default (seconds); LLMCLI_FUZZ_LONG=1 runs 3,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import collections
import random
import traceback

import pytest

from llmcli.engine.tools import FORMATS
from llmcli.engine.tools.definitions import BadTool, check_tools
from llmcli.engine.tools.grammar import ToolChoice, tool_constraint
from llmcli.errors import UsageError
from llmcli.usecases.constraint import checked
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.test_fuzz_schema import _leaf, _text

CASES = cases(default=200, long=3000)
FIXED_SEED = 20261204
NAME_CHARS = "abcxyzABC019_.-"
NOT_SCHEMAS = [[], "object", 5, None, {"type": "string"}, {"type": 5}, {"type": "object", "multipleOf": 2}]


def _parameters(rng: random.Random) -> object:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(NOT_SCHEMAS)
    if roll < 0.25:
        return None  # no "parameters" key at all
    props = {_text(rng, 6): _leaf(rng) for _ in range(rng.randint(0, 4))}
    return {"type": "object", "properties": props, "required": [p for p in props if rng.random() < 0.5]}


def make_tools(rng: random.Random, index: int) -> list[dict]:
    """The first case is accepted by construction, the second refused; the rest are drawn."""
    if index == 0:
        return [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    tools = []
    for _ in range(rng.randint(1, 4)):
        name = "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 12)))
        function: dict[str, object] = {"name": (_text(rng, 10) or "g") if rng.random() < 0.1 else name}
        parameters = _parameters(rng) if index != 1 else {"type": "object", "multipleOf": 3}
        if parameters is not None:
            function["parameters"] = parameters
        tools.append({"type": "function", "function": function})
    return tools


def choice_for(rng: random.Random, tools: list[dict]) -> ToolChoice:
    mode = rng.choice(["auto", "required", "named", "named-missing"])
    if mode == "named":
        return ToolChoice("named", rng.choice(tools)["function"]["name"])
    if mode == "named-missing":
        return ToolChoice("named", "no such tool")
    return ToolChoice(mode)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_hostile_tools_make_a_grammar_or_one_clean_refusal(seed):
    counts: collections.Counter[str] = collections.Counter()
    for index in range(CASES):
        rng = random.Random(seed * 1000 + index)
        form = FORMATS[rng.choice(sorted(FORMATS))]
        try:
            tools = check_tools(make_tools(rng, index))
        except BadTool:
            counts["refused"] += 1
            continue
        choice = ToolChoice("auto") if index == 0 else choice_for(rng, tools)
        parallel = rng.random() < 0.5
        try:
            constraint = tool_constraint(tools, form, choice, parallel=parallel)
            assert constraint is not None
            checked(constraint)
        except (BadTool, UsageError) as exc:
            message = str(exc)
            assert message and "\n" not in message, (seed, index, message)
            assert message.startswith(("tools[", "tool_choice", "tools:")), (seed, index, message)
            counts["refused"] += 1
        except Exception:  # noqa: BLE001 - anything else is the bug this fuzzer looks for
            pytest.fail(f"seed {seed} case {index} ({form.name}, {choice}): {traceback.format_exc()}")
        else:
            assert constraint.kind == "tools"
            assert (constraint.trigger is not None) == (choice.mode == "auto")
            counts["grammar"] += 1
    assert_reached(counts, "grammar", "refused", seed=seed)
