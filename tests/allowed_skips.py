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


# The corpus's four tool-use templates (Command R+'s, Hermes 2 Pro's and 3's, firefunction v2's), which
# transformers cannot render without tools, render its tool conversations now.
ALLOWED_SKIPS: list[AllowedSkip] = [
    AllowedSkip(
        r"tests/test_build_args\.py::test_the_no_amx_flags_beat_an_amx_cpus_march_in_either_order",
        r"no gcc|this gcc does not know",
        "the -mno-amx-* flags are for a compiler that targets x86; one that cannot (Apple's clang on "
        "arm64, a GCC older than 11) never builds llama.cpp for an AMX CPU",
    ),
    AllowedSkip(
        r"tests/test_support_servers\.py::test_a_server_dies_with_the_process_that_started_it",
        r"PR_SET_PDEATHSIG is Linux's",
        "elsewhere there is no such kernel call: a server is stopped by its fixture only",
    ),
]


def is_allowed(test: str, reason: str, rows: list[AllowedSkip] = ALLOWED_SKIPS) -> bool:
    return any(re.fullmatch(row.test, test) and re.search(row.reason, reason) for row in rows)
