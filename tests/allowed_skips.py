"""The only skips a strict run (LLMCLI_TEST_STRICT=1, as `make test` and CI run) accepts.

Each row names the tests it covers (a regular expression over the pytest id), the skip reason it
accepts (another one), and why such a skip is not a hole in the suite. Any other skip fails a strict
run, and every run prints its skips grouped by reason (tests/conftest.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AllowedSkip:
    test: str  # re.fullmatch over the test id
    reason: str  # re.search over the skip reason
    why: str


# None today. The corpus's four tool-use templates (Command R+'s, Hermes 2 Pro's and 3's, firefunction
# v2's), which transformers cannot render without tools, render its tool conversations now.
ALLOWED_SKIPS: list[AllowedSkip] = []


def is_allowed(test: str, reason: str, rows: list[AllowedSkip] = ALLOWED_SKIPS) -> bool:
    return any(re.fullmatch(row.test, test) and re.search(row.reason, reason) for row in rows)
