"""Hostile manifests through `list`, `rm NAME` and `chat NAME hi`, each in a child process.

Each case is a seeded manifest in a private store (LLMCLI_HOME) inside a temp root that also holds a
"canary" folder outside the store, and a second canary beside the temp root. Manifests mix good entries
with random JSON shapes, wrong field types, path traversals into the canaries, absolute paths, symlinked
folders and files under blobs/, huge strings and control characters in names. Every case must end with
an exit below 128, no traceback, at most one stderr line for an error, both canaries untouched, and
nothing new outside the store.

15 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 400 (seeds:
tests/fuzz/__init__.py). The counts are printed (pytest -s): cases, clean errors, successes, failures.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.fuzz.batch import run_many
from tests.support.cli import Result

CASES = cases(default=15, long=400)
FIXED_SEED = 20240615
COMMANDS = ("list", "rm", "chat")
WEIRD: list[object] = [None, 0, -1, 1.5, "", [], {}, True, [1, {"a": None}], 10**30, "x" * 5000, {"path": 1}]
NASTY_TEXT = [
    "\x1b[2J\x1b[31mred",
    "a\nb\r\nc",
    "\x00nul",
    "\u202eevil",
    "[bold]x[/]",
    "é日本🙂",
    "\x07\x08\x7f\x9b",
    "-",
    "..",
    "../..",
    "x" * 100_000,
]


def digest_tree(root: Path) -> dict[str, str]:
    """Every file under `root` (not following symlinks) -> a hash of its bytes: what a canary holds."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@dataclass
class Case:
    index: int
    command: str
    root: Path
    argv: list[str]


def _paths(rng: random.Random, root: Path, beyond: Path, embedded: str, nasty: list[str]) -> list[str]:
    """File paths a manifest might list: the store's own, traversals, links and absolute paths out."""
    blobs = root / "home" / "blobs"
    return [
        str(blobs / "own.gguf"),
        str(blobs / "own2.gguf"),
        f"{blobs}/../../canary/a.gguf",
        f"{blobs}/../../../{beyond.name}/keep.txt",
        f"{blobs}/link/b.txt",
        str(blobs / "filelink.gguf"),
        f"{blobs}/link/sub/c.txt",
        str(root / "canary" / "a.gguf"),
        str(beyond / "keep.txt"),
        str(blobs),
        f"{blobs}/.",
        f"{blobs}/..",
        "blobs/own.gguf",
        "../canary/a.gguf",
        "",
        "/",
        "~/x",
        embedded,
        str(blobs / "missing.gguf"),
        rng.choice(nasty),
    ]


def _entry(rng: random.Random, paths: list[str], malformed: bool, nasty: list[str]) -> object:
    """An entry; well typed (only its paths and texts hostile) unless `malformed`."""
    if malformed and rng.random() < 0.2:
        return rng.choice(WEIRD)
    entry: dict[str, object] = {
        "path": rng.choice(paths),
        "files": rng.sample(paths, rng.randint(0, 5)),
        "source": rng.choice([None, "test", rng.choice(nasty)]),
        "size": rng.choice([0, 123, 10**12]),
        "created": rng.choice(["2024-06-15T00:00:00+00:00", rng.choice(nasty)]),
    }
    for _ in range(rng.choice([0, 1, 2]) if malformed else 0):  # a field of the wrong type
        entry[rng.choice(["path", "files", "size", "n_params", "quant", "builtin", "name", "arch"])] = (
            rng.choice(WEIRD)
        )
    if malformed and rng.random() < 0.2:
        del entry["path"]
    return entry


def _named(name: str, entry: object) -> object:
    """As llmcli writes entries: with their own name (a malformed one may already have another)."""
    return {"name": name, **entry} if isinstance(entry, dict) else entry


