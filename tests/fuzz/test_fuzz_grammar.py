"""Seeded hostile grammars through `chat --grammar FILE`, each in a child process.

Each case is a generated GBNF file: nesting from shallow to far past the depth limit (llama.cpp's
parser overflowed its stack at 10,000-30,000 levels), rule chains past the chain limit, repetition
counts around llama.cpp's own threshold, literals with every escape, parentheses hidden in
literals, classes and comments, random corruptions, and files past the size limit. The model is
missing on purpose: a grammar that passes every check (the pre-check, then llama.cpp's parser)
ends on "no such file", a refused one on its own line. Every case must end with an exit below
128, no traceback and exactly one stderr line.

12 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 400 (seeds: tests/fuzz/__init__.py). The
counts are printed (pytest -s): cases, clean errors, successes, failures.
"""

from __future__ import annotations

import random
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from llmcli.engine.schema_grammar import gbnf_literal
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.bounded import NO_MODEL, outcome, run_bounded

CASES = cases(default=12, long=400)  # per seed
FIXED_SEED = 20261203
CHARS = [
    '"',
    "\\",
    "(",
    ")",
    "[",
    "]",
    "#",
    "\n",
    "\t",
    "\x00",
    "\x7f",
    "é",
    "🙂",
    "|",
    "?",
    "*",
    "{",
    "}",
    "a",
]


def _size(rng: random.Random, small: int, limit: int, far: int) -> int:
    """Shallow, near the limit, or past it."""
    return rng.choice([rng.randint(1, small), rng.randint(limit - 20, limit), rng.randint(limit + 1, far)])


def _literal(rng: random.Random) -> str:
    return gbnf_literal("".join(rng.choice(CHARS) for _ in range(rng.randint(1, 10))))


def _deep(rng: random.Random) -> str:
    depth = _size(rng, 40, 1000, 40_000)
    suffix = rng.choice(["", "?", "*"])
    return "root ::= " + "(" * depth + _literal(rng) + (")" + suffix) * depth + "\n"


def _chain(rng: random.Random) -> str:
    n = _size(rng, 40, 5000, 60_000)
    lead = rng.choice(["", '"x" '])  # a chain of first elements, or of later ones
    rules = "".join(f"r{i:x} ::= {lead}r{i + 1:x}\n" for i in range(n))
    return f"root ::= r0\n{rules}r{n:x} ::= {_literal(rng)}\n"


def _repeat(rng: random.Random) -> str:
    low = rng.randint(0, 50)
    high = rng.choice([low + rng.randint(0, 50), rng.randint(1900, 2100), rng.randint(2101, 10**6)])
    return f"root ::= {_literal(rng)}{{{low},{high}}}\n"


def _hidden(rng: random.Random) -> str:
    """Parentheses where they do not nest: in literals, classes and comments (the grammar is fine)."""
    n = rng.randint(1, 3000)
    return f'root ::= "{"(" * n}" [(] x # {"(" * n}\nx ::= [)(] "{")" * n}"\n'


def _literals(rng: random.Random) -> str:
    alts = " | ".join(_literal(rng) for _ in range(rng.randint(1, 30)))
    return f"root ::= {alts}\n"


def _corrupt(rng: random.Random) -> str:
    text = list(rng.choice([_literals, _hidden, _repeat])(rng))
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(text) + 1)
        if rng.random() < 0.5 and text:
            del text[min(i, len(text) - 1)]
        else:
            text.insert(i, rng.choice(CHARS + ["::=", "(", ")", "root", "<[99]>"]))
    return "".join(text)


def _big(rng: random.Random) -> str:
    return "root ::= " + " | ".join(['"' + "x" * 1000 + '"'] * rng.randint(1050, 1100)) + "\n"


GENERATORS = [_deep, _chain, _repeat, _hidden, _literals, _corrupt, _big]


def make_case(index: int, folder: Path, seed: int) -> Path:
    rng = random.Random(seed * 1000 + index)
    path = folder / f"case{index}.gbnf"
    path.write_text(GENERATORS[index % len(GENERATORS)](rng), encoding="utf-8", errors="surrogatepass")
    return path


def run_case(path: Path) -> tuple[str, str]:
    try:
        result = run_bounded("chat", "-m", NO_MODEL, "--grammar", str(path), "hi", timeout=120)
    except subprocess.TimeoutExpired:
        return "failure", "no end within 120 s"
    return outcome(result)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_grammars_end_cleanly(tmp_path, seed):
    paths = [make_case(i, tmp_path, seed) for i in range(CASES)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        outcomes = list(pool.map(run_case, paths))
    counts = {kind: sum(1 for k, _ in outcomes if k == kind) for kind in ("error", "ok", "failure")}
    print(
        f"\nfuzz grammar (seed {seed}): {CASES} cases, {counts['error']} clean errors, "
        f"{counts['ok']} successes, {counts['failure']} failures"
    )
    failures = [
        f"case {i} ({GENERATORS[i % len(GENERATORS)].__name__}): {what}"
        for i, (kind, what) in enumerate(outcomes)
        if kind == "failure"
    ]
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert_reached(counts, "error", "ok", seed=seed)
