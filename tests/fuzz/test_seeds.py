"""The run's fuzz seed is the commit's, not the clock's: one commit, one verdict, at any hour."""

from __future__ import annotations

import subprocess
import time

from tests.fuzz import ROOT, SEED_VAR, commit_seed, run_seed, seeds


def test_the_run_seed_comes_from_the_commit_id_and_not_from_the_hour(monkeypatch):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    monkeypatch.delenv(SEED_VAR, raising=False)
    before = run_seed()
    # Two different hours, as CI at 13:00 and at 14:00 would read the clock.
    monkeypatch.setattr(time, "gmtime", lambda *_: time.struct_time((2026, 12, 4, 14, 0, 0, 4, 338, 0)))
    monkeypatch.setattr(time, "time", lambda: before + 3600.0)
    assert run_seed() == before == commit_seed() == int(head.stdout.strip()[:8], 16)


def test_a_given_seed_replays_a_run(monkeypatch):
    monkeypatch.setenv(SEED_VAR, "2026120314")
    assert seeds(7) == [7, 2026120314]
