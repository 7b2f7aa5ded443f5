"""Seeded store names through shell completion: nothing a shell would run, split or show raw is offered.

Each case fills a store's manifest (as `llmcli` writes it) with names drawn from letters of several
scripts, digits, safe punctuation, shell metacharacters, quotes, whitespace, control characters,
escape sequences and invisible format characters, sometimes damages the manifest, and asks each
shell's completion protocol (bash, zsh, fish) for a prefix. A run must exit 0 (below 128, no
traceback) with nothing on stderr; every name offered must be one of the store's and `offerable`,
every offerable name matching the prefix must be offered, and the output must hold no control
character. A damaged manifest completes nothing. Nothing is written outside the case's folder.
The run checks it reached every outcome: names offered, names withheld, a damaged manifest.

15 cases per seed by default (3 subprocesses each); LLMCLI_FUZZ_LONG=1 runs 400
(seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from click.shell_completion import split_arg_string

from llmcli.commands.options import offerable
from llmcli.errors import LlmcliError
from llmcli.store import EMBEDDED_NAME, Store
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.batch import run_many

CASES = cases(default=15, long=400)  # per seed
FIXED_SEED = 20261203
SAFE = "abcxyzABCXYZ0123456789._-:/+@=,%" + "мдλΩ中文é"
HOSTILE = [
    "$(",
    ")",
    "`",
    ";",
    "&",
    "|",
    "<",
    ">",
    "'",
    '"',
    "\\",
    " ",
    "\t",
    "\n",
    "\r",
    "*",
    "?",
    "[",
    "]",
    "{",
    "}",
    "!",
    "#",
    "~",
    "$HOME",
    "\x1b[31m",
    "\x1b]0;pwned\x07",
    "\x00",
    "\x7f",
    "\u202e",
    "\u200b",
    "\u2028",
    "\x85",
]


def name(rng: random.Random) -> str:
    parts = [rng.choice(SAFE) for _ in range(rng.randint(1, 12))]
    if rng.random() < 0.5:
        for _ in range(rng.randint(1, 3)):
            parts.insert(rng.randrange(len(parts) + 1), rng.choice(HOSTILE))
    return "".join(parts)


def manifest(names: list[str], files: Path) -> dict:
    models = {}
    for i, n in enumerate(names):
        path = files / f"m{i}.gguf"
        models[n] = {"name": n, "path": str(path), "files": [str(path)], "source": "test", "size": 4}
    return {"models": models}


# What a shell's completion protocol puts between its values: fish's is "value<TAB>description".
SEPARATORS = {"bash": "\n", "zsh": "\n", "fish": "\n\t"}


def protocol(shell: str, words: str) -> dict[str, str]:
    if shell == "bash":
        return {
            "COMP_WORDS": words,
            # split as bash splits the line (blanks only): str.split() also splits at U+2028 and
            # other Unicode spaces, which a shell keeps inside a word
            "COMP_CWORD": str(len(re.split(r"[ \t\n]+", words)) - 1),
        }
    extra = {"_TYPER_COMPLETE_FISH_ACTION": "get-args"} if shell == "fish" else {}
    return {"_TYPER_COMPLETE_ARGS": words, **extra}


def offered(shell: str, stdout: str) -> list[str]:
    """The names in a shell's answer (zsh's is a `_arguments` spec with its quoting)."""
    if shell == "zsh":
        if stdout.strip() in ("", "_files"):
            return []
        body = stdout.strip().removeprefix("_arguments '*: :((").removesuffix("))'")
        return [line.strip('"').replace("\\\\:", ":").replace("\\$", "$") for line in body.splitlines()]
    return [line for line in stdout.split("\n") if line]


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_completion_offers_only_safe_store_names(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    outcomes = {"offered": 0, "withheld": 0, "damaged manifest": 0, "failure": 0}
    failures = []
    planned = []  # (case, home, names, listed, damaged, prefix, shell, words)
    for case in range(CASES):
        home = tmp_path / f"case{case}"
        (home / "files").mkdir(parents=True)
        names = [name(rng) for _ in range(rng.randint(1, 8))]
        cut = rng.random() < 0.15 or case == 0  # the first one cut: every seed reaches a damaged manifest
        text = json.dumps(manifest(names, home / "files"))
        (home / "manifest.json").write_text(text[: rng.randrange(len(text))] if cut else text)
        try:  # the store refuses a cut manifest, and names it cannot hold (a NUL): then nothing completes
            listed, damaged = [e.name for e in Store(home).list() if not e.builtin], False
        except LlmcliError:
            listed, damaged = [], True
        prefix = rng.choice(["", rng.choice(names)[:1], rng.choice(names)[:3], "$(", "'", '"a'])
        # No shell hands over a NUL (its variables cannot hold one), nor a word that opens with a
        # blank (the blank ended the word before it)
        prefix = prefix.replace("\x00", "").lstrip(" \t\n")
        shell = ("bash", "zsh", "fish")[case % 3]
        words = f"llmcli show {prefix}" if prefix else "llmcli show "
        planned.append((case, home, names, listed, damaged, prefix, shell, words))
    # Every case's completion in one child (tests/fuzz/batch.py), each with its own variables.
    answers = run_many(
        [() for _ in planned],
        vars=[
            {"LLMCLI_HOME": str(home), "_LLMCLI_COMPLETE": f"complete_{shell}", **protocol(shell, words)}
            for _, home, _, _, _, _, shell, words in planned
        ],
        memory=None,
    )
    for (case, _home, names, listed, damaged, prefix, shell, words), r in zip(planned, answers, strict=True):
        problem = None
        if r is None:
            problem = "no end within 120 s"
        elif not 0 <= r.exit_code < 128 or "Traceback" in r.stderr:
            problem = f"exit {r.exit_code}: {r.stderr[-300:]}"
        elif r.exit_code != 0 or r.stderr:
            problem = f"exit {r.exit_code}, stderr {r.stderr!r}"
        elif any(not (c.isprintable() or c in SEPARATORS[shell]) for c in r.stdout):
            problem = f"a control character reached the shell: {r.stdout!r}"
        else:
            got = [n for n in offered(shell, r.stdout) if n != EMBEDDED_NAME]
            typed = split_arg_string(words)  # the word as the shell hands it over: `'` opens an empty one
            ended = words.endswith(" ")
            incomplete = typed[-1] if len(typed) > 2 and not ended else ""
            # A prefix the shell splits at a blank ("X\nY") puts the cursor on a second argument,
            # which `show` (one MODEL) does not take: nothing is offered there.
            past_model = len(typed if ended else typed[:-1]) > 2
            if incomplete == "=":  # click reads a lone "=" as nothing typed (shells split `--opt=` there)
                incomplete = ""
            expected = [] if past_model else [n for n in listed if offerable(n) and n.startswith(incomplete)]
            if incomplete.startswith("-"):  # click completes the command's options there, never a name
                got, expected = [n for n in got if not n.startswith("-")], []
            unsafe = [n for n in got if any(h in n for h in HOSTILE) or not n.isprintable()]
            if unsafe:
                problem = f"offered names a shell would act on: {unsafe!r}"
            elif sorted(set(got)) != sorted(set(expected)):
                problem = f"offered {got!r}, expected {expected!r}"
        if problem:
            outcomes["failure"] += 1
            failures.append(f"case {case} ({shell}, prefix {prefix!r}, names {names!r}): {problem}")
            continue
        if damaged:
            outcomes["damaged manifest"] += 1
        else:
            outcomes["offered"] += sum(offerable(n) for n in listed)
            outcomes["withheld"] += sum(not offerable(n) for n in listed)
        outside = [p for p in tmp_path.rglob("*") if not str(p).startswith(str(tmp_path / "case"))]
        assert not outside, outside
    print(
        f"\ncompletion fuzz (seed {seed}): {CASES} cases: {outcomes['damaged manifest']} clean errors "
        f"(a damaged manifest, nothing completed), "
        f"{CASES - outcomes['failure'] - outcomes['damaged manifest']} "
        f"successes ({outcomes['offered']} names offered, {outcomes['withheld']} withheld), "
        f"{outcomes['failure']} failures"
    )
    assert not failures, "\n".join(failures[:5])
    assert_reached(outcomes, "offered", "withheld", "damaged manifest", seed=seed)
