"""A safetensors repo: only what conversion needs is fetched (never a pickle), converted, registered, run."""

from __future__ import annotations

import json
from pathlib import Path

from tests.hub.conftest import ST_REPO
from tests.hub.fake_hub import FakeHub
from tests.support.cli import cli, cli_process, cli_store


def test_dry_run_lists_the_conversion_inputs_and_no_pickle(st_hub: FakeHub) -> None:
    r = cli("pull", ST_REPO, "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "it will be converted to GGUF q4_k_m (choose with --outtype)" in r.stderr
    head, *rows = r.stdout.splitlines()
    assert head.startswith(f"{ST_REPO} @ ") and "convert to q4_k_m" in head
    names = [row.split("  ")[-2] for row in rows]
    assert "model.safetensors" in names and "config.json" in names and "tokenizer.json" in names
    assert "pytorch_model.bin" not in names and "README.md" not in names
    assert not st_hub.requests("GET", "/resolve/")


def test_dry_run_json_names_the_outtype_and_the_conversion_inputs(st_hub: FakeHub) -> None:
    r = cli("pull", ST_REPO, "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    repo = st_hub.repos[ST_REPO.lower()]
    assert (plan["kind"], plan["outtype"], plan["quant"], plan["sha"]) == (
        "safetensors",
        "q4_k_m",
        "Q4_K_M",
        repo.sha,
    )
    assert plan["name"] == f"{ST_REPO}:Q4_K_M"
    assert any("it will be converted to GGUF q4_k_m" in note for note in plan["notes"])
    sizes = {f["name"]: f["size"] for f in plan["files"]}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= sizes.keys()
    assert "pytorch_model.bin" not in sizes and "README.md" not in sizes
    assert all(sizes[name] == repo.files[name].size for name in sizes)
    assert plan["total_bytes"] == sum(sizes.values()) == plan["bytes_to_fetch"]
    assert not st_hub.requests("GET", "/resolve/")


def test_safetensors_pull_converts_registers_and_chats(st_hub: FakeHub) -> None:
    r = cli("pull", ST_REPO, "--outtype", "q8_0")
    assert (r.exit_code, r.stdout) == (0, f"{ST_REPO}:Q8_0\n"), r.stderr
    fetched = {Path(e.path).name for e in st_hub.requests("GET", "/resolve/")}
    assert "pytorch_model.bin" not in fetched and "README.md" not in fetched
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= fetched
    entry = {m.name: m for m in cli_store().list()}[f"{ST_REPO}:Q8_0"]
    assert entry.source == f"hf:{ST_REPO}" and entry.quant == "Q8_0" and entry.arch == "llama"
    assert entry.revision == st_hub.repos[ST_REPO.lower()].sha and entry.hf_dir
    assert Path(entry.path).parent == cli_store().blobs_dir and Path(entry.path).stat().st_size == entry.size
    assert not list(cli_store().blobs_dir.glob("*.tmp*"))
    again = cli("pull", ST_REPO, "--outtype", "q8_0")
    assert again.exit_code == 0 and "up to date" in again.stderr
    chat = cli_process("chat", entry.name, "Say hello.", "--temp", "0", "-n", "8", "-t", "1", "--no-stats")
    assert chat.exit_code == 0, chat.stderr
    assert chat.stdout.strip()


def test_the_outtype_is_read_once_in_any_case_from_the_option_or_the_tag(st_hub: FakeHub) -> None:
    r = cli("pull", ST_REPO, "--outtype", "Q8_0", "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "convert to q8_0" in r.stdout and "choose with --outtype" not in r.stderr
    r = cli("pull", f"{ST_REPO}:Q5_K_M", "--dry-run")
    assert r.exit_code == 0 and "convert to q5_k_m" in r.stdout, r.stderr
    r = cli("pull", f"{ST_REPO}:q8_0", "--outtype", "f16", "--dry-run")
    assert (
        r.exit_code == 2
        and r.stderr
        == f"llmcli: error: {ST_REPO}:q8_0 asks for q8_0 but --outtype says f16; give one of them\n"
    )


def test_an_unknown_outtype_is_the_converters_usage_error_before_any_request(st_hub: FakeHub) -> None:
    r = cli("pull", ST_REPO, "--outtype", "q3_xs")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        "llmcli: error: unknown outtype 'q3_xs'; choose one of "
        "f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k\n"
    )
    assert not st_hub.log
    r = cli("pull", f"{ST_REPO}:Q3_XS", "--dry-run")  # a tag the converter cannot write
    assert r.exit_code == 2 and "unknown outtype 'Q3_XS'" in r.stderr
