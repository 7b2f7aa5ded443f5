"""The disk prefix cache through `llmcli chat` and `llmcli cache`, on the embedded model.

Each test has its own store (tests/conftest.py), hence its own cache under it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmcli.engine.local.cache_entry import MAGIC, TEMP_PREFIX, parse_entry
from llmcli.engine.local.model_identity import MEMO_FILE
from tests.support.cli import cli, cli_process, cli_store, spawn_cli

DOC = (
    "\n".join(
        f"Row {i}: the orchard shipped {i * 11} crates of apples and {i % 4} of pears on day {i}."
        for i in range(6)
    )
    + "\n"
)
# One thread: two test workers share two cores, and llama.cpp's threads spin waiting for each other.
CHAT = ("chat", "-t", "1", "--temp", "0", "-n", "12")
ARGS = (*CHAT, "--json")


def ask(question: str, *extra: str, doc: str = DOC, vars: dict | None = None) -> dict:
    result = cli(*ARGS, *extra, question, input=doc, vars=vars)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def entries() -> list[Path]:
    return sorted(cli_store().cache_dir.glob("*.kv"))


SEEDED = "Which day shipped the most apples?"


def seeded_cache(tmp_path_factory) -> Path:
    """The cache folder after `ask(SEEDED)` in a store of its own. A test that only needs an entry on
    disk copies it (times too: it is the oldest entry) instead of prefilling the document again."""
    from llmcli.store import Store

    home = tmp_path_factory.mktemp("seeded") / "llmcli-home"
    ask(SEEDED, vars={"LLMCLI_HOME": str(home)})
    return Store(home).cache_dir


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    return seeded_cache(tmp_path_factory)


def seed(cache_dir: Path) -> None:
    """This test's cache holds the seeded entry, as if it had asked SEEDED itself."""
    shutil.copytree(cache_dir, cli_store().cache_dir, dirs_exist_ok=True)


def test_a_second_question_on_a_piped_document_is_answered_from_disk_as_without_the_cache():
    first = ask("Which day shipped the most apples?")
    assert first["usage"]["cache_source"] is None and len(entries()) == 1
    cached = ask("How many pears on day 3?")
    uncached = ask("How many pears on day 3?", "--no-cache")
    assert cached["usage"]["cache_source"] == "disk" and cached["usage"]["cached_tokens"] > 100
    assert cached["usage"]["prompt_tokens"] - cached["usage"]["cached_tokens"] <= 64
    assert uncached["usage"]["cached_tokens"] == 0 and uncached["usage"]["cache_source"] is None
    assert cached["text"] == uncached["text"] and cached["text"]
    schedule = next(s for s in cached["stages"] if s["name"] == "schedule")
    assert "the disk prefix cache" in schedule["detail"]


@pytest.mark.parametrize("max_tokens", ["4", "64"])  # cut by max tokens, and ended by the model
def test_a_continued_conversation_prefills_only_its_new_turn(max_tokens):
    """The tip saved at release holds the prompt and the whole reply, its last token too."""
    turns = []
    for extra in ([], ["-c"], ["-c"]):
        r = cli(
            "chat", "-t", "1", "--temp", "0", "-n", max_tokens, "--json", *extra, "Name a fruit.", input=""
        )
        assert r.exit_code == 0, r.stderr
        turns.append(json.loads(r.stdout)["usage"])
    for previous, usage in zip(turns, turns[1:], strict=False):
        assert usage["cache_source"] == "disk"
        assert usage["cached_tokens"] == previous["prompt_tokens"] + previous["completion_tokens"]


