"""A safetensors repo: only what conversion needs is fetched (never a pickle), converted, registered, run."""

from __future__ import annotations

from pathlib import Path

from llmcli.store import Store
from tests.conftest import run_cli
from tests.hub.conftest import ST_REPO, run_llmcli
from tests.hub.fake_hub import FakeHub


def test_dry_run_lists_the_conversion_inputs_and_no_pickle(st_hub: FakeHub) -> None:
    r = run_llmcli("pull", ST_REPO, "--dry-run")
    assert r.code == 0, r.stderr
    assert "it will be converted to GGUF q4_k_m (choose with --outtype)" in r.stderr
    head, *rows = r.stdout.splitlines()
    assert head.startswith(f"{ST_REPO} @ ") and "convert to q4_k_m" in head
    names = [row.split("  ")[-2] for row in rows]
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert "pytorch_model.bin" not in names and "README.md" not in names
    assert not st_hub.requests("GET", "/resolve/")


def test_safetensors_pull_converts_registers_and_chats(st_hub: FakeHub) -> None:
    r = run_llmcli("pull", ST_REPO, "--outtype", "q8_0")
    assert (r.code, r.stdout) == (0, f"{ST_REPO}:Q8_0\n"), r.stderr
    fetched = {Path(e.path).name for e in st_hub.requests("GET", "/resolve/")}
    assert "pytorch_model.bin" not in fetched and "README.md" not in fetched
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= fetched
    entry = {m.name: m for m in Store().list()}[f"{ST_REPO}:Q8_0"]
    assert entry.source == f"hf:{ST_REPO}" and entry.quant == "Q8_0" and entry.arch == "llama"
    assert entry.revision == st_hub.repos[ST_REPO.lower()].sha and entry.hf_dir
    assert Path(entry.path).parent == Store().blobs_dir and Path(entry.path).stat().st_size == entry.size
    assert not list(Store().blobs_dir.glob("*.tmp*"))
    again = run_llmcli("pull", ST_REPO, "--outtype", "q8_0")
    assert again.code == 0 and "up to date" in again.stderr
    chat = run_cli("chat", entry.name, "Say hello.", "--temp", "0", "-n", "8", "--no-stats")
    assert chat.returncode == 0, chat.stderr
    assert chat.stdout.strip()
