"""`llmcli chat` and `llmcli cache` on a prefix cache made to fool or break them, on the embedded model.

Every case ends as `--no-cache` would: the same reply, exit 0, and one line saying what was wrong;
`llmcli cache` on a folder it cannot use is one line and exit 1; nothing is deleted that is not ours.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import struct
import subprocess

import pytest

from llmcli.engine.local.cache_entry import encode_entry, parse_entry
from llmcli.engine.local.model_identity import MEMO_FILE
from tests.cli.test_prefix_cache_cli import ARGS, DOC, SEEDED, ask, entries, seed, seeded_cache
from tests.engine.local.test_prefix_cache_hostile import huge_entry, middle_changed
from tests.support.cli import LLMCLI, cli, cli_store, environment_vars

QUESTION = SEEDED  # the question of the entry `seeded` holds
PLAIN = ("chat", "-t", "1", "--temp", "0", "-n", "12")


@functools.cache  # temperature 0 without the cache: the same reply in every test's store
def plain_reply(question: str = QUESTION) -> str:
    r = cli(*PLAIN, "--no-cache", "--no-log", question, input=DOC)
    assert r.exit_code == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    return seeded_cache(tmp_path_factory)


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_a_model_changed_in_its_middle_does_not_reuse_the_originals_entry(tmp_path, embedded_path, seeded):
    seed(seeded)
    patched = middle_changed(embedded_path, tmp_path / "patched.gguf")
    r = cli(*ARGS, str(patched), "How many pears on day 3?", input=DOC)
    assert r.exit_code == 0, r.stderr
    usage = json.loads(r.stdout)["usage"]
    assert usage["cached_tokens"] == 0 and usage["cache_source"] is None
    listed = json.loads(cli("cache", "--json").stdout)
    assert sorted(e["model"] for e in listed) == ["patched.gguf", "smollm2-135m-instruct"]


def test_a_spliced_entry_is_refused_with_one_note_and_the_uncached_reply(seeded):
    seed(seeded)
    (mine,) = entries()
    other_doc = DOC.replace("orchard", "farm")
    ask("Summarize.", doc=other_doc)
    (theirs,) = [e for e in entries() if e != mine]
    data = mine.read_bytes()
    header = data[16 : 16 + struct.unpack_from("<I", data, 12)[0]]
    _, their_state = parse_entry(bytearray(theirs.read_bytes()))
    mine.write_bytes(b"".join(bytes(p) for p in encode_entry(header, their_state)))
    r = cli(*PLAIN, "--stats", "List the days.", input=DOC)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == plain_reply("List the days.")
    said = " ".join(r.stderr.replace("│", " ").split())  # the stats panel wraps its lines
    assert said.count("cache:") == 1 and "is not the state of its tokens" in said, r.stderr


def test_an_entry_declaring_a_huge_state_is_refused_before_it_is_read(seeded):
    big = {"LLMCLI_CACHE_MAX": "100T"}  # the cap does not evict it first
    seed(seeded)
    (entry,) = entries()
    huge_entry(entry, 2**40)
    r = cli(*PLAIN, "--stats", "List the days.", input=DOC, vars=big)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == plain_reply("List the days.")
    notes = [line for line in r.stderr.splitlines() if "cache:" in line]
    assert len(notes) == 1 and "more than this context can hold" in r.stderr.replace("\n", " "), r.stderr


def _cache_as(kind: str, tmp_path) -> tuple[str, str]:
    """Make the store's cache folder unusable in one way; what the messages say of it."""
    cache_dir = cli_store().cache_dir
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    if kind == "file":
        cache_dir.write_text("not a folder")
        return "is not a folder; move that file away", "is not a folder; move that file away"
    if kind == "loop":
        cache_dir.symlink_to(cache_dir)
        return "cannot be resolved", "cannot be resolved"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    cache_dir.symlink_to(outside)
    return "outside the store", "outside the store"


@pytest.mark.parametrize("kind", ["file", "loop", "link-out"])
def test_an_unusable_cache_folder_answers_as_no_cache_with_one_warning(kind, tmp_path):
    chat_says, cache_says = _cache_as(kind, tmp_path)
    r = cli(*PLAIN, QUESTION, input=DOC)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == plain_reply()
    line = one_line(r.stderr)
    assert chat_says in line and line.endswith("; answered without the cache"), line
    for action in ("list", "clear"):
        listed = cli("cache", action)
        assert listed.exit_code == 1 and listed.stdout == ""
        assert cache_says in one_line(listed.stderr), listed.stderr
    if kind == "link-out":
        assert list((tmp_path / "elsewhere").iterdir()) == []  # nothing written out of the store


def test_cache_clear_through_a_link_out_of_the_store_deletes_nothing(tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    mine = {"report.kv": b"mine", ".tmp-draft": b"a draft", ".tmp-abcdefgh.kv": b"another"}
    for name, content in mine.items():
        (outside / name).write_bytes(content)
        os.utime(outside / name, (1, 1))  # older than an hour, as a dead writer's would be
    cache_dir = cli_store().cache_dir
    cache_dir.parent.mkdir(parents=True)
    cache_dir.symlink_to(outside)
    r = cli("cache", "clear")
    assert r.exit_code == 1 and "outside the store" in one_line(r.stderr)
    assert cli(*PLAIN, QUESTION, input=DOC).exit_code == 0  # the sweep at a chat's start
    assert {name: (outside / name).read_bytes() for name in mine} == mine


def test_cache_clear_through_a_link_inside_the_store_deletes_only_its_own_files():
    store = cli_store()
    real = store.root / "kv-elsewhere"
    real.mkdir(parents=True)
    store.cache_dir.symlink_to(real)
    ask(QUESTION)
    (entry,) = entries()
    key_id = entry.name.split("-")[0]
    theirs = {
        "report.kv": b"not an entry",
        f"{key_id}-{'0' * 24}.kv": b"named like an entry, but not one",
        ".tmp-draft": b"a draft",
        ".tmp-abcdefgh.kv": b"named like our temporary file, but not one",
    }
    for name, content in theirs.items():
        (real / name).write_bytes(content)
        os.utime(real / name, (1, 1))
    assert cli(*PLAIN, "Summarize.", input=DOC).exit_code == 0  # the sweep at a chat's start
    r = cli("cache", "clear", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["removed_entries"] >= 1, r.stderr
    assert {name: (real / name).read_bytes() for name in theirs} == theirs
    assert not [p for p in real.iterdir() if p.name not in theirs and p.name != MEMO_FILE]


def _without_root_powers() -> None:
    """As root, give up the capabilities that read any folder (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)
    for this child, so a folder's mode bits stop it as they stop a user."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (1, 2):
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_unprivileged(*args: str, input: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LLMCLI, *args],
        input=input,
        capture_output=True,
        text=True,
        env=environment_vars(),
        timeout=600,
        preexec_fn=_without_root_powers,
    )


def test_an_unreadable_cache_folder_answers_as_no_cache_with_one_warning(seeded):
    seed(seeded)
    cache_dir = cli_store().cache_dir
    cache_dir.chmod(0)
    try:
        r = run_unprivileged(*PLAIN, "List the days.", input=DOC)
        listed = run_unprivileged("cache")
    finally:
        cache_dir.chmod(0o755)
    assert r.returncode == 0, r.stderr
    assert r.stdout == plain_reply("List the days.")
    line = one_line(r.stderr)
    assert "is unreadable (Permission denied); fix its permissions" in line
    assert line.endswith("answered without the cache")
    assert listed.returncode == 1 and "is unreadable (Permission denied)" in one_line(listed.stderr)
    assert len(entries()) == 1  # left as it was
