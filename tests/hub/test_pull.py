"""`llmcli pull` against the loopback hub: choice, split files, cache layout, no-ops, faults and errors."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tests.hub.conftest import (
    GATED_REPO,
    GGUF_REPO,
    GRANTED_TOKEN,
    HUGE_REPO,
    NO_DEFAULT_REPO,
    STEM,
    hf_repo_dir,
)
from tests.hub.fake_hub import FakeHub
from tests.support.cli import cli, cli_store


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def error_line(r) -> str:
    """The last line of stderr: progress lines may come before it, the error is always the one last line."""
    return r.stderr.splitlines()[-1] if r.stderr else ""


def entries() -> dict:
    return {m.name: m for m in cli_store().list() if not m.builtin}


def test_pull_picks_q4_k_m_by_default_and_prints_only_the_name(hub: FakeHub) -> None:
    r = cli("pull", GGUF_REPO)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == f"{GGUF_REPO}:Q4_K_M\n"
    assert "picked Q4_K_M, the default" in r.stderr and "Q8_0" in r.stderr
    entry = entries()[f"{GGUF_REPO}:Q4_K_M"]
    repo = hub.repos[GGUF_REPO.lower()]
    remote = repo.files[f"{STEM}-Q4_K_M.gguf"]
    assert (entry.source, entry.revision, entry.quant, entry.arch) == (
        f"hf:{GGUF_REPO}",
        repo.sha,
        "Q4_K_M",
        "llama",
    )
    assert entry.size == remote.size and entry.created and entry.n_params and entry.n_params > 100_000_000
    # Laid out as huggingface_hub lays out its cache, so other HF tools share the file.
    cache = hf_repo_dir(GGUF_REPO)
    pointer = cache / "snapshots" / repo.sha / remote.name
    assert entry.files == [str(pointer)] and entry.path == str(pointer)
    assert pointer.is_symlink() and pointer.resolve() == (cache / "blobs" / remote.sha256)
    assert sha256(pointer) == remote.sha256
    assert (cache / "refs" / "main").read_text() == repo.sha
    assert not list(cache.glob("blobs/*.incomplete"))


def test_quant_tag_is_case_insensitive_and_the_hf_cache_is_readable_by_huggingface_hub(hub: FakeHub) -> None:
    r = cli("pull", f"{GGUF_REPO}:q8_0")
    assert (r.exit_code, r.stdout) == (0, f"{GGUF_REPO}:Q8_0\n"), r.stderr
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(GGUF_REPO, f"{STEM}-Q8_0.gguf", cache_dir=os.environ["HF_HOME"] + "/hub")
    assert found == entries()[f"{GGUF_REPO}:Q8_0"].path


def test_every_part_of_a_split_gguf_is_fetched(hub: FakeHub) -> None:
    r = cli("pull", f"{GGUF_REPO}:Q4_0")
    assert r.exit_code == 0, r.stderr
    entry = entries()[f"{GGUF_REPO}:Q4_0"]
    names = [Path(f).name for f in entry.files]
    assert names == [f"{STEM}-Q4_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert entry.path == entry.files[0]
    assert entry.size == sum(Path(f).stat().st_size for f in entry.files)
    assert len(hub.requests("GET", "/cdn/")) == 3


def test_a_missing_quant_lists_the_quants_the_repo_has(hub: FakeHub) -> None:
    r = cli("pull", f"{GGUF_REPO}:Q2_K")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "llmcli: error: no Q2_K GGUF in this repo; it has: Q4_K_M, Q4_0, Q8_0\n"


def test_without_q4_k_m_the_closest_quant_is_picked_and_said(hub: FakeHub) -> None:
    r = cli("pull", NO_DEFAULT_REPO)
    assert (r.exit_code, r.stdout) == (0, f"{NO_DEFAULT_REPO}:Q4_0\n"), r.stderr
    assert "no Q4_K_M here; picked Q4_0" in r.stderr


def test_pulling_again_is_a_quick_no_op(hub: FakeHub) -> None:
    assert cli("pull", GGUF_REPO).exit_code == 0
    fetched = len(hub.requests("GET", "/cdn/"))
    again = cli("pull", GGUF_REPO)
    assert (again.exit_code, again.stdout) == (0, f"{GGUF_REPO}:Q4_K_M\n")
    assert "up to date" in again.stderr
    assert len(hub.requests("GET", "/cdn/")) == fetched
    assert not hub.requests("HEAD")


def test_files_already_in_the_hf_cache_are_registered_without_downloading(
    hub: FakeHub, tmp_path: Path
) -> None:
    assert cli("pull", GGUF_REPO).exit_code == 0
    os.environ["LLMCLI_HOME"] = str(tmp_path / "another-store")  # the hub fixture restores it
    fetched = len(hub.requests("GET", "/cdn/"))
    r = cli("pull", GGUF_REPO)
    assert r.exit_code == 0 and "already in the cache" in r.stderr
    assert len(hub.requests("GET", "/cdn/")) == fetched and f"{GGUF_REPO}:Q4_K_M" in entries()


def test_dry_run_lists_files_and_sizes_and_touches_nothing(hub: FakeHub) -> None:
    r = cli("pull", f"{GGUF_REPO}:Q4_0", "--dry-run")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{GGUF_REPO} @ {hub.repos[GGUF_REPO.lower()].sha[:12]} (main): Q4_0, 3 files")
    assert [line.split("  ")[-2] for line in lines[1:]] == [
        f"{STEM}-Q4_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)
    ]
    assert all(line.endswith("(to fetch)") and "MB" in line for line in lines[1:])
    assert not hub.requests("GET", "/cdn/") and not entries()


def test_named_pull_and_pinned_revision(hub: FakeHub) -> None:
    sha = hub.repos[GGUF_REPO.lower()].sha
    r = cli("pull", f"{GGUF_REPO}:Q8_0", "--revision", sha, "--name", "tiny")
    assert (r.exit_code, r.stdout) == (0, "tiny\n"), r.stderr
    assert entries()["tiny"].revision == sha


def test_a_dropped_connection_resumes_within_the_run(hub: FakeHub) -> None:
    # Every byte that arrived is on disk: after a drop at 25 MB the retry asks for the rest from
    # there, and the second drop comes 25 MB into that retry.
    hub.faults.drop_after, hub.faults.drop_times = 25_000_000, 2
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code == 0, r.stderr
    starts = [e.range_start for e in hub.requests("GET", "/cdn/")]
    assert starts == [None, 25_000_000, 50_000_000]
    retries = [line for line in r.stderr.splitlines() if "the connection dropped at" in line]
    assert len(retries) == 2 and all(line.endswith("; resuming") for line in retries), r.stderr
    remote = hub.repos[GGUF_REPO.lower()].files[f"{STEM}-Q8_0.gguf"]
    assert sha256(Path(entries()[f"{GGUF_REPO}:Q8_0"].path)) == remote.sha256


def test_corrupt_bytes_are_caught_by_sha256_and_nothing_is_registered(hub: FakeHub) -> None:
    hub.faults.corrupt_at = 1_234_567
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code == 1 and r.stdout == ""
    assert error_line(r).startswith(f"llmcli: error: {STEM}-Q8_0.gguf is corrupt: its sha256 is ")
    assert "the bad copy was removed, run the pull again" in r.stderr and "Traceback" not in r.stderr
    assert not entries()
    blobs = hf_repo_dir(GGUF_REPO) / "blobs"
    assert not [p for p in blobs.iterdir() if p.stat().st_size > 1000]
    hub.faults.corrupt_at = None
    assert cli("pull", f"{GGUF_REPO}:Q8_0").exit_code == 0


def test_a_missing_repo_is_one_line_and_exit_2(hub: FakeHub) -> None:
    r = cli("pull", "nobody/no-such-model-GGUF")
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == (
        f"llmcli: error: no model repo nobody/no-such-model-GGUF on {hub.url}; check the name "
        "(if it is private, set HF_TOKEN to a read token from https://huggingface.co/settings/tokens)\n"
    )


def test_a_gated_repo_says_how_to_get_access(hub: FakeHub, monkeypatch) -> None:
    r = cli("pull", GATED_REPO)
    assert (r.exit_code, r.stdout) == (1, "")
    assert error_line(r) == (
        f"llmcli: error: {GATED_REPO} is gated: accept its terms at {hub.url}/{GATED_REPO} "
        "while logged in, then set HF_TOKEN to a read token from https://huggingface.co/settings/tokens"
    )
    monkeypatch.setenv("HF_TOKEN", "hf_not_granted")
    r = cli("pull", GATED_REPO)
    assert r.exit_code == 1 and "the token in HF_TOKEN has no access yet" in r.stderr
    assert not entries()
    monkeypatch.setenv("HF_TOKEN", GRANTED_TOKEN)
    r = cli("pull", GATED_REPO)
    assert (r.exit_code, r.stdout) == (0, f"{GATED_REPO}:Q4_K_M\n"), r.stderr
    assert hub.requests("GET", "/resolve/")[-1].authorization == f"Bearer {GRANTED_TOKEN}"


def test_a_401_or_404_from_the_hub_is_an_error_not_a_traceback(hub: FakeHub) -> None:
    hub.faults.status = {"/resolve/": 404}
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code != 0 and error_line(r).startswith("llmcli: error: ") and "Traceback" not in r.stderr
    assert not entries()
    hub.faults.status = {"/api/": 401}
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code == 2 and "no model repo" in r.stderr


def test_a_missing_revision_is_a_usage_error(hub: FakeHub) -> None:
    r = cli("pull", GGUF_REPO, "--revision", "v9-does-not-exist")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"llmcli: error: {GGUF_REPO} has no revision 'v9-does-not-exist'")


def test_too_little_disk_is_refused_before_any_download(hub: FakeHub) -> None:
    r = cli("pull", HUGE_REPO)
    assert r.exit_code == 1
    assert error_line(r).startswith("llmcli: error: this pull needs 1000000.0 GB free under ")
    assert "point HF_HOME" in r.stderr
    assert not hub.requests("GET", "/cdn/") and not hub.requests("GET", "/resolve/")


def test_an_unreachable_hub_falls_back_to_the_cache(hub: FakeHub, monkeypatch) -> None:
    assert cli("pull", GGUF_REPO).exit_code == 0
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens
    r = cli("pull", GGUF_REPO, "--name", "from-cache")
    assert (r.exit_code, r.stdout) == (0, "from-cache\n"), r.stderr
    assert "cannot reach http://127.0.0.1:9 (ConnectError); using the cached" in r.stderr
    r = cli("pull", NO_DEFAULT_REPO)
    assert (
        r.exit_code == 1
        and "cannot reach http://127.0.0.1:9" in r.stderr
        and "not in the local cache" in r.stderr
    )


def test_a_hub_answering_5xx_falls_back_to_the_cache(hub: FakeHub) -> None:
    assert cli("pull", GGUF_REPO).exit_code == 0
    hub.faults.status = {"/api/": 503}
    r = cli("pull", GGUF_REPO, "--name", "while-down")
    assert (r.exit_code, r.stdout) == (0, "while-down\n"), r.stderr
    assert f"{hub.url} answered 503 for {GGUF_REPO}; try again later; using the cached" in r.stderr


def test_find_or_pull_pulls_once_then_uses_the_store(hub: FakeHub) -> None:
    from contextlib import nullcontext

    from llmcli.hub.events import FileDone
    from llmcli.model_ref import model_ref
    from llmcli.usecases.pull import find_or_pull

    seen: list = []
    opened: list = []

    def pulling():
        opened.append(1)
        return nullcontext(seen.append)

    def chat_model(text: str):
        return find_or_pull(model_ref(text), cli_store(), pulling=pulling)

    entry = chat_model(f"{GGUF_REPO}:Q8_0")
    assert entry.name == f"{GGUF_REPO}:Q8_0" and any(isinstance(e, FileDone) for e in seen)
    requests = len(hub.log)
    assert chat_model(f"{GGUF_REPO}:Q8_0").path == entry.path
    assert chat_model(GGUF_REPO).name == entry.name  # a unique prefix of a pulled name
    assert len(hub.log) == requests  # the store answered: no network
    assert len(opened) == 1  # and no progress display was opened for it


def test_list_shows_the_pulled_model(hub: FakeHub) -> None:
    import json

    assert cli("pull", f"{GGUF_REPO}:Q8_0").exit_code == 0
    r = cli("list", "--json")
    assert r.exit_code == 0, r.stderr
    row = next(m for m in json.loads(r.stdout) if m["name"] == f"{GGUF_REPO}:Q8_0")
    assert row["source"] == f"hf:{GGUF_REPO}" and row["quant"] == "Q8_0" and row["created"]
    assert row["revision"] == hub.repos[GGUF_REPO.lower()].sha


def test_pull_json_is_one_record_with_the_hubs_sha256_and_rm_json_names_the_same_file(hub: FakeHub) -> None:
    import json

    spec, remote = f"{GGUF_REPO}:Q8_0", hub.repos[GGUF_REPO.lower()].files[f"{STEM}-Q8_0.gguf"]
    r = cli("pull", spec, "--json")
    assert r.exit_code == 0, r.stderr
    entry = entries()[spec]
    expected = {
        "name": spec,
        "path": entry.path,
        "size": remote.size,
        "sha256": remote.sha256,
        "quant": "Q8_0",
        "source": f"hf:{GGUF_REPO}",
    }
    assert json.loads(r.stdout) == expected
    assert sha256(Path(entry.path)) == remote.sha256
    again = cli("pull", spec, "--json")  # up to date: the same record, no download
    assert (again.exit_code, json.loads(again.stdout)) == (0, expected), again.stderr
    gone = cli("rm", spec, "--json")
    assert gone.exit_code == 0, gone.stderr
    assert json.loads(gone.stdout) == expected and spec not in entries()


def test_dry_run_json_is_the_plan_and_fetches_nothing(hub: FakeHub) -> None:
    repo = hub.repos[GGUF_REPO.lower()]
    parts = [repo.files[f"{STEM}-Q4_0-0000{i}-of-00003.gguf"] for i in (1, 2, 3)]
    r = cli("pull", f"{GGUF_REPO}:Q4_0", "--dry-run", "--json", "--name", "tiny")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    files = [
        {"name": f.name, "size": f.size, "sha256": f.sha256, "have": 0, "state": "to_fetch"} for f in parts
    ]
    total = sum(f.size for f in parts)
    assert plan == {
        "repo": GGUF_REPO,
        "revision": "main",
        "sha": repo.sha,
        "kind": "gguf",
        "quant": "Q4_0",
        "outtype": None,
        "name": "tiny",
        "from_cache": False,
        "total_bytes": total,
        "bytes_to_fetch": total,
        "files": files,
        "notes": [],
    }
    assert not hub.requests("GET", "/cdn/") and not entries()
    # Once pulled, the same plan finds every byte in the cache.
    assert cli("pull", f"{GGUF_REPO}:Q4_0").exit_code == 0
    again = json.loads(cli("pull", f"{GGUF_REPO}:Q4_0", "--dry-run", "--json").stdout)
    assert again["name"] == f"{GGUF_REPO}:Q4_0" and again["bytes_to_fetch"] == 0
    assert [(f["state"], f["have"]) for f in again["files"]] == [("cached", f.size) for f in parts]
