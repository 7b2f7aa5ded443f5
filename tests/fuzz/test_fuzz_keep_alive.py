"""Hostile keep_alive values for `parse_keep_alive` (Ollama's field, on every model route).

Go durations garbled in one place, numbers, and junk of any JSON type: never an exception but the
400 naming the field, and a result that is None, a non-negative number of seconds, or math.inf (for
ever). The first cases reach each outcome by construction; the rest are drawn. 2,000 cases per seed
by default (well under a second); LLMCLI_FUZZ_LONG=1 runs 40,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from llmcli.serve.budget import parse_keep_alive
from llmcli.serve.errors import ApiError
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

FIXED_SEED = 20261204
CASES = cases(default=2000, long=40000)
PIECES = ["1", "0", "9", "-", "+", ".", " ", "h", "m", "s", "ms", "us", "µs", "ns", "e", "\x00", "é", "1e400"]
JUNK = [True, None, [], {}, 1e308, -1e308, math.nan, math.inf, 10**400, -(10**30), "", "5m" * 40]


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_keep_alive_is_seconds_forever_or_a_400_naming_it(seed):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    firsts: list[object] = ["1h30m", "-1", 0, "soon"]
    for i in range(CASES):
        if i < len(firsts):
            value = firsts[i]
        elif rng.random() < 0.2:
            value = rng.choice(JUNK)
        elif rng.random() < 0.5:  # a real duration, garbled in one place
            text = f"{rng.randint(0, 99)}h{rng.randint(0, 59)}m{rng.randint(0, 59)}s"
            at = rng.randrange(len(text))
            value = text[:at] + rng.choice(PIECES) + text[at + rng.randint(0, 2) :]
        else:
            value = "".join(rng.choices(PIECES, k=rng.randint(0, 8)))
        try:
            got = parse_keep_alive(value)
        except ApiError as exc:
            assert exc.status == 400 and exc.param == "keep_alive" and exc.message.startswith("keep_alive ")
            counts["refused"] += 1
            continue
        assert got is None or got == math.inf or (math.isfinite(got) and got >= 0), (seed, i, value, got)
        counts["forever" if got == math.inf else "none" if got is None else "seconds"] += 1
    assert_reached(counts, "seconds", "forever", "refused", seed=seed)
