"""Seeded mutations of prefix-cache entries through the parser: only CorruptEntry, never a crash.

Each case takes a well-formed entry (small state bytes; the parser never looks inside them) and
damages it: truncation, flipped and inserted bytes, lengths made huge or wrong, header JSON that is
not an object, fields of the wrong type, a version or magic from elsewhere, a binding that does not
match, one entry's header spliced onto another's state under a fresh CRC. `parse_entry` (what a
load checks before llama.cpp sees a byte) and `PrefixCache.read_info` (what lookup and `llmcli cache`
read) must raise CorruptEntry (NotAnEntry when the magic is gone) or accept an entry whose parts are
consistent; nothing else. An accepted entry's binding matches its tokens and state.

600 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 50,000
(seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

import pytest

from llmcli.engine.local.cache_entry import (
    CacheKey,
    CorruptEntry,
    NotAnEntry,
    binding,
    encode_entry,
    encode_header,
    parse_entry,
)
from llmcli.engine.local.prefix_cache import PrefixCache
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

CASES = cases(default=600, long=50000)
FIXED_SEED = 20240615
KEY = CacheKey(
    model="1:ab", llama_cpp="0.3.36", n_ctx=512, n_batch=512, n_ubatch=512, flash_attn=-1, type_k=1, type_v=1
)
WEIRD = [None, -1, 2**64, 1.5, "x", [], {}, True, [1.5], ["a"], [-1], [2**40], "\u202e", {"a": [None]}]


def valid(rng: random.Random) -> bytes:
    tokens = [rng.randrange(0, 50_000) for _ in range(rng.randint(0, 80))]
    state = rng.randbytes(rng.randint(0, 300))
    return b"".join(bytes(p) for p in encode_entry(encode_header(KEY, "m", tokens, state), state))


def spliced(rng: random.Random) -> bytes:
    """One entry's header over another entry's state, with a checksum made fresh: only the binding tells."""
    tokens = [rng.randrange(0, 50_000) for _ in range(rng.randint(0, 80))]
    state, other = rng.randbytes(rng.randint(1, 300)), rng.randbytes(rng.randint(1, 300))
    if rng.random() < 0.5:  # or the same state under other tokens
        header, state_used = encode_header(KEY, "m", tokens, state), other
    else:
        header = encode_header(KEY, "m", tokens, state)
        header = header.replace(b'"tokens":[', b'"tokens":[7,', 1).replace(
            f'"n_tokens":{len(tokens)}'.encode(), f'"n_tokens":{len(tokens) + 1}'.encode()
        )
        state_used = state
    return b"".join(bytes(p) for p in encode_entry(header, state_used))


def header_mutation(rng: random.Random) -> bytes:
    header = json.loads(encode_header(KEY, "m", [1, 2, 3], b"state"))
    choice = rng.random()
    if choice < 0.3:
        header[rng.choice(list(header))] = rng.choice(WEIRD)
    elif choice < 0.5:
        del header[rng.choice(list(header))]
    elif choice < 0.7:
        header = rng.choice(WEIRD)
    elif choice < 0.85:
        header["n_tokens"] = rng.randint(-3, 10)
    else:
        header["binding"] = rng.choice(["0" * 32, "f" * 31, "X" * 32, binding(KEY.id, [1, 2, 3], b"state")])
    raw = json.dumps(header).encode()
    if rng.random() < 0.2:
        raw = raw[: rng.randint(0, len(raw))] + rng.choice([b"", b"\xff\xfe", b"[" * 3000])
    return b"".join(bytes(p) for p in encode_entry(raw, b"state" if rng.random() < 0.5 else rng.randbytes(9)))


def mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(7)
        if kind == 0 and data:
            del data[rng.randrange(len(data)) :]  # truncated
        elif kind == 1 and data:
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 2:
            at = rng.randrange(len(data) + 1)
            data[at:at] = rng.randbytes(rng.randint(1, 16))
        elif kind == 3 and len(data) >= 16:
            struct.pack_into("<I", data, 12, rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(2**32)]))
        elif kind == 4 and len(data) >= 16:
            struct.pack_into("<I", data, 8, rng.choice([0, 2, 2**32 - 1]))  # version
        elif kind == 5 and len(data) >= 8:
            data[0:8] = rng.choice([b"GGUF\x03\0\0\0", b"\0" * 8, b"LLMCLIKW"])
        elif kind == 6:
            data = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(data)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_damaged_entries_raise_only_corrupt_entry(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cache = PrefixCache(tmp_path, 10**9)
    counts = {"corrupt": 0, "not ours": 0, "accepted": 0, "spliced and refused": 0}
    for i in range(CASES):
        kind = ("header", "splice", "mutate", "mutate", "mutate")[i % 5]
        data = {"header": header_mutation, "splice": spliced}.get(kind, lambda r: mutate(valid(r), r))(rng)
        path = tmp_path / "case.kv"
        path.write_bytes(data)
        for whole in (True, False):  # parse_entry reads the state too; read_info only the header
            try:
                result = parse_entry(bytearray(data), path) if whole else cache.read_info(path)
            except NotAnEntry:
                counts["not ours"] += 1
                continue
            except CorruptEntry as exc:
                counts["corrupt"] += 1
                counts["spliced and refused"] += kind == "splice" and "binding" in str(exc)
                assert "\n" not in str(exc)
                continue
            assert kind != "splice" or not whole, "a spliced entry was loaded"
            info = result[0] if isinstance(result, tuple) else result
            assert (
                len(info.tokens)
                == json.loads(data[16 : 16 + struct.unpack_from("<I", data, 12)[0]])["n_tokens"]
            )
            assert info.state_offset + info.state_size + 4 == len(data)
            if whole:
                assert binding(info.key_id, info.tokens, result[1]) == info.binding
            counts["accepted"] += 1
    print(
        f"\nprefix-cache entry fuzz (seed {seed}): {CASES} cases, {2 * CASES} reads: "
        f"{counts['corrupt'] + counts['not ours']} clean errors ({counts}), {counts['accepted']} successes, "
        "0 failures"
    )
    assert counts["corrupt"] > CASES, counts  # nearly every damaged entry is refused
    counts["undamaged accepted"] = sum(_ok(valid(random.Random(seed + s))) for s in range(20))
    assert counts["undamaged accepted"] == 20, counts  # and every undamaged one accepted
    # every outcome reached, splices refused by their binding
    assert_reached(
        counts, "corrupt", "not ours", "accepted", "spliced and refused", "undamaged accepted", seed=seed
    )


def _ok(data: bytes) -> bool:
    info, state = parse_entry(bytearray(data))
    return len(state) == info.state_size


# -- `llmcli cache` and `cache clear` over seeded folders ---------------------------------------
CLI_CASES = cases(default=20, long=600)
ROOT_KINDS = ("folder", "folder", "folder", "file", "loop", "link out", "link in", "missing")


def _snapshot(*dirs: Path) -> set[tuple[str, int, int]]:
    seen = set()
    for d in dirs:
        for p in d.rglob("*") if d.is_dir() else ():
            if p.is_file() and not p.is_symlink():
                st = p.stat()
                seen.add((str(p), st.st_size, st.st_mtime_ns))
    return seen


def _folder(rng: random.Random, store: Path, outside: Path, case: int) -> tuple[Path, dict[Path, bytes], str]:
    """A cache folder of one kind in `store`, seeded with entries of ours (whole or damaged) and files
    of someone else's; the files that are not ours, which nothing may delete or change. The first
    cases take each kind in turn, so that every seed reaches every kind, and the rest draw one."""
    cache = store / "cache"
    kind = ROOT_KINDS[case] if case < len(ROOT_KINDS) else rng.choice(ROOT_KINDS)
    if kind == "file":
        cache.write_bytes(b"not a folder")
        return cache, {cache: b"not a folder"}, kind
    if kind == "loop":
        cache.symlink_to(cache)
        return cache, {}, kind
    if kind == "missing":
        return cache, {}, kind
    folder = {"folder": cache, "link out": outside, "link in": store / "kv"}[kind]
    folder.mkdir(exist_ok=True)
    if folder != cache:
        cache.symlink_to(folder)
    theirs: dict[Path, bytes] = {}
    for i in range(rng.randint(0, 6)):
        data = valid(rng) if rng.random() < 0.5 else mutate(valid(rng), rng)
        name = f"{KEY.id}-{i:024x}.kv"
        if data[:8] == b"LLMCLIKV":
            (folder / name).write_bytes(data)
        else:
            theirs[folder / name] = data
    for name in rng.sample(["notes.kv", ".tmp-draft", ".tmp-abcdefgh.kv", "x.txt", f"{'0' * 32}-x.kv"], 3):
        theirs[folder / name] = rng.randbytes(rng.randint(0, 40))
    for path, data in theirs.items():
        path.write_bytes(data)
        os.utime(path, (1, 1))  # old: a sweep of dead temporary files would take them, were they ours
    return cache, theirs, kind


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_cache_list_and_clear_over_seeded_folders_end_cleanly_and_delete_only_our_files(
    tmp_path: Path, seed: int
) -> None:
    from tests.support.cli import cli

    rng = random.Random(seed)
    outcomes = {"success": 0, "clean error": 0, "failure": 0}
    errors_by_kind: dict[str, int] = {}
    failures = []
    watched = tmp_path.parent
    for case in range(CLI_CASES):
        root = tmp_path / f"case{case}"
        store, outside = root / "store", root / "outside"
        store.mkdir(parents=True)
        outside.mkdir()
        cache, theirs, kind = _folder(rng, store, outside, case)
        before = _snapshot(watched)
        for args in (("cache",), ("cache", "--json"), ("cache", "clear"), ("cache", "clear", "--json")):
            r = cli(*args, vars={"LLMCLI_HOME": str(store)})
            problem = None
            if not 0 <= r.exit_code < 128 or "Traceback" in r.stderr or "internal error" in r.stderr:
                problem = f"exit {r.exit_code}: {r.stderr[-300:]}"
            elif r.exit_code == 0 and "--json" in args:
                json.loads(r.stdout)
            elif r.exit_code != 0 and (
                r.exit_code != 1 or len(r.stderr.strip().splitlines()) != 1 or r.stdout
            ):
                problem = f"exit {r.exit_code}, not one line: {r.stderr!r}"
            lost = [str(p) for p, data in theirs.items() if not p.is_file() or p.read_bytes() != data]
            if lost:
                problem = f"deleted or changed files not ours: {lost}"
            if problem:
                outcomes["failure"] += 1
                failures.append(f"case {case} ({kind}) {' '.join(args)}: {problem}")
            elif r.exit_code == 0:
                outcomes["success"] += 1
            else:
                outcomes["clean error"] += 1
                errors_by_kind[kind] = errors_by_kind.get(kind, 0) + 1
        changed = sorted(p for p, *_ in _snapshot(watched) ^ before if not p.startswith(str(root)))
        if changed:
            failures.append(f"case {case} ({kind}): written outside its root: {changed[:3]}")
            outcomes["failure"] += 1
    print(
        f"\n`llmcli cache` fuzz (seed {seed}): {CLI_CASES} cases, {sum(outcomes.values())} runs: "
        f"{outcomes['clean error']} clean errors ({errors_by_kind}), {outcomes['success']} successes, "
        f"{outcomes['failure']} failures"
    )
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:5])
    assert_reached(outcomes, "success", "clean error", seed=seed)
    assert set(errors_by_kind) == {"file", "loop", "link out"}, errors_by_kind  # each refused root refused
