"""The disk prefix cache against files made to fool it: a model changed in its middle, a spliced entry,
a state declared larger than any context, a folder that is a file, a loop or a link out of the store,
and files of someone else's beside the entries. Each falls back to the reply `--no-cache` gives."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from pathlib import Path

import pytest

from llmcli.engine.events import Notice
from llmcli.engine.local.cache_entry import MAGIC, CorruptEntry, encode_entry, parse_entry
from llmcli.engine.local.model_identity import MEMO_FILE, model_identity
from llmcli.engine.local.prefix_cache import CacheUnusable, PrefixCache, resolve_root
from llmcli.engine.local.session_cache import SessionCache, cache_key
from tests.engine.local.test_prefix_cache import DOC, ask, session_on, write_entry

MIB = 2**20
OTHER_DOC = DOC.replace("lighthouse keeper", "harbour master").replace("ships", "boats")


def middle_changed(src: str | Path, dst: Path) -> Path:
    """A copy of the GGUF with one byte of tensor data flipped halfway through the file."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as fh:
        fh.seek(os.path.getsize(dst) // 2)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0x01]))
    return dst


def ends(path: Path) -> tuple[int, bytes, bytes]:
    data = path.read_bytes()
    return len(data), data[:MIB], data[-MIB:]


def test_a_model_changed_only_in_its_middle_has_another_identity(tmp_path, embedded_path):
    changed = middle_changed(embedded_path, tmp_path / "patched.gguf")
    assert os.path.getsize(embedded_path) // 2 > 4 * MIB  # past the header, metadata and vocabulary
    assert ends(changed) == ends(Path(embedded_path))  # what a hash of the ends alone would see
    assert model_identity(changed) != model_identity(embedded_path)
    assert model_identity(changed).split(":")[0] == str(os.path.getsize(embedded_path))


def test_the_identity_is_remembered_per_file_version_and_a_change_is_not_missed(tmp_path, embedded_path):
    model = tmp_path / "m.gguf"
    shutil.copyfile(embedded_path, model)
    fresh = model_identity(model, tmp_path)
    assert not (tmp_path / MEMO_FILE).exists()  # written a moment ago: its mtime cannot be trusted yet
    os.utime(model, (1_000_000_000, 1_000_000_000))
    assert model_identity(model, tmp_path) == fresh
    memo = json.loads((tmp_path / MEMO_FILE).read_text())
    (row,) = memo["files"].values()
    assert row["blake2b"] == fresh.split(":")[1]
    # The remembered digest is what a later run uses: a planted one shows it is read, not recomputed...
    row["blake2b"] = "0" * 64
    (tmp_path / MEMO_FILE).write_text(json.dumps(memo))
    assert model_identity(model, tmp_path) == f"{model.stat().st_size}:{'0' * 64}"
    # ...and only while the file is the same version: another mtime is hashed again.
    os.utime(model, (1_000_000_001, 1_000_000_001))
    assert model_identity(model, tmp_path) == fresh


@pytest.mark.parametrize(
    "memo",
    [b"", b"{not json", b"[" * 100_000, b'{"version": 1, "files": []}', b" " * (2**20 + 10), b"\xff\xfe"],
    ids=["empty", "not-json", "deep", "wrong-shape", "oversized", "not-utf8"],
)
def test_a_damaged_identity_memo_is_ignored(tmp_path, embedded_path, memo):
    (tmp_path / MEMO_FILE).write_bytes(memo)
    assert model_identity(embedded_path, tmp_path) == model_identity(embedded_path)


def test_an_entry_spliced_from_two_is_refused_and_the_reply_is_the_uncached_one(tmp_path, runtime):
    write_entry(runtime, tmp_path, f"{DOC}\n\nSummarize.")
    (mine,) = tmp_path.glob("*.kv")
    other_root = tmp_path / "other"
    write_entry(runtime, other_root, f"{OTHER_DOC}\n\nSummarize.", stable=OTHER_DOC)
    (theirs,) = other_root.glob("*.kv")
    info, _ = parse_entry(bytearray(mine.read_bytes()))
    _, their_state = parse_entry(bytearray(theirs.read_bytes()))
    header_len = struct.unpack_from("<I", mine.read_bytes(), 12)[0]
    header = mine.read_bytes()[16 : 16 + header_len]
    spliced = b"".join(bytes(p) for p in encode_entry(header, their_state))  # a fresh, valid CRC
    with pytest.raises(CorruptEntry, match="binding"):
        parse_entry(bytearray(spliced))
    mine.write_bytes(spliced)
    question = f"{DOC}\n\nWhich week had the most ships?"
    text, stats, _ = ask(session_on(runtime, tmp_path), question)
    plain, _, _ = ask(session_on(runtime, None), question)
    assert stats.cache_source is None and stats.cached_tokens == 0
    assert f"the prefix-cache entry {mine.name} is a state that is not the state of its tokens" in (
        stats.cache_note
    )
    assert text == plain
    assert not mine.exists() or parse_entry(bytearray(mine.read_bytes()))  # removed, or a new whole entry


def huge_entry(entry: Path, state_size: int) -> None:
    """Rewrite `entry` as its own header followed by a sparse state of `state_size` bytes."""
    data = entry.read_bytes()
    header_len = struct.unpack_from("<I", data, 12)[0]
    with open(entry, "wb") as fh:
        fh.write(data[: 16 + header_len] + struct.pack("<Q", state_size))
        fh.truncate(16 + header_len + 8 + state_size + 4)


def test_an_entry_declaring_a_state_larger_than_the_context_is_refused_before_it_is_read(tmp_path, runtime):
    write_entry(runtime, tmp_path, f"{DOC}\n\nSummarize.")
    (entry,) = tmp_path.glob("*.kv")
    huge_entry(entry, 2**40)  # a terabyte: reading it whole is a MemoryError
    question = f"{DOC}\n\nList the weeks."
    text, stats, _ = ask(session_on(runtime, tmp_path), question)
    plain, _, _ = ask(session_on(runtime, None), question)
    assert stats.cache_source is None and text == plain
    assert f"declaring a state of {2**40} bytes, more than this context can hold" in stats.cache_note
    assert str(runtime.state_bound()) in stats.cache_note


def test_the_bound_holds_a_real_state_of_a_full_context(embedded_path):
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=256))
    try:
        rt.prefill(rt.tokenize("word " * 400)[:255])
        assert len(rt.state_bytes()) < rt.state_bound() < 64 * len(rt.state_bytes())
    finally:
        rt.close()


