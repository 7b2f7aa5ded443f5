"""A malicious hub on loopback: names, shas and object ids that are paths out of the cache are refused,
nothing is written outside HF_HOME and the store, and each failure is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.hub.conftest import GGUF_REPO, STEM, hf_repo_dir
from tests.hub.fake_hub import FakeHub, hostile
from tests.support.cli import cli, cli_store

Q4 = f"{STEM}-Q4_K_M.gguf"
README = "README.md"


def everything_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*")}


def assert_confined(tmp_path: Path) -> None:
    """Only HF_HOME and the store were written to; nothing was registered."""
    stray = {p for p in everything_under(tmp_path) if p.parts[0] not in ("hf", "store")}
    assert stray == set(), stray
    assert [m for m in cli_store().list() if not m.builtin] == []


def refused(r, says: str) -> None:
    assert r.exit_code == 1 and r.stdout == "", r.stderr
    last = r.stderr.splitlines()[-1]
    assert last.startswith("llmcli: error: ") and says in last and "internal error" not in r.stderr, r.stderr
    assert "is HF_ENDPOINT a Hugging Face hub you trust?" in last


def test_an_absolute_file_name_is_refused(hub: FakeHub, tmp_path: Path) -> None:
    target = tmp_path / "outside" / Q4
    hub.add(hostile(hub.repos[GGUF_REPO.lower()], names={Q4: str(target)}))
    r = cli("pull", GGUF_REPO)
    refused(r, f"sent a file name for {GGUF_REPO} that is not in the hub's format ({target})")
    assert not target.exists() and not target.is_symlink()
    assert_confined(tmp_path)


@pytest.mark.parametrize(
    "name",
    [
        f"../../../../escaped-{Q4}",
        f"sub/../../{Q4}",
        f"a\\..\\{Q4}",
        f"x\x00{Q4}",
        f"line\n{Q4}",
        f"{'d' * 300}/{Q4}",
        f"./{Q4}",
    ],
)
def test_file_names_that_are_not_plain_relative_paths_are_refused(
    hub: FakeHub, tmp_path: Path, name: str
) -> None:
    hub.add(hostile(hub.repos[GGUF_REPO.lower()], names={Q4: name}))
    r = cli("pull", f"{GGUF_REPO}:Q4_K_M")
    refused(r, "sent a file name")
    assert r.stderr.count("\n") == 1 and "\x00" not in r.stderr
    assert_confined(tmp_path)


@pytest.mark.parametrize("sha", ["../../../../x", "/tmp/x", "ABCDEF" + "0" * 34, "0" * 39, "0" * 40 + "\n"])
def test_a_commit_sha_that_is_not_40_hex_is_refused_before_any_path(
    hub: FakeHub, tmp_path: Path, sha: str
) -> None:
    hub.add(hostile(hub.repos[GGUF_REPO.lower()], sha=sha))
    r = cli("pull", GGUF_REPO)
    refused(r, f"sent a commit sha for {GGUF_REPO} that is not in the hub's format")
    assert not (hf_repo_dir(GGUF_REPO) / "refs").exists()
    assert not hub.requests(contains="/tree/") and not hub.requests(contains="/resolve/")
    assert_confined(tmp_path)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sha256s", "../../../../../escaped"),
        ("sha256s", "f" * 63),
        ("oids", "../../x"),
        ("oids", "0" * 40 + "/x"),
    ],
)
def test_object_ids_that_are_not_hex_of_the_right_length_are_refused(
    hub: FakeHub, tmp_path: Path, field: str, value: str
) -> None:
    name = Q4 if field == "sha256s" else README
    hub.add(hostile(hub.repos[GGUF_REPO.lower()], **{field: {name: value}}))
    r = cli("pull", GGUF_REPO)
    what = "sha256" if field == "sha256s" else "git id"
    refused(r, f"sent a {what} of {name} for {GGUF_REPO} that is not in the hub's format")
    assert not list(tmp_path.rglob("*.lock")) and not list(tmp_path.rglob("*.incomplete"))
    assert_confined(tmp_path)


def test_a_symlinked_folder_in_the_cache_is_not_followed_out(hub: FakeHub, tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    storage = hf_repo_dir(GGUF_REPO)
    storage.mkdir(parents=True)
    (storage / "blobs").symlink_to(outside)
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code == 1 and "outside" in r.stderr.splitlines()[-1] and "remove that symlink" in r.stderr
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("rev", ["../../../../x", "/etc", "a/../../b", "-rf"])
def test_a_revision_that_is_a_path_is_refused_with_exit_2(hub: FakeHub, tmp_path: Path, rev: str) -> None:
    r = cli("pull", GGUF_REPO, "--revision", rev)
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "is not a branch, tag or commit sha; give one that exists" in r.stderr
    assert hub.requests() == []
    assert_confined(tmp_path)


@pytest.mark.parametrize("where", ["/api/models/", "/cdn/"])
def test_a_redirect_loop_is_one_clear_line(hub: FakeHub, tmp_path: Path, where: str) -> None:
    hub.faults.redirect_loop = where
    r = cli("pull", f"{GGUF_REPO}:Q8_0")
    assert r.exit_code == 1, r.stderr
    last = r.stderr.splitlines()[-1]
    assert "in a loop; check HF_ENDPOINT" in last and "internal error" not in r.stderr, r.stderr
    assert_confined(tmp_path)
    assert os.environ["HF_HOME"].startswith(str(tmp_path))


@pytest.mark.parametrize("size", ["big", -1, None, 1.5, [1]])
def test_a_size_that_is_not_a_byte_count_is_refused(hub: FakeHub, tmp_path: Path, size: object) -> None:
    hub.add(hostile(hub.repos[GGUF_REPO.lower()], sizes={README: size}))
    r = cli("pull", GGUF_REPO)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and "internal error" not in r.stderr, r.stderr
    assert f"for {GGUF_REPO}" in r.stderr and "is HF_ENDPOINT a Hugging Face hub" in r.stderr
    assert_confined(tmp_path)
