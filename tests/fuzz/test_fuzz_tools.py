"""Mutated tool-call replies for every family's parser (engine/tools).

Each case is a recorded reply (tests/engine/tools/corpus.py) with a few random edits: markers and
their halves, JSON punctuation, `<think>` tags, cuts and repeats. Every family's parser reads it
whole and streamed in random pieces: never an exception, the joined stream equals the whole
parse, and no marker of the family's markup is left in the content outside `<think>…</think>`
(in any stretch of it between two pieces of markup: see content_runs).
The first cases reach each outcome by construction (an untouched call, an untouched malformed
reply, plain text); the rest are drawn. 1,500 cases per seed by default (a few seconds);
LLMCLI_FUZZ_LONG=1 runs 30,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import pytest

from llmcli.engine.tools import FORMATS, ContentDelta, Delta, ToolCallStream, join, parse_reply
from tests.engine.tools.corpus import CORPUS, TOOLS
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

FIXED_SEED = 20261204
CASES = cases(default=1500, long=30000)
PIECES = [
    "<tool_call>", "</tool_call>", "<tool_", "</tool", "[TOOL_CALLS]", "[TOOL_", "[ARGS]", "<|python_tag|>",
    "<|python", ">>>", ">>", "all\n", "get_time\n", "<think>", "</think>", "<thi", "{", "}", "[", "]", '"',
    ":", ",", ";", "\n", " ", "\\", '{"name": "get_time", "arguments": {}}', '"name"', "NaN", "1e999",
    "é", "\x00", "\ud800", "get_weather",
]  # fmt: skip
THINK = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)


def mutate(text: str, rng: random.Random) -> str:
    for _ in range(rng.randint(1, 4)):
        at = rng.randint(0, len(text))
        kind = rng.randrange(4)
        if kind == 0:
            text = text[:at] + rng.choice(PIECES) + text[at:]
        elif kind == 1:
            text = text[:at] + text[at + rng.randint(1, 8) :]
        elif kind == 2:
            text = text[:at]  # cut off, as max_tokens cuts a reply
        else:
            text = text[:at] + text[max(0, at - rng.randint(1, 30)) : at] + text[at:]
    return text


def pieces_of(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(0, 10)))) if text else []
    return [text[a:b] for a, b in itertools.pairwise([0, *cuts, len(text)])]


def counter_ids():
    count = itertools.count()
    return lambda: f"call_{next(count)}"


def content_runs(deltas: list[Delta], thinking: bool) -> list[str]:
    """The content between two pieces of markup (each sends a call or a malformed delta): text on
    both sides of dropped markup may join into a marker's letters, but no run may hold one."""
    runs = ["<think>" if thinking else ""]
    for delta in deltas:
        if isinstance(delta, ContentDelta):
            runs[-1] += delta.text
        else:
            runs.append("")
    return runs


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_tool_call_parsers_never_raise_nor_leak_markup(seed):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    called = next(case for case in CORPUS if case.calls and not case.malformed)
    malformed = next(case for case in CORPUS if case.malformed)
    firsts = [
        (called.text, called.form.name),
        (malformed.text, malformed.form.name),
        ("Just text.", "hermes"),
    ]
    for i in range(CASES):
        if i < len(firsts):
            text, only = firsts[i]
        else:
            text, only = mutate(rng.choice(CORPUS).text, rng), None
        thinking = rng.random() < 0.1
        for form in FORMATS.values():
            if only and form.name != only:
                continue
            whole = parse_reply(text, form, TOOLS, thinking, counter_ids())
            stream = ToolCallStream(form, TOOLS, thinking, counter_ids())
            deltas = [delta for piece in pieces_of(text, rng) for delta in stream.feed(piece)]
            deltas += stream.finish()
            assert join(deltas) == whole, (seed, i, form.name, text)
            for run in content_runs(deltas, thinking):
                leaked = [marker for marker in form.markers if marker in THINK.sub("", run)]
                assert not leaked, (seed, i, form.name, text, run)
            counts["calls" if whole.calls else "malformed" if whole.malformed else "plain"] += 1
    assert_reached(counts, "calls", "malformed", "plain", seed=seed)
