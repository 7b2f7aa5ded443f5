"""Seeded hostile grammars through `chat --grammar FILE`, in a bounded child (tests/fuzz/batch.py).

Each case is a generated GBNF file: nesting from shallow to far past the depth limit (llama.cpp's
parser overflowed its stack at 10,000-30,000 levels), rule chains past the chain limit, repetition
counts around llama.cpp's own threshold, literals with every escape, parentheses hidden in
literals, classes and comments, random corruptions, and files past the size limit. The model is
missing on purpose: a grammar that passes every check (the pre-check, then llama.cpp's parser)
ends on "no such file", a refused one on its own line. Every case must end with an exit below
128, no traceback and exactly one stderr line.

12 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 400 (seeds: tests/fuzz/__init__.py). The
counts are printed (pytest -s): cases, clean errors, successes, failures.

A second fuzzer sends grammars that demand what no model writes (an empty or reversed character
class, NUL, surrogates or code points past U+10FFFF in a literal or a class) or that reach a dead end
only while sampling (a token past the vocabulary, an end token): llama.cpp aborted the process on
each. These run on the embedded model, in a bounded child, and must end refused (exit 2,
one line) or with a clean reply (exit 0): 6 cases per seed by default, 150 in the long mode.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from llmcli.engine.schema_grammar import gbnf_literal
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.batch import run_many
from tests.fuzz.bounded import NO_MODEL, outcome
from tests.support.cli import Result

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


def run_cases(paths: list[Path]) -> list[tuple[str, str]]:
    """Each grammar through chat, all in one bounded child (tests/fuzz/batch.py)."""
    results = run_many([("chat", "-m", NO_MODEL, "--grammar", str(path), "hi") for path in paths])
    return [outcome(result) if result else ("failure", "no end within 120 s") for result in results]


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_grammars_end_cleanly(tmp_path, seed):
    paths = [make_case(i, tmp_path, seed) for i in range(CASES)]
    outcomes = run_cases(paths)
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


# -- grammars that no model can satisfy, on the real model -----------------------------------------
DEAD_CASES = cases(default=6, long=150)  # per seed
DEAD_FIXED_SEED = 20261204
FAST = ("--temp", "0", "-t", "1", "--no-stats", "-n", "6")


def _unwritable(rng: random.Random) -> str:
    """A code point no reply holds, as a GBNF escape."""
    return rng.choice(
        [
            "\\x00",
            "\\u0000",
            "\\U00000000",
            f"\\u{rng.randint(0xD800, 0xDFFF):04X}",
            f"\\U{rng.randint(0x110000, 0xFFFFFFFF):08X}",
        ]
    )


def _empty_class(rng: random.Random) -> str:
    """A character class that matches nothing writable (refused before sampling)."""
    a = rng.randint(0x21, 0x2FFF)
    reversed_range = f"\\u{a + rng.randint(1, 50):04X}-\\u{a:04X}"
    low, high = f"\\u{rng.randint(0xD800, 0xDFFF):04X}", f"\\U{rng.randint(0x10FFFF, 0x7FFFFFFF):08X}"
    return rng.choice(
        [
            f"[{reversed_range}]",
            f"[{reversed_range}{reversed_range}]",
            f"[{_unwritable(rng)}]",
            "[^\\x00-\\U0010FFFF]",
            "[^\\x01-\\uD7FF\\uE000-\\U0010FFFF]",
            f"[^\\x00-{low}\\uD800-{high}]",  # overlapping ranges that cover every writable character
            f"[\\uD800-\\uDFFF{_unwritable(rng)}]",
        ]
    )


def _bad_literal(rng: random.Random) -> str:
    text = gbnf_literal("".join(rng.choice("ab é🙂") for _ in range(rng.randint(0, 4))))[1:-1]
    cut = rng.randint(0, len(text)) if "\\" not in text else len(text)
    return f'"{text[:cut]}{_unwritable(rng)}{text[cut:]}"'


def _late_dead_end(rng: random.Random) -> str:
    """What only sampling can find: a token never drawn (past the vocabulary, or an end token)."""
    return f"<[{rng.choice([0, 2, rng.randint(49_152, 2**32 - 1)])}]>"


def _near_miss(rng: random.Random) -> str:
    """Classes that leave one writable character or a few: accepted, and the model writes them."""
    return rng.choice(["[a-a]", "[\\x00-\\x01]", "[\\uD7FF-\\uE000]", "[^\\x00-\\U0010FFFE]", "[b-ac-c]"])


DEAD_PARTS = [_empty_class, _bad_literal, _late_dead_end, _near_miss]
# Where the part sits: alone, after a literal, in a rule of its own, as one alternative, repeated.
PLACES = [
    "root ::= {part}",
    'root ::= "a" {part}',
    'root ::= "a" x\nx ::= {part} "b"',
    'root ::= "yes" | {part}',
    'root ::= ({part})* "z"',
    "root ::= {part}? [0-9]",
]


def make_dead_case(index: int, folder: Path, seed: int) -> Path:
    """Cases 0 and 1 reach both outcomes by construction (refused, then a clean reply); the rest are drawn."""
    rng = random.Random(seed * 1000 + index)
    if index == 0:
        text = f"root ::= {_empty_class(rng)}"
    elif index == 1:
        text = f'root ::= "a" {_late_dead_end(rng)}'
    else:
        part = rng.choice(DEAD_PARTS)(rng)
        text = rng.choice(PLACES).format(part=part)
    path = folder / f"dead{index}.gbnf"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def dead_outcome(result: Result | None) -> tuple[str, str]:
    """('error' | 'ok' | 'failure', what): refused with one line and exit 2, or a reply and exit 0."""
    if result is None:
        return "failure", "no end within 120 s"
    err, lines = result.stderr, result.stderr.strip().splitlines()
    if result.exit_code == 0 and not err:
        return "ok", result.stdout
    if result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("llmcli: error: "):
        if "Traceback" not in err and "fix the grammar" in err:
            return "error", lines[0]
    return "failure", f"exit {result.exit_code}: {err.strip()[-300:]!r}"


@pytest.mark.parametrize("seed", seeds(DEAD_FIXED_SEED), ids=SEED_IDS)
def test_fuzz_impossible_grammars_never_abort(tmp_path, seed):
    paths = [make_dead_case(i, tmp_path, seed) for i in range(DEAD_CASES)]
    results = run_many([("chat", *FAST, "--grammar", str(path), "hi") for path in paths])
    outcomes = [dead_outcome(result) for result in results]
    counts = {kind: sum(1 for k, _ in outcomes if k == kind) for kind in ("error", "ok", "failure")}
    print(
        f"\nfuzz impossible grammar (seed {seed}): {DEAD_CASES} cases, {counts['error']} refused, "
        f"{counts['ok']} clean replies, {counts['failure']} failures"
    )
    failures = [
        f"case {i} ({path.read_text(encoding='utf-8').strip()!r}): {what}"
        for i, (path, (kind, what)) in enumerate(zip(paths, outcomes, strict=True))
        if kind == "failure"
    ]
    assert not failures, f"seed {seed}:\n" + "\n".join(failures)
    assert_reached(counts, "error", "ok", seed=seed)
