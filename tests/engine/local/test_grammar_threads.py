"""Grammars checked in several threads at once (serve checks tools' grammars in worker threads while
its engine thread builds others): llama.cpp's parser writes its errors to fd 2, which each check
swaps for a sink; one at a time, each gets its own reason and fd 2 is the process's again after."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from llmcli.engine.local.grammar import check_gbnf
from llmcli.errors import UsageError


def test_concurrent_grammar_checks_keep_their_own_errors_and_leave_stderr_alone() -> None:
    before = os.fstat(2)

    def check(i: int) -> str:
        try:
            check_gbnf(f'root ::= "a" rule{i}\n', f"grammar {i}")
        except UsageError as exc:
            return str(exc)
        return ""

    for _ in range(5):
        with ThreadPoolExecutor(8) as pool:
            reasons = list(pool.map(check, range(32)))
        for i, reason in enumerate(reasons):
            assert reason.startswith(f"grammar {i} is not a valid GBNF grammar"), reason
            assert f"rule{i}" in reason, reason
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (before.st_dev, before.st_ino)


@pytest.mark.parametrize("gbnf", ['root ::= "a"\n'])
def test_a_good_grammar_still_passes(gbnf: str) -> None:
    check_gbnf(gbnf, "grammar")
