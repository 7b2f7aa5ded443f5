"""The disk prefix cache on the real embedded model: state round trips, entries, the chat session's use."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from llmcli.engine.events import Notice, Stats, TextDelta
from llmcli.engine.local.cache_entry import MAGIC, CacheKey, CorruptEntry, entry_name, parse_entry
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.local.model_identity import model_identity
from llmcli.engine.local.prefix_cache import MIN_TOKENS, PrefixCache
from llmcli.engine.local.session_cache import SessionCache, cache_key
from llmcli.engine.sampling import SamplingParams

DOC = "\n".join(
    f"Entry {i}: the lighthouse keeper logged {i * 3} ships and {i % 5} storms in week {i}." for i in range(7)
)


def greedy() -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=24)


def ask(session: ChatSession, text: str) -> tuple[str, Stats, list]:
    events = list(session.ask(text, keep_cache=False))
    stats = events[-1]
    assert isinstance(stats, Stats)
    return "".join(e.text for e in events if isinstance(e, TextDelta)), stats, events


def write_entry(runtime, root: Path, text: str, stable: str = DOC) -> None:
    """A turn that only writes the entry of `stable`: nobody reads its reply, so one token does."""
    session = session_on(runtime, root)
    session.stable_text = stable
    session.params = SamplingParams(temperature=0.0, max_tokens=1)
    ask(session, text)


def session_on(runtime, root: Path | None, max_bytes: int = 10**9) -> ChatSession:
    runtime.clear()
    session = ChatSession(runtime, params=greedy())
    session.stable_text = DOC
    if root is not None:
        session.disk_cache = SessionCache(PrefixCache(root, max_bytes), cache_key(runtime), "smollm2")
    return session


def test_a_state_round_trip_continues_exactly_as_the_original(runtime):
    runtime.clear()
    tokens = runtime.tokenize(DOC)
    runtime.prefill(tokens)
    state = runtime.state_bytes()
    first = ask_plain(runtime)
    runtime.clear()
    assert runtime.load_state(state, tokens) and runtime.kv_tokens == tokens
    assert ask_plain(runtime) == first


def ask_plain(runtime) -> list[int]:
    """Greedy continuation of what the KV cache holds (its last token computed again for logits)."""
    from llmcli.engine.local.sampler import Sampler

    last = runtime.kv_tokens[-1]
    runtime.keep_prefix(len(runtime.kv_tokens) - 1)
    runtime.prefill([last])
    sampler = Sampler(runtime, greedy())
    out = []
    try:
        for _ in range(8):
            token = sampler.sample()
            out.append(token)
            runtime.step(token)
    finally:
        sampler.close()
    return out


def test_a_refused_state_leaves_the_runtime_cleared_and_usable(runtime):
    runtime.clear()
    runtime.prefill(runtime.tokenize("Some words first."))
    assert not runtime.load_state(bytearray(b"\x07" * 4096), [1, 2, 3])
    assert runtime.kv_tokens == []
    runtime.prefill(runtime.tokenize("Still works."))
    assert len(runtime.kv_tokens) > 0


def test_entries_round_trip_and_damage_is_detected(tmp_path, runtime):
    runtime.clear()
    tokens = runtime.tokenize(DOC)
    runtime.prefill(tokens)
    cache, key = PrefixCache(tmp_path, 10**9), cache_key(runtime)
    path = cache.write(key, "m", tokens, runtime.state_bytes())
    assert path.name == entry_name(key.id, tokens)
    match = cache.best(key.id, tokens + [5, 6])
    assert match.length == len(tokens)
    info, state = cache.load(match.entry, runtime.state_bound())
    assert info.tokens == tokens and len(state) == info.state_size
    data = bytearray(path.read_bytes())
    for broken, reason in [
        (data[:-1], "promises"),
        (data[:100], "truncated"),
        (data[:-10] + bytes([data[-10] ^ 1]) + data[-9:], "checksum"),
    ]:
        with pytest.raises(CorruptEntry, match=reason):
            parse_entry(broken)


def test_a_longer_entry_supersedes_its_prefix_and_the_cap_evicts_the_least_recently_used(tmp_path, runtime):
    key = cache_key(runtime)
    state = bytearray(1000)
    cache = PrefixCache(tmp_path, 10**9)
    short = cache.write(key, "m", list(range(40)), state)
    longer = cache.write(key, "m", list(range(60)), state)
    assert not short.exists() and longer.exists()  # superseded
    other = cache.write(key, "m", list(range(100, 150)), state)
    assert {p.name for p in tmp_path.iterdir()} == {longer.name, other.name}
    # A cap of two entries: a third evicts the one used least recently (the `longer`, once `other` is read).
    import os

    os.utime(longer, (1, 1))
    small = PrefixCache(tmp_path, 2 * other.stat().st_size + 10)
    third = small.write(key, "m", list(range(200, 250)), state)
    assert {p.name for p in tmp_path.iterdir()} == {other.name, third.name}
    assert small.write(key, "m", list(range(300, 350)), bytearray(10**6)) is None  # larger than the cap


def test_the_model_identity_follows_the_bytes_not_the_path(tmp_path, embedded_path):
    copy = tmp_path / "same.gguf"
    shutil.copyfile(embedded_path, copy)
    assert model_identity(copy) == model_identity(embedded_path)
    data = bytearray(copy.read_bytes())
    at = data.find(b"SmolLM2")
    data[at] = ord("X")  # one byte of a metadata string
    copy.write_bytes(data)
    assert model_identity(copy) != model_identity(embedded_path)


def test_the_key_holds_the_version_and_context_parameters(runtime):
    key = cache_key(runtime)
    assert key.llama_cpp and key.n_ctx == runtime.n_ctx and key.n_batch == runtime.n_batch
    from dataclasses import replace

    assert (
        len(
            {
                key.id,
                replace(key, llama_cpp="0.0.1").id,
                replace(key, n_ctx=512).id,
                replace(key, flash_attn=0).id,
            }
        )
        == 4
    )
    assert isinstance(key, CacheKey)


def test_a_second_question_reuses_the_document_from_disk_and_answers_as_without_the_cache(tmp_path, runtime):
    first, stats1, _ = ask(session_on(runtime, tmp_path), f"{DOC}\n\nHow many storms in week 3?")
    assert stats1.cache_source is None and len(list(tmp_path.glob("*.kv"))) == 1
    cached, stats2, _ = ask(session_on(runtime, tmp_path), f"{DOC}\n\nWhich week had the most ships?")
    uncached, stats3, _ = ask(session_on(runtime, None), f"{DOC}\n\nWhich week had the most ships?")
    assert stats2.cache_source == "disk" and stats2.cached_tokens >= MIN_TOKENS
    assert stats2.prefill_tokens <= 32
    assert stats3.cached_tokens == 0 and stats3.cache_source is None
    assert cached == uncached and cached
    assert "the disk prefix cache" in stats2.stage("schedule").detail


@pytest.mark.parametrize("field", ["llama_cpp", "model"])
def test_an_entry_from_an_older_llama_cpp_or_another_model_is_not_used(tmp_path, runtime, field):
    """A state written under another key (an older llama.cpp, other model bytes) stays unused, even
    when its file is renamed to this key's name: the header's key is checked, not only the name."""
    from dataclasses import replace

    write_entry(runtime, tmp_path, f"{DOC}\n\nSummarize.")
    (entry,) = tmp_path.glob("*.kv")
    info, state = parse_entry(entry.read_bytes(), entry)
    entry.unlink()
    key = cache_key(runtime)
    other = replace(key, **{field: "0.2.90" if field == "llama_cpp" else "1:" + "0" * 64})
    written = PrefixCache(tmp_path, 10**9).write(other, "smollm2", info.tokens, bytes(state))
    renamed = written.with_name(entry_name(key.id, info.tokens))
    written.rename(renamed)
    _, stats, _ = ask(session_on(runtime, tmp_path), f"{DOC}\n\nList the weeks.")
    assert stats.cached_tokens == 0 and stats.cache_source is None


def test_a_damaged_entry_falls_back_to_a_full_prefill_with_one_note(tmp_path, runtime):
    write_entry(runtime, tmp_path, f"{DOC}\n\nSummarize.")
    (entry,) = tmp_path.glob("*.kv")
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(data)
    text, stats, events = ask(session_on(runtime, tmp_path), f"{DOC}\n\nList the weeks.")
    plain, _, _ = ask(session_on(runtime, None), f"{DOC}\n\nList the weeks.")
    assert stats.cached_tokens == 0 and stats.cache_source is None
    assert "checksum" in stats.cache_note and "prefilled in full" in stats.cache_note
    assert not [e for e in events if isinstance(e, Notice)]  # a note in the stats, not a warning
    assert text == plain


def test_a_follow_up_turn_reuses_the_saved_tip(tmp_path, runtime):
    session = session_on(runtime, tmp_path)
    session.stable_text = None
    reply, _, _ = ask(session, f"{DOC}\n\nName one week.")
    follow = session_on(runtime, tmp_path)
    follow.stable_text = None
    follow.messages = list(session.messages)  # as `chat -c` restores a conversation
    _, stats, _ = ask(follow, "And another one?")
    assert stats.cache_source == "disk"
    assert stats.prefill_tokens < 40 < stats.cached_tokens


def test_a_repl_session_saves_what_its_kv_cache_holds_when_it_closes(tmp_path, embedded_path):
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=1024))
    session = ChatSession(rt, params=greedy())
    session.disk_cache = SessionCache(PrefixCache(tmp_path, 10**9), cache_key(rt), "smollm2")
    list(session.ask(f"{DOC}\n\nName one week."))  # a REPL turn: the KV cache is kept
    assert list(tmp_path.glob("*.kv")) == []
    held = list(rt.kv_tokens)
    session.close()
    session.close()  # twice is harmless
    (entry,) = tmp_path.glob("*.kv")
    info, _ = parse_entry(bytearray(entry.read_bytes()))
    assert info.tokens == held and session.cache_warning is None


def test_files_that_can_never_be_entries_are_removed_by_a_session_once_with_one_note(tmp_path, runtime):
    ask(session_on(runtime, tmp_path), f"{DOC}\n\nSummarize.")
    (entry,) = tmp_path.glob("*.kv")
    key_id = cache_key(runtime).id
    data = entry.read_bytes()
    damaged = {
        f"{key_id}-{'a' * 24}.kv": data[: len(data) // 2],  # truncated
        f"{key_id}-{'b' * 24}.kv": MAGIC + b"garbage" * 100,
        f"{key_id}-{'e' * 24}.kv": MAGIC,
    }
    foreign = {  # under an entry's name, but without the magic: not ours, left alone and not counted
        f"{key_id}-{'c' * 24}.kv": b"",
        f"{key_id}-{'f' * 24}.kv": b"someone else's notes",
    }
    for name, content in {**damaged, **foreign}.items():
        (tmp_path / name).write_bytes(content)
    temp = tmp_path / ".tmp-live0000.kv"  # a writer's file, still being written
    temp.write_bytes(data[:100])
    outside = tmp_path.parent / f"{tmp_path.name}-outside.kv"
    outside.write_bytes(data)
    (tmp_path / f"{key_id}-{'d' * 24}.kv").symlink_to(outside)
    _, stats, _ = ask(session_on(runtime, tmp_path), f"{DOC}\n\nList the weeks.")
    assert stats.cache_source == "disk"
    assert stats.cache_note == "removed 3 damaged prefix-cache entries", stats.cache_note
    assert not [name for name in damaged if (tmp_path / name).exists()]
    assert all((tmp_path / name).read_bytes() == content for name, content in foreign.items())
    assert temp.exists() and outside.read_bytes() == data
    assert (tmp_path / f"{key_id}-{'d' * 24}.kv").is_symlink()
    _, again, _ = ask(session_on(runtime, tmp_path), f"{DOC}\n\nList the weeks.")
    assert again.cache_note is None  # said once, not at every run


def test_clear_counts_entries_and_damaged_files_apart_and_leaves_what_is_not_ours(tmp_path, runtime):
    cache, key = PrefixCache(tmp_path, 10**9), cache_key(runtime)
    whole = cache.write(key, "m", list(range(40)), bytearray(1000))
    damaged = tmp_path / f"{key.id}-{'a' * 24}.kv"
    damaged.write_bytes(whole.read_bytes()[:-10])
    foreign = {
        "empty.kv": b"",
        "junk.kv": MAGIC + b"junk",  # our magic, not our name
        f"{key.id}-{'b' * 24}.kv": b"not an entry",  # our name, not our magic
        ".tmp-old.kv": MAGIC,  # not a name tempfile gives
        ".tmp-abcdefgh.kv": b"someone's",  # a temporary file's name, not our magic
        ".tmp-x": b"",
    }
    for name, content in foreign.items():
        (tmp_path / name).write_bytes(content)
        os.utime(tmp_path / name, (1, 1))  # old enough to be a dead writer's, were it ours
    dead = tmp_path / ".tmp-dead0000.kv"
    dead.write_bytes(MAGIC + b"partial")
    os.utime(dead, (1, 1))
    live = tmp_path / ".tmp-live0000.kv"
    live.write_bytes(MAGIC + b"partial")
    sizes = whole.stat().st_size + damaged.stat().st_size + dead.stat().st_size
    cleared = cache.clear()
    assert (cleared.entries, cleared.damaged, cleared.bytes) == (1, 1, sizes)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*foreign, live.name])


def test_an_entry_larger_than_the_cap_is_not_saved_and_says_so_in_the_stats(tmp_path, runtime):
    _, stats, events = ask(session_on(runtime, tmp_path, max_bytes=100_000), f"{DOC}\n\nSummarize.")
    assert list(tmp_path.glob("*.kv")) == []
    assert stats.cache_note is not None and stats.cache_note.startswith("the prompt's KV state (")
    assert stats.cache_note.endswith("is larger than LLMCLI_CACHE_MAX (100.0 kB); not saved"), (
        stats.cache_note
    )
    schedule = next(s for s in stats.stages if s.name == "schedule")
    assert "not saved" not in schedule.detail  # the schedule did not save: the note is the panel's own line
    assert not [e for e in events if isinstance(e, Notice)]  # a note in the stats, not a warning


def test_a_lowered_cap_evicts_when_a_session_opens_the_cache(tmp_path, runtime):
    ask(session_on(runtime, tmp_path), f"{DOC}\n\nSummarize.")
    (entry,) = tmp_path.glob("*.kv")
    SessionCache.open(tmp_path, tmp_path, 1000, runtime, "smollm2")  # as the chat use-case opens it
    assert not entry.exists()