def make_case(index: int, rng: random.Random, base: Path, beyond: Path, embedded: str) -> Case:
    root = base / f"case{index:03d}"
    blobs = root / "home" / "blobs"
    (root / "canary" / "sub").mkdir(parents=True)
    blobs.mkdir(parents=True)
    (root / "canary" / "a.gguf").write_bytes(b"GGUF canary a")
    (root / "canary" / "b.txt").write_text("canary b")
    (root / "canary" / "sub" / "c.txt").write_text("canary c")
    (blobs / "own.gguf").write_bytes(b"not really a gguf")
    (blobs / "own2.gguf").write_bytes(b"GGUF\x03\x00\x00\x00" + os.urandom(rng.randint(0, 64)))
    (blobs / "link").symlink_to(root / "canary")
    (blobs / "filelink.gguf").symlink_to(root / "canary" / "a.gguf")
    # The first case (a `list`) reads a manifest llmcli could have written, well typed and without a
    # NUL, its paths and texts still hostile: every seed reaches a success. The rest are drawn.
    written = index == 0
    nasty = [t for t in NASTY_TEXT if "\x00" not in t] if written else NASTY_TEXT
    paths = _paths(rng, root, beyond, embedded, nasty)
    names = ["good", "m", "other", rng.choice(nasty), "mod" + rng.choice(nasty)]
    shape, malformed = rng.random(), rng.random() < 0.4
    if written:
        shape, malformed = 1.0, False
    if shape < 0.08:
        manifest: object = rng.choice(WEIRD)
    elif shape < 0.15:
        manifest = {"version": 1, "models": rng.choice(WEIRD)}
    else:
        manifest = {
            "version": rng.choice([1, 2, "x"]),
            "models": {
                name: _named(name, _entry(rng, paths, malformed, nasty))
                for name in rng.sample(names, rng.randint(1, len(names)))
            },
        }
    text = json.dumps(manifest)
    if malformed and rng.random() < 0.1:
        text = text[: rng.randint(0, len(text))]  # truncated
    elif malformed and rng.random() < 0.1:
        text = "[" * 50_000 + "]" * 50_000
    (root / "home" / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")
    command = COMMANDS[index % len(COMMANDS)]
    target = rng.choice([n for n in names if "\x00" not in n])  # a NUL cannot be an argument
    argv = {"list": ["list"], "rm": ["rm", target], "chat": ["chat", target, "hi", "-n", "1", "-t", "1"]}[
        command
    ]
    return Case(index, command, root, argv)


def run_cases(cases: list[Case]) -> list[Result | None]:
    """Every case in one child (tests/fuzz/batch.py), each with its own root as its variables and
    its working folder."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for var in ("LLMCLI_MODEL", "LLMCLI_DEBUG", "LLMCLI_ENDPOINT", "LLMCLI_API_KEY"):
        env.pop(var, None)
    each = [
        {
            "LLMCLI_HOME": str(case.root / "home"),
            "HOME": str(case.root / "userhome"),
            "XDG_DATA_HOME": str(case.root / "xdg"),
            "HF_HOME": str(case.root / "hf"),
        }
        for case in cases
    ]
    # An argument as a child reads it: its UTF-8 bytes (a lone surrogate too), decoded as argv is.
    argvs = [[os.fsdecode(a.encode("utf-8", "surrogatepass")) for a in case.argv] for case in cases]
    return run_many(argvs, env=env, vars=each, cwds=[case.root for case in cases], memory=None)


def judge(
    case: Case,
    r: Result | None,
    canary: dict[str, str],
    beyond_before: dict[str, str],
    beyond: Path,
) -> tuple[str, str]:
    """('clean' | 'success' | 'failure', why)."""
    if r is None:
        return "failure", "no end within 120 s"
    err = r.stderr
    if r.exit_code >= 128 or r.exit_code < 0:
        return "failure", f"exit {r.exit_code}: {err[-500:]}"
    if "Traceback" in err or "internal error" in err:
        return "failure", err[-800:]
    if digest_tree(case.root / "canary") != canary:
        return "failure", "the canary inside the temp root changed"
    if digest_tree(beyond) != beyond_before:
        return "failure", "the canary beside the temp root changed"
    unexpected = {p.name for p in case.root.iterdir()} - {"canary", "home"}
    if unexpected:
        return "failure", f"written outside the store: {sorted(unexpected)}"
    if r.exit_code == 0:
        return "success", ""
    lines = err.splitlines()
    if len(lines) != 1 or not lines[0].startswith("llmcli: error: "):
        return "failure", f"an error in {len(lines)} lines: {err[-800:]}"
    return "clean", ""


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_hostile_manifests_through_list_rm_and_chat(tmp_path: Path, embedded_path: str, seed: int) -> None:
    rng = random.Random(seed)
    base = tmp_path / "root"
    beyond = tmp_path / "beyond"  # outside the temp root that holds the cases: manifests aim at it too
    beyond.mkdir()
    (beyond / "keep.txt").write_text("beyond the root")
    beyond_before = digest_tree(beyond)
    cases = [make_case(i, rng, base, beyond, embedded_path) for i in range(CASES)]
    canaries = {c.index: digest_tree(c.root / "canary") for c in cases}
    results = run_cases(cases)
    counts = {"clean": 0, "success": 0, "failure": 0}
    failures = []
    for case, r in zip(cases, results, strict=True):
        verdict, why = judge(case, r, canaries[case.index], beyond_before, beyond)
        counts[verdict] += 1
        if verdict == "failure":
            failures.append(f"case {case.index} ({case.command}, seed {seed}): {why}")
    by_command = {cmd: sum(1 for c in cases if c.command == cmd) for cmd in COMMANDS}
    print(
        f"\nmanifest fuzz: {len(cases)} cases {by_command}, {counts['clean']} clean errors, "
        f"{counts['success']} successes, {counts['failure']} failures"
    )
    assert not failures, "\n".join(failures[:5])
    assert_reached(counts, "clean", "success", seed=seed)  # the generator reaches both outcomes


@pytest.mark.parametrize("unused", [None])
def test_the_generator_is_seeded(tmp_path: Path, embedded_path: str, unused: None) -> None:
    a, b = (tmp_path / "a", tmp_path / "b")
    for where in (a, b):
        make_case(0, random.Random(FIXED_SEED), where, tmp_path, embedded_path)
    assert (a / "case000/home/manifest.json").read_text() == (
        b / "case000/home/manifest.json"
    ).read_text().replace(str(b), str(a))
