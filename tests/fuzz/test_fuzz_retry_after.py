"""Hostile Retry-After headers for `retry_after_seconds` (a server still loading its model sends one).

Random digits, real HTTP dates garbled in one place, and junk: never an exception, and the answer
is None ("no advice") or a wait from 0 to a day. The first cases reach each outcome by construction
(seconds, a date, an unreadable value); the rest are drawn. 2,000 cases per seed by default (well
under a second); LLMCLI_FUZZ_LONG=1 runs 40,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from llmcli.engine.openai.retry import LONGEST, retry_after_seconds
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

NOW = datetime(2026, 12, 4, 14, 0, 0, tzinfo=timezone.utc)
FIXED_SEED = 20261204
CASES = cases(default=2000, long=40000)
PIECES = ["1", "0", "9", "-", ".", " ", ",", ":", "GMT", "Fri", "Dec", "2026", "+0100", "²", "\x00", "é"]


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_retry_after_is_none_or_a_bounded_wait(seed):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    firsts = ["12", format_datetime(NOW + timedelta(seconds=5), usegmt=True), "12x"]
    for i in range(CASES):
        if i < len(firsts):
            value = firsts[i]
        elif rng.random() < 0.5:  # a real date, garbled in one place
            text = format_datetime(NOW + timedelta(seconds=rng.randint(-(10**6), 10**6)), usegmt=True)
            at = rng.randrange(len(text))
            value = text[:at] + rng.choice(PIECES) + text[at + rng.randint(0, 3) :]
        else:
            value = "".join(rng.choices(PIECES, k=rng.randint(0, 8)))
        got = retry_after_seconds(value, NOW)
        assert got is None or 0 <= got <= LONGEST, (seed, i, value, got)
        counts["unreadable" if got is None else "seconds" if value.strip().isdigit() else "date"] += 1
    assert_reached(counts, "seconds", "date", "unreadable", seed=seed)