def unusable_roots(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Cache folders that cannot be used, and what the warning says of each."""
    store = tmp_path / "store"
    store.mkdir()
    a_file = store / "file"
    a_file.write_text("not a folder")
    loop = store / "loop"
    loop.symlink_to(loop)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    link_out = store / "link"
    link_out.symlink_to(outside)
    return {
        "file": (a_file, "is not a folder; move that file away"),
        "loop": (loop, "cannot be resolved"),
        "link-out": (link_out, f"is a link to {outside}, outside the store {store}; remove the link"),
    }


@pytest.mark.parametrize("kind", ["file", "loop", "link-out"])
def test_an_unusable_cache_folder_costs_one_warning_and_never_the_reply(tmp_path, runtime, kind):
    root, says = unusable_roots(tmp_path)[kind]
    outside_before = sorted((tmp_path / "elsewhere").iterdir())
    session = session_on(runtime, None)
    session.disk_cache = SessionCache.open(root, tmp_path / "store", 10**9, runtime, "smollm2")
    assert session.disk_cache.unusable is not None and says in session.disk_cache.unusable
    question = f"{DOC}\n\nWhich week had the most ships?"
    text, stats, events = ask(session, question)
    plain, _, _ = ask(session_on(runtime, None), question)
    assert text == plain and stats.cache_source is None
    notices = [e.text for e in events if isinstance(e, Notice)]
    assert len(notices) == 1 and says in notices[0], notices
    assert notices[0].endswith("; answered without the cache"), notices
    assert sorted((tmp_path / "elsewhere").iterdir()) == outside_before  # nothing written out there
    with pytest.raises(CacheUnusable, match=re.escape(says)):  # and `llmcli cache` says the same
        PrefixCache(resolve_root(root, tmp_path / "store"), 0).clear()


def test_a_link_inside_the_store_is_followed_and_only_our_files_are_swept(tmp_path, runtime):
    store = tmp_path / "store"
    real = store / "elsewhere"
    real.mkdir(parents=True)
    (store / "cache").symlink_to(real)
    key_id = cache_key(runtime).id
    foreign = {
        "notes.kv": b"mine",
        f"{key_id}-{'0' * 24}.kv": b"a file of mine under a name like an entry's",
        ".tmp-abcdefgh.kv": b"someone's temporary file",
        ".tmp-report": b"another",
    }
    for name, content in foreign.items():
        (real / name).write_bytes(content)
        os.utime(real / name, (1, 1))  # as old as a dead writer's
    assert resolve_root(store / "cache", store) == real.resolve()
    session = session_on(runtime, None)
    session.disk_cache = SessionCache.open(store / "cache", store, 10, runtime, "smollm2")  # evicts all
    assert session.disk_cache.unusable is None
    PrefixCache(real, 10**9).clear()
    assert {name: (real / name).read_bytes() for name in foreign} == foreign


def test_a_foreign_file_under_an_entry_name_is_not_counted_toward_the_cap(tmp_path, runtime):
    key = cache_key(runtime)
    cache = PrefixCache(tmp_path, 10**9)
    ours = cache.write(key, "m", list(range(40)), bytearray(1000))
    big = tmp_path / f"{key.id}-{'0' * 24}.kv"
    big.write_bytes(b"x" * 5000)
    os.utime(big, (1, 1))
    assert PrefixCache(tmp_path, ours.stat().st_size + 10).evict() == []
    assert big.exists() and ours.exists()
    assert MAGIC not in big.read_bytes()
