"""The fuzzers' hang guard: their long mode runs past the suite's default one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fuzz import LONG

HERE = Path(__file__).parent
# LLMCLI_FUZZ_LONG=1 (`make fuzz`) runs 10 to 25 times the cases: a fuzzer that takes 40 s in `make
# test` on a busy machine then takes minutes, up to an hour, past pyproject.toml's 300 s default.
LONG_TIMEOUT_S = 3600


def pytest_collection_modifyitems(items):
    if not LONG:
        return
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.timeout(LONG_TIMEOUT_S))
