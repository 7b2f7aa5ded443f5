"""Seeded mutations of prefix-cache entries through the parser: only CorruptEntry, never a crash.

Each case takes a well-formed entry (small state bytes; the parser never looks inside them) and
damages it: truncation, flipped and inserted bytes, lengths made huge or wrong, header JSON that is
not an object, fields of the wrong type, a version or magic from elsewhere. `parse_entry` (what a
load checks before llama.cpp sees a byte) and `PrefixCache.read_info` (what lookup and `llmcli cache`
read) must raise CorruptEntry or accept an entry whose parts are consistent; nothing else.

2,000 cases per seed by default (a few seconds); LLMCLI_FUZZ_LONG=1 runs 50,000
(seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import os
import random
import struct
from pathlib import Path

import pytest

from llmcli.engine.prefix_cache import (
    CacheKey,
    CorruptEntry,
    PrefixCache,
    encode_entry,
    encode_header,
    parse_entry,
)
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

CASES = cases(default=2000, long=50000)
FIXED_SEED = 20240615
KEY = CacheKey(
    model="1:ab", llama_cpp="0.3.36", n_ctx=512, n_batch=512, n_ubatch=512, flash_attn=-1, type_k=1, type_v=1
)
WEIRD = [None, -1, 2**64, 1.5, "x", [], {}, True, [1.5], ["a"], [-1], [2**40], "\u202e", {"a": [None]}]


def valid(rng: random.Random) -> bytes:
    tokens = [rng.randrange(0, 50_000) for _ in range(rng.randint(0, 80))]
    state = os.urandom(rng.randint(0, 300))
    return b"".join(bytes(p) for p in encode_entry(encode_header(KEY, "m", tokens), state))


def header_mutation(rng: random.Random) -> bytes:
    header = json.loads(encode_header(KEY, "m", [1, 2, 3]))
    choice = rng.random()
    if choice < 0.3:
        header[rng.choice(list(header))] = rng.choice(WEIRD)
    elif choice < 0.5:
        del header[rng.choice(list(header))]
    elif choice < 0.7:
        header = rng.choice(WEIRD)
    else:
        header["n_tokens"] = rng.randint(-3, 10)
    raw = json.dumps(header).encode()
    if rng.random() < 0.2:
        raw = raw[: rng.randint(0, len(raw))] + rng.choice([b"", b"\xff\xfe", b"[" * 3000])
    return b"".join(bytes(p) for p in encode_entry(raw, os.urandom(rng.randint(0, 50))))


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
            data[at:at] = os.urandom(rng.randint(1, 16))
        elif kind == 3 and len(data) >= 16:
            struct.pack_into("<I", data, 12, rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(2**32)]))
        elif kind == 4 and len(data) >= 16:
            struct.pack_into("<I", data, 8, rng.choice([0, 2, 2**32 - 1]))  # version
        elif kind == 5 and len(data) >= 8:
            data[0:8] = rng.choice([b"GGUF\x03\0\0\0", b"\0" * 8, b"LLMCLIKW"])
        elif kind == 6:
            data = bytearray(os.urandom(rng.randint(0, 64)))
    return bytes(data)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_damaged_entries_raise_only_corrupt_entry(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cache = PrefixCache(tmp_path, 10**9)
    counts = {"corrupt": 0, "accepted": 0}
    for i in range(CASES):
        data = header_mutation(rng) if i % 5 == 0 else mutate(valid(rng), rng)
        path = tmp_path / "case.kv"
        path.write_bytes(data)
        for parse in (parse_entry, cache.read_info):
            try:
                result = parse(bytearray(data), path) if parse is parse_entry else parse(path)
            except CorruptEntry:
                counts["corrupt"] += 1
                continue
            info = result[0] if isinstance(result, tuple) else result
            assert (
                len(info.tokens)
                == json.loads(data[16 : 16 + struct.unpack_from("<I", data, 12)[0]])["n_tokens"]
            )
            assert info.state_offset + info.state_size + 4 == len(data)
            counts["accepted"] += 1
    print(f"\nprefix-cache entry fuzz (seed {seed}): {CASES} cases, {counts}")
    assert counts["corrupt"] > CASES, counts  # nearly every damaged entry is refused
    counts["undamaged accepted"] = sum(_ok(valid(random.Random(seed + s))) for s in range(20))
    assert counts["undamaged accepted"] == 20, counts  # and every undamaged one accepted
    assert_reached(counts, "corrupt", "undamaged accepted", seed=seed)


def _ok(data: bytes) -> bool:
    info, state = parse_entry(bytearray(data))
    return len(state) == info.state_size
