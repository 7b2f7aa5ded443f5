"""A hub that lies about a file's body: it declares 1 MB, then streams without end, announces more,
stalls or trickles. The pull stops at once with one line, keeps what can still verify (for a resume)
and removes what never can."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hub.conftest import hf_repo_dir, loopback_hub
from tests.hub.fake_hub import FakeHub, FakeRepo, one_file_repo
from tests.support.cli import cli, fresh_hf_constants

LYING_REPO = "llmcli-test/Lying-GGUF"
LYING_FILE = "Lying-Q4_K_M.gguf"
SIZE = 1_000_000


@pytest.fixture(scope="session")
def lying_repo(tmp_path_factory: pytest.TempPathFactory) -> FakeRepo:
    """One LFS file of 1 MB: what the listing declares, and what an honest body would hold."""
    return one_file_repo(LYING_REPO, LYING_FILE, SIZE, tmp_path_factory.mktemp("lying"))


@pytest.fixture
def lying(lying_repo: FakeRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A hub of the one repo (the GGUF fixtures are not needed: nothing here loads)."""
    with loopback_hub([lying_repo], tmp_path, monkeypatch) as fake:
        yield fake


def partials() -> list[Path]:
    blobs = hf_repo_dir(LYING_REPO) / "blobs"
    return sorted(blobs.glob("*.incomplete")) if blobs.exists() else []


def on_disk() -> int:
    root = Path(os.environ["HF_HOME"])
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def one_line(r, says: str, code: int = 1) -> str:
    assert r.exit_code == code and r.stdout == "", r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("llmcli: error: ") and says in last, r.stderr
    assert "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    return last


def test_a_body_without_end_stops_at_the_declared_size_and_is_removed(lying: FakeHub) -> None:
    lying.faults.endless = True
    t0 = time.monotonic()
    r = cli("pull", LYING_REPO)
    last = one_line(r, f"the hub sent more than the 1.0 MB it declared for {LYING_FILE}")
    assert "partial file removed" in last and "is HF_ENDPOINT a Hugging Face hub you trust?" in last
    assert time.monotonic() - t0 < 60  # at once, not when the disk is full
    assert partials() == [] and on_disk() < 2 * SIZE


def test_a_body_announced_longer_than_declared_is_refused_before_a_byte(lying: FakeHub) -> None:
    lying.faults.advertise = 3 * SIZE
    r = cli("pull", LYING_REPO)
    one_line(r, f"the hub announced 3.0 MB for {LYING_FILE}, which its listing declared as 1.0 MB")
    assert partials() == [] and on_disk() < SIZE


def test_a_longer_body_on_resume_removes_the_partial_that_cannot_verify(
    lying: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    fresh_hf_constants()
    lying.faults.stall_after = SIZE // 2
    one_line(cli("pull", LYING_REPO), "the hub sent no byte")
    assert [p.stat().st_size for p in partials()] == [SIZE // 2]
    lying.faults.stall_after = None
    lying.faults.advertise = SIZE  # from the resume's offset: half a megabyte past the declared end
    one_line(cli("pull", LYING_REPO), "the hub announced 1.5 MB")
    assert partials() == []


def test_a_stall_ends_the_pull_and_keeps_the_bytes_for_a_resume(
    lying: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")  # huggingface_hub's own setting, read by it
    fresh_hf_constants()
    lying.faults.stall_after = 300_000
    t0 = time.monotonic()
    r = cli("pull", LYING_REPO)
    one_line(r, f"the hub sent no byte of {LYING_FILE} for 1 s, so the pull stopped")
    assert "run the pull again to resume it" in r.stderr
    assert time.monotonic() - t0 < 30  # one stall, not five retries of it
    [partial] = partials()
    assert partial.stat().st_size == 300_000

    lying.faults.stall_after = None
    before = len(lying.requests("GET", "/cdn/"))
    r = cli("pull", LYING_REPO)
    # The bytes are the declared ones (the file is no GGUF: registering it is refused after the download).
    assert [e.range_start for e in lying.requests("GET", "/cdn/")[before:]] == [300_000], r.stderr
    assert partials() == []
    assert any(p.stat().st_size == SIZE for p in (hf_repo_dir(LYING_REPO) / "blobs").iterdir())


@pytest.mark.parametrize("value", ["-5", "0"])
def test_a_download_timeout_of_none_or_less_is_the_default(
    lying: FakeHub, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    from llmcli.hub.remote import HubConfig

    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", value)
    fresh_hf_constants()
    assert HubConfig.from_hf_constants().stall_s == 10.0
