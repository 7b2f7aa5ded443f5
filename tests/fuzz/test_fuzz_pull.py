"""Seeded hubs that lie about a file's body while their listing declares its size: a body without
end, a Content-Length longer or shorter than declared, a stall after some bytes, a trickle, a
dropped connection, a flipped byte. `llmcli pull` must end within a bound (a stall at
HF_HUB_DOWNLOAD_TIMEOUT, here 1 s), with the verified file or one error line and exit 1; never a
traceback, and never a file on disk larger than what the hub declared.

The first cases reach each outcome by construction (an honest hub, a body without end); the rest are
drawn. 8 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 80 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.hub.conftest import hf_repo_dir, loopback_hub
from tests.hub.fake_hub import Faults, one_file_repo
from tests.support.cli import cli, fresh_hf_constants

FIXED_SEED = 20261207
CASES = cases(default=8, long=80)
REPO = "llmcli-test/Fuzzed-GGUF"
FILE = "Fuzzed-Q4_K_M.gguf"
SIZES = [1_000, 60_000, 1_000_000]
LIES = ["honest", "endless", "longer", "shorter", "stall", "trickle", "drop", "corrupt"]
FIRST = ["honest", "endless"]
BOUND_S = 60  # a hang guard for one pull, many times what one needs: never a measure of speed


def lie(rng: random.Random, kind: str, size: int) -> Faults:
    faults = Faults()
    if kind == "endless":
        faults.endless = True
    elif kind == "longer":
        faults.advertise = size + rng.choice([1, size, 10 * size])
    elif kind == "shorter":
        faults.advertise = rng.randrange(1, size)
    elif kind == "stall":
        faults.stall_after = rng.randrange(0, size)
    elif kind == "trickle":
        faults.trickle_s = 0.001  # the drawn size is the small one: a second or two
    elif kind == "drop":
        faults.drop_after, faults.drop_times = rng.randrange(1, size), rng.choice([1, 2, 7])
    elif kind == "corrupt":
        faults.corrupt_at = rng.randrange(size)
    return faults


def largest_file(root: Path) -> int:
    return max((p.stat().st_size for p in root.rglob("*") if p.is_file()), default=0)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_a_lying_hub_ends_the_pull_in_time_with_nothing_past_the_declared_size(
    seed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    repos = {}
    for size in SIZES:
        (tmp_path / f"repo-{size}").mkdir()
        repos[size] = one_file_repo(REPO, FILE, size, tmp_path / f"repo-{size}")
    for i in range(CASES):
        kind = FIRST[i] if i < len(FIRST) else rng.choice(LIES)
        size = SIZES[0] if kind == "trickle" else rng.choice(SIZES)
        home = tmp_path / f"case-{i}"
        with loopback_hub([repos[size]], home, monkeypatch) as hub:
            monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
            fresh_hf_constants()
            hub.faults = lie(rng, kind, size)
            t0 = time.monotonic()
            r = cli("pull", REPO)
            took = time.monotonic() - t0
            where = f"seed {seed} case {i}: {kind} of {size} B ({hub.faults}) -> {r.exit_code} "
            where += repr(r.stderr[-300:])
            assert took < BOUND_S, where
            assert "Traceback" not in r.stderr and "internal error" not in r.stderr, where
            assert largest_file(home / "hf") <= size, where
            blobs = hf_repo_dir(REPO) / "blobs"
            whole = [p for p in blobs.iterdir() if p.suffix != ".incomplete"] if blobs.exists() else []
            if whole:  # verified against the declared sha256 (registering a file that is no model may fail)
                assert [p.stat().st_size for p in whole] == [size], where
                counts["verified"] += 1
            else:
                assert r.exit_code == 1 and r.stderr.splitlines()[-1].startswith("llmcli: error: "), where
                counts["refused"] += 1
            hub.closed.set()  # a stalled body's handler lets go
    assert_reached(counts, "verified", "refused", seed=seed)
