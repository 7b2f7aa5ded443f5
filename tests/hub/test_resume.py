"""Pulls in a child process: killed or interrupted midway, then resumed; offline runs from the cache."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import time
from pathlib import Path

from tests.hub.conftest import GGUF_REPO, NO_DEFAULT_REPO, STEM, hf_repo_dir
from tests.hub.fake_hub import FakeHub
from tests.support.cli import cli, cli_process, cli_store, spawn_cli

SPEC = f"{GGUF_REPO}:Q8_0"
FILE = f"{STEM}-Q8_0.gguf"


def wait_for_partial(repo_id: str, proc: subprocess.Popen, timeout: float = 60) -> Path:
    """The `.incomplete` blob, once it holds some bytes (huggingface_hub writes 10 MiB at a time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [p for p in (hf_repo_dir(repo_id) / "blobs").glob("*.incomplete") if p.stat().st_size > 0]
        if found:
            return found[0]
        assert proc.poll() is None, f"the pull ended early: {proc.communicate()}"
        time.sleep(0.05)
    raise AssertionError("no partial download appeared")


def pulled_entries() -> dict:
    return {m.name: m for m in cli_store().list() if not m.builtin}


def assert_resumed_from(hub: FakeHub, before: int, on_disk: int) -> None:
    gets = hub.requests("GET", "/cdn/")[before:]
    assert gets and gets[0].range_start == on_disk, [g.range_start for g in gets]
    remote = hub.repos[GGUF_REPO.lower()].files[FILE]
    path = Path(pulled_entries()[SPEC].path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == remote.sha256


def test_a_killed_pull_resumes_from_the_bytes_on_disk(hub: FakeHub) -> None:
    hub.faults.throttle_bps = 8_000_000  # slow enough to be killed midway, fast enough to write a chunk
    proc = spawn_cli("pull", SPEC)
    partial = wait_for_partial(GGUF_REPO, proc)
    proc.kill()
    proc.result(timeout=30)
    on_disk = partial.stat().st_size
    remote_size = hub.repos[GGUF_REPO.lower()].files[FILE].size
    assert 0 < on_disk < remote_size
    assert SPEC not in pulled_entries()  # no half-registered model

    hub.faults.throttle_bps = None
    before = len(hub.requests("GET", "/cdn/"))
    r = cli("pull", SPEC)
    assert (r.exit_code, r.stdout) == (0, f"{SPEC}\n"), r.stderr
    assert f"resuming {FILE} at " in r.stderr
    assert_resumed_from(hub, before, on_disk)
    assert not partial.exists()


def test_ctrl_c_exits_130_and_the_pull_resumes(hub: FakeHub) -> None:
    hub.faults.throttle_bps = 8_000_000
    proc = spawn_cli("pull", SPEC)
    partial = wait_for_partial(GGUF_REPO, proc)
    proc.send_signal(signal.SIGINT)
    r = proc.result(timeout=30)
    assert r.exit_code == 130, r.stderr
    assert r.stdout == "" and "Traceback" not in r.stderr
    assert (
        r.stderr.splitlines()[-1]
        == "llmcli: pull interrupted; run the same command again to resume where it stopped"
    )
    on_disk = partial.stat().st_size
    assert on_disk > 0 and SPEC not in pulled_entries()

    hub.faults.throttle_bps = None
    before = len(hub.requests("GET", "/cdn/"))
    r = cli("pull", SPEC)
    assert r.exit_code == 0, r.stderr
    assert_resumed_from(hub, before, on_disk)


def test_offline_reuses_the_cache_and_says_what_is_missing(hub: FakeHub) -> None:
    assert cli("pull", GGUF_REPO).exit_code == 0
    seen = len(hub.log)
    offline = {"HF_HUB_OFFLINE": "1"}

    r = cli_process("pull", GGUF_REPO, "--name", "offline-copy", vars=offline, timeout=60)
    assert (r.exit_code, r.stdout) == (0, "offline-copy\n"), r.stderr
    assert "offline: using the cached" in r.stderr
    assert Path(pulled_entries()["offline-copy"].path).is_file()

    r = cli_process("pull", f"{GGUF_REPO}:Q8_0", vars=offline, timeout=60)
    assert r.exit_code == 1 and r.stdout == ""
    assert r.stderr.splitlines()[-1] == (
        f"llmcli: error: {GGUF_REPO}:Q8_0 is not in the local cache (it has: Q4_K_M); "
        "connect and unset HF_HUB_OFFLINE to download it"
    )

    r = cli_process("pull", NO_DEFAULT_REPO, vars=offline, timeout=60)
    assert r.exit_code == 1
    assert r.stderr.splitlines()[-1].startswith(
        f"llmcli: error: HF_HUB_OFFLINE is set and {NO_DEFAULT_REPO}@main is not in the Hugging Face cache"
    )
    assert len(hub.log) == seen  # offline means not one request
