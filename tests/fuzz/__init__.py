"""Seeded fuzzers of llmcli's parsers; how they choose their cases (tests/README.md tells the whole story).

Each fuzzer runs twice: on its own fixed seed, so a case that once failed keeps being run, and on the
run's seed. In `make test` (and so in CI) the run's seed comes from the checked-out commit, so one
commit gets one verdict at any hour. `make fuzz` sets LLMCLI_FUZZ_SEED from the UTC date and hour to
try new cases each time, and LLMCLI_FUZZ_SEED=N replays any run; tests/conftest.py fixes the seed once
per run (every pytest-xdist worker gets the same one) and prints it.
LLMCLI_FUZZ_LONG=1 runs each fuzzer's long mode (10 to 25 times the cases).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

SEED_VAR = "LLMCLI_FUZZ_SEED"
LONG_VAR = "LLMCLI_FUZZ_LONG"
LONG = os.environ.get(LONG_VAR, "") not in ("", "0")
NO_COMMIT_SEED = 20261204  # outside a git checkout (an unpacked sdist): still one fixed verdict
ROOT = Path(__file__).resolve().parents[2]


def commit_seed() -> int:
    """A seed from the checked-out commit's id: the same commit always runs the same cases."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        return int(head[:8], 16)
    except (OSError, subprocess.SubprocessError, ValueError):
        return NO_COMMIT_SEED


def run_seed() -> int:
    """LLMCLI_FUZZ_SEED (`make fuzz` sets one from the hour; a failure's replay line names one), else
    the commit's seed."""
    given = os.environ.get(SEED_VAR, "").strip()
    return int(given) if given else commit_seed()


def seeds(fixed: int) -> list[int]:
    """The seeds a fuzzer runs, for pytest.mark.parametrize: its fixed one, then the run's."""
    return [fixed, run_seed()]


SEED_IDS = ["fixed-seed", "run-seed"]


def cases(default: int, long: int) -> int:
    return long if LONG else default


def assert_reached(counts: Mapping[str, int], *outcomes: str, seed: int) -> None:
    """Every outcome class the fuzzer claims to reach (a clean error, a success, ...) was reached: a
    generator that only ever breaks, or never breaks, its inputs tests less than it says."""
    missed = [outcome for outcome in outcomes if not counts.get(outcome)]
    assert not missed, f"seed {seed}: no case reached {missed}; counts {dict(counts)}"