def test_a_truncated_entry_falls_back_with_one_note_under_stats(seeded):
    reference = ask("List the days.", "--no-cache")
    seed(seeded)
    (entry,) = entries()
    with open(entry, "r+b") as fh:
        fh.truncate(entry.stat().st_size // 2)
    result = cli(*CHAT, "--stats", "List the days.", input=DOC)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.rstrip("\n") == reference["text"]
    notes = [line for line in result.stderr.splitlines() if "cache:" in line]
    assert len(notes) == 1 and "damaged prefix-cache entry" in notes[0], result.stderr
    quiet = cli(*CHAT, "--no-stats", "List the days.", input=DOC)
    assert quiet.exit_code == 0 and quiet.stderr == ""  # the second entry is whole: nothing to say


def test_an_entry_of_another_model_is_not_used(tmp_path, embedded_path, seeded):
    seed(seeded)
    other = tmp_path / "other.gguf"
    data = bytearray(Path(embedded_path).read_bytes())
    at = data.find(b"SmolLM2")
    data[at] = ord("X")  # one byte of a metadata string: another file, the same shapes and tokens
    other.write_bytes(data)
    result = cli(*ARGS, str(other), "How many pears on day 3?", input=DOC)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["usage"]["cached_tokens"] == 0 and doc["usage"]["cache_source"] is None
    listed = json.loads(cli("cache", "--json").stdout)
    assert sorted(e["model"] for e in listed) == ["other.gguf", "smollm2-135m-instruct"]


def test_two_processes_writing_the_same_entry_leave_one_whole_entry():
    children = [
        spawn_cli(*ARGS, "Which day shipped the most apples?", stdin=subprocess.PIPE) for _ in range(2)
    ]
    results = [child.result(DOC, timeout=600) for child in children]
    assert all(r.exit_code == 0 for r in results), [r.stderr for r in results]
    assert json.loads(results[0].stdout)["text"] == json.loads(results[1].stdout)["text"]
    (entry,) = entries()
    info, _ = parse_entry(bytearray(entry.read_bytes()))
    assert len(info.tokens) > 100
    assert not [p for p in cli_store().cache_dir.iterdir() if p.name.startswith(TEMP_PREFIX)]


def test_the_cap_evicts_the_least_recently_used_entry(seeded):
    seed(seeded)
    (first,) = entries()
    cap = str(first.stat().st_size * 3 // 2)
    ask("Summarize.", doc=DOC.replace("orchard", "farm"), vars={"LLMCLI_CACHE_MAX": cap})
    (second,) = entries()
    assert second != first
    assert ask("Summarize.", vars={"LLMCLI_CACHE_MAX": "0"})["usage"]["cache_source"] is None
    assert entries() == [second]  # 0: the cache is neither read nor written


def test_a_full_disk_still_prints_the_reply_then_one_warning_and_leaves_nothing_half_written():
    r = cli_process(
        *CHAT,
        "Which day shipped the most apples?",
        input=DOC,
        timeout=600,
        file_size_limit=1_000_000,  # as a full disk: the cache entry cannot be written
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip()
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "could not save the prompt cache" in lines[0], r.stderr
    assert "File too large" in lines[0] and "the reply is complete" in lines[0]
    cache_dir = cli_store().cache_dir
    assert [p.name for p in cache_dir.iterdir()] in ([], [MEMO_FILE])  # the model's hash, remembered


def test_cache_lists_and_clears_inside_its_root(tmp_path, seeded):
    empty = cli("cache")
    assert empty.exit_code == 0 and empty.stdout == "" and "is empty" in empty.stderr
    seed(seeded)
    listed = cli("cache")
    assert listed.exit_code == 0 and "smollm2-135m-instruct" in listed.stdout and "1 entry" in listed.stderr
    (row,) = json.loads(cli("cache", "--json").stdout)
    assert row["tokens"] > 100 and row["size"] == entries()[0].stat().st_size
    # A file the cache does not own, and a link out of it, are left alone.
    outside = tmp_path / "keep.kv"
    outside.write_text("not ours")
    cache_dir = cli_store().cache_dir
    os.symlink(outside, cache_dir / "link.kv")
    (cache_dir / "notes.txt").write_text("mine")
    cleared = cli("cache", "clear", "--json")
    assert cleared.exit_code == 0 and json.loads(cleared.stdout)["removed_entries"] == 1
    assert [p.name for p in entries()] == ["link.kv"] and (cache_dir / "link.kv").is_symlink()
    assert outside.read_text() == "not ours" and (cache_dir / "notes.txt").exists()
    shutil.rmtree(cache_dir)


def test_bad_arguments_and_variables_exit_2_with_one_line():
    bad = cli("cache", "drop")
    assert bad.exit_code == 2 and "'drop' is not one of list, clear" in bad.stderr
    size = cli(*ARGS, "hi", vars={"LLMCLI_CACHE_MAX": "lots"})
    assert size.exit_code == 2 and len(size.stderr.strip().splitlines()) == 1
    assert "LLMCLI_CACHE_MAX='lots' is not a size" in size.stderr and size.stdout == ""
    remote = cli("chat", "--endpoint", "http://127.0.0.1:9/v1", "--no-cache", "hi")
    assert remote.exit_code == 2 and "--no-cache set the local engine" in remote.stderr


def test_clear_reports_entries_and_damaged_files_as_the_listing_counts_them(seeded):
    seed(seeded)
    cache_dir = cli_store().cache_dir
    key_id = entries()[0].name.split("-")[0]
    for name, content in ((f"{key_id}-{'a' * 24}.kv", MAGIC), (f"{key_id}-{'b' * 24}.kv", MAGIC + b"junk")):
        (cache_dir / name).write_bytes(content)  # ours (named and marked so), and damaged
    (cache_dir / "junk.kv").write_bytes(b"junk")  # not ours: neither counted nor removed
    listed = cli("cache")
    assert "1 entry," in listed.stderr and "2 damaged files" in listed.stderr
    (row,) = json.loads(cli("cache", "--json").stdout)
    assert row["last_used"].endswith("Z") and row["created"].endswith("Z")
    cleared = cli("cache", "clear")
    assert cleared.exit_code == 0 and "removed 1 entry and 2 damaged files (" in cleared.stderr, (
        cleared.stderr
    )
    assert [p.name for p in entries()] == ["junk.kv"]


def test_a_cap_below_the_entry_says_so_under_stats_and_a_lowered_cap_evicts_at_the_next_run(seeded):
    seed(seeded)
    (kept,) = entries()
    small = {"LLMCLI_CACHE_MAX": "1M"}
    r = cli(
        *CHAT,
        "--stats",
        "--no-cache",
        "List the days.",
        input=DOC,
        vars=small,
    )
    assert r.exit_code == 0 and entries() == [kept]  # --no-cache: the cache is not touched
    r = cli(*CHAT, "--stats", "List the days.", input=DOC, vars=small)
    assert r.exit_code == 0, r.stderr
    assert entries() == []  # the old entry is over the cap: evicted as the session starts
    notes = [line for line in r.stderr.splitlines() if "cache:" in line]
    assert len(notes) == 1 and "is larger than LLMCLI_CACHE_MAX (1.0" in notes[0], r.stderr
    assert "MB); not saved" in r.stderr  # the panel wraps the note
    quiet = cli(*CHAT, "--no-stats", "List the days.", input=DOC, vars=small)
    assert quiet.exit_code == 0 and quiet.stderr == ""  # a note, not a warning
