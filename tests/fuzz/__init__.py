"""Seeded fuzzers of llmcli's parsers; how they choose their cases (tests/README.md tells the whole story).

Each fuzzer runs twice: on its own fixed seed, so a case that once failed keeps being run, and on a
rotating seed, so each day's runs try new cases. The rotating seed is LLMCLI_FUZZ_SEED when it is
set, else one made from the UTC date and hour; tests/conftest.py fixes it once per run (every
pytest-xdist worker gets the same one) and prints it, and LLMCLI_FUZZ_SEED=N replays a run.
LLMCLI_FUZZ_LONG=1 runs each fuzzer's long mode (10 to 25 times the cases).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

SEED_VAR = "LLMCLI_FUZZ_SEED"
LONG_VAR = "LLMCLI_FUZZ_LONG"
LONG = os.environ.get(LONG_VAR, "") not in ("", "0")


def rotating_seed() -> int:
    """LLMCLI_FUZZ_SEED, else the UTC date and hour as a number (2026120314 at 14:xx on 3 Dec 2026)."""
    given = os.environ.get(SEED_VAR, "").strip()
    return int(given) if given else int(time.strftime("%Y%m%d%H", time.gmtime()))


def seeds(fixed: int) -> list[int]:
    """The seeds a fuzzer runs, for pytest.mark.parametrize: its fixed one, then the rotating one."""
    return [fixed, rotating_seed()]


SEED_IDS = ["fixed-seed", "rotating-seed"]


def cases(default: int, long: int) -> int:
    return long if LONG else default


def assert_reached(counts: Mapping[str, int], *outcomes: str, seed: int) -> None:
    """Every outcome class the fuzzer claims to reach (a clean error, a success, ...) was reached: a
    generator that only ever breaks, or never breaks, its inputs tests less than it says."""
    missed = [outcome for outcome in outcomes if not counts.get(outcome)]
    assert not missed, f"seed {seed}: no case reached {missed}; counts {dict(counts)}"
