"""Seeded fuzzing of GGUF headers and metadata through `llmcli show` and `llmcli chat`.

Each case is the tiny model (tests/fuzz/gguf_files.build_tiny, ~40 KB, chats in milliseconds)
with one mutation: a key retyped, revalued, dropped or added; a count, a string length or a byte
of the header overwritten; a tensor's shape, type or offset changed; the file truncated. Every
run must end as a person expects: an exit status below 128 (no SIGABRT/SIGSEGV), no traceback,
and for an error nothing on stdout and one line on stderr (no llama.cpp log or backtrace leaking).
Nothing may be written outside the temporary root.

Default: 15 cases per seed. LLMCLI_FUZZ_LONG=1: 1000 cases (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import gc
import math
import os
import random
import struct
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fuzz import LONG, SEED_IDS, assert_reached, cases, seeds
from tests.fuzz import gguf_files as g
from tests.fuzz.batch import run_many
from tests.fuzz.gguf_files import (
    ARR,
    F32,
    STR,
    U32,
    Layout,
    TensorInfo,
    assemble,
    build_tiny,
    encode_kv,
    layout,
)
from tests.support.cli import Result

N_CASES = cases(default=15, long=1000)
FIXED_SEED = 14

INTS = [
    0,
    1,
    2,
    3,
    7,
    8,
    16,
    31,
    32,
    33,
    64,
    255,
    256,
    261,
    511,
    512,
    513,
    1024,
    1025,
    65535,
    65536,
    2**31 - 1,
    2**31,
    2**32 - 1,
]
SIGNED = [-1, -2, -201, -(2**31)]
FLOATS = [0.0, -1.0, 1e-30, 1e30, math.nan, math.inf, -math.inf, 0.5]
STRINGS = [
    "",
    "llama",
    "none",
    "no_vocab",
    "gpt2",
    "bert",
    "t5",
    "rwkv",
    "test",
    "gemma4",
    "yarn",
    "warp",
    "\x1b[31mred\x1b[0m",
    "line\nbreak",
    "é" * 300,
    "{{ 1/0 }}",
    "{{ bos_token }}",
    "x" * 70,
]
# Keys llama.cpp reads (some absent from the tiny model): `add` brings them in with a random value.
KNOWN_KEYS = [
    "general.alignment",
    "general.architecture",
    "general.file_type",
    "general.name",
    "llama.block_count",
    "llama.context_length",
    "llama.embedding_length",
    "llama.feed_forward_length",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.attention.key_length",
    "llama.attention.value_length",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.rope.scaling.type",
    "llama.rope.scaling.factor",
    "llama.expert_count",
    "llama.expert_used_count",
    "llama.expert_group_count",
    "llama.nextn_predict_layers",
    "llama.vocab_size",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
    "split.count",
    "split.no",
]


def random_value(rng: random.Random) -> tuple:
    """(vtype, value[, item_type]) of any GGUF type, from values near the edges."""
    vtype = rng.randrange(13)  # every GGUF type, uint8 (0) to float64 (12)
    if vtype == ARR:
        item_type = rng.choice([U32, g.I32, F32, STR, g.U8])
        count = rng.choice([0, 1, 2, 261, 262, 300])
        return ARR, [random_scalar(rng, item_type) for _ in range(count)], item_type
    return vtype, random_scalar(rng, vtype)


def random_scalar(rng: random.Random, vtype: int):
    bits = {g.U8: 8, g.U16: 16, U32: 32, g.U64: 64, g.I8: 8, g.I16: 16, g.I32: 32, g.I64: 64}
    if vtype == STR:
        return rng.choice(STRINGS)
    if vtype in (F32, g.F64):
        return rng.choice(FLOATS)
    if vtype == g.BOOL:
        return rng.random() < 0.5
    n = bits[vtype]
    if vtype in (g.U8, g.U16, U32, g.U64):
        return rng.choice(INTS) % 2**n
    value = rng.choice(INTS + SIGNED)
    return (value + 2 ** (n - 1)) % 2**n - 2 ** (n - 1)


def value_of_same_type(rng: random.Random, raw_kv: bytes) -> tuple | None:
    """A new value of the key's own type (a range mutation rather than a type one)."""
    key_len = struct.unpack_from("<Q", raw_kv)[0]
    vtype = struct.unpack_from("<I", raw_kv, 8 + key_len)[0]
    if vtype == ARR:
        item_type = struct.unpack_from("<I", raw_kv, 12 + key_len)[0]
        count = rng.choice([0, 1, 2, 260, 261, 262])
        return ARR, [random_scalar(rng, item_type) for _ in range(count)], item_type
    return vtype, random_scalar(rng, vtype)


@dataclass
class Case:
    index: int
    mutation: str
    detail: str
    data: bytes


# -- mutations: each takes (rng, source layout, data section) and returns (detail, file bytes) --------
def m_retype(rng, src: Layout, data):
    key = pick_key(rng, src)
    change = random_value(rng)
    kvs = [encode_kv(key, *change) if k == key else raw for k, raw in src.kvs.items()]
    return f"{key} = {change[0]}:{str(change[1])[:40]!r}", assemble(kvs, src.tensors, data)


def pick_key(rng: random.Random, src: Layout) -> str:
    """Mostly a key llama.cpp reads (where its asserts are), sometimes any key of the file."""
    read = [k for k in src.kvs if k in KNOWN_KEYS]
    return rng.choice(read if rng.random() < 0.8 else list(src.kvs))


def m_revalue(rng, src, data):
    key = pick_key(rng, src)
    change = value_of_same_type(rng, src.kvs[key])
    kvs = [encode_kv(key, *change) if k == key else raw for k, raw in src.kvs.items()]
    return f"{key} = {str(change[1])[:40]!r}", assemble(kvs, src.tensors, data)


# Keys a file is whole without (its name, its template, a flag with a default): the first drop takes one.
SPARE_KEYS = ["general.name", "tokenizer.chat_template", "tokenizer.ggml.add_bos_token"]


def m_drop(rng, src, data, keys: list[str] | None = None):
    key = rng.choice(keys or list(src.kvs))
    return f"drop {key}", assemble([raw for k, raw in src.kvs.items() if k != key], src.tensors, data)


def m_add(rng, src, data):
    key = rng.choice(KNOWN_KEYS)
    change = random_value(rng) if rng.random() < 0.5 else (U32, rng.choice(INTS))
    kvs = [raw for k, raw in src.kvs.items() if k != key] + [encode_kv(key, *change)]
    alignment = change[1] if key == "general.alignment" and change[0] == U32 and change[1] else 32
    if alignment & (alignment - 1) or alignment > 1 << 16:
        alignment = 32  # the writer pads as gguf.cpp would only for sane values; the reader decides
    return f"set {key} = {change[0]}:{str(change[1])[:40]!r}", assemble(kvs, src.tensors, data, alignment)


def m_counts(rng, src, data):
    n_tensors, n_kv = len(src.tensors), len(src.kvs)
    which = rng.choice(["tensors", "kv"])
    value = (
        rng.choice(INTS + [2**64 - 1, 2**63])
        if rng.random() < 0.7
        else (n_tensors if which == "tensors" else n_kv) + rng.choice([-1, 1])
    )
    counts = (value, n_kv) if which == "tensors" else (n_tensors, value)
    return f"n_{which} = {value}", assemble(list(src.kvs.values()), src.tensors, data, counts=counts)


def m_string_length(rng, src, data):
    key = rng.choice(list(src.kvs))
    raw = bytearray(src.kvs[key])
    key_len = struct.unpack_from("<Q", raw)[0]
    new = rng.choice([0, key_len - 1, key_len + 1, 2**32, 2**63, 2**64 - 1, 1 << 26])
    struct.pack_into("<Q", raw, 0, new % 2**64)
    kvs = [bytes(raw) if k == key else v for k, v in src.kvs.items()]
    return f"length of key {key} = {new}", assemble(kvs, src.tensors, data)


def m_value_bytes(rng, src, data):
    key = rng.choice(list(src.kvs))
    raw = bytearray(src.kvs[key])
    start = 8 + struct.unpack_from("<Q", raw)[0]
    for _ in range(rng.randint(1, 4)):
        raw[rng.randrange(start, len(raw))] = rng.randrange(256)
    kvs = [bytes(raw) if k == key else v for k, v in src.kvs.items()]
    return f"bytes of {key}", assemble(kvs, src.tensors, data)


def m_tensor(rng, src, data):
    tensors = [TensorInfo(t.name, list(t.dims), t.ggml_type, t.offset) for t in src.tensors]
    t = rng.choice(tensors)
    field = rng.choice(["dims", "n_dims", "type", "offset", "overlap", "name", "swap"])
    if field == "dims":
        t.dims[rng.randrange(len(t.dims))] = rng.choice(INTS + [2**63, 2**64 - 1, 10**12])
    elif field == "n_dims":
        t.dims = t.dims + [1] * rng.randint(1, 4) if rng.random() < 0.5 else []
    elif field == "type":
        t.ggml_type = rng.choice([1, 2, 3, 8, 12, 30, 39, 40, 100, 2**32 - 1])
    elif field == "offset":
        t.offset = rng.choice([1, 31, 33, t.offset + 32, 2**40, 2**64 - 32, len(data), len(data) - 32])
    elif field == "overlap":
        t.offset = rng.choice(tensors).offset
    elif field == "name":
        t.name = rng.choice([b"", b"x" * 64, b"blk.99.attn_q.weight", tensors[0].name, b"\xff\xfe"])
    else:
        other = rng.choice(tensors)
        t.dims, other.dims = other.dims, t.dims
    return f"tensor {t.name[:30]!r} {field}", assemble(list(src.kvs.values()), tensors, data)


def m_truncate(rng, src, whole: bytes):
    cut = rng.randrange(0, len(whole))
    return f"truncated at {cut}", whole[:cut]


def m_byteflip(rng, src, whole: bytes):
    data = bytearray(whole)
    header_end = src.data_offset
    for _ in range(rng.randint(1, 8)):
        pos = rng.randrange(0, header_end if rng.random() < 0.9 else len(data))  # the header, mostly
        data[pos] = rng.randrange(256)
    return "random bytes", bytes(data)


MUTATIONS = {
    "retype": m_retype,
    "revalue": m_revalue,
    "drop": m_drop,
    "add": m_add,
    "counts": m_counts,
    "string_length": m_string_length,
    "value_bytes": m_value_bytes,
    "tensor": m_tensor,
}
WHOLE_FILE_MUTATIONS = {"truncate": m_truncate, "byteflip": m_byteflip}


def make_cases(tiny: Path, n: int, seed: int) -> list[Case]:
    src = layout(tiny)
    whole = tiny.read_bytes()
    data = whole[src.data_offset :]
    names = list(MUTATIONS) + list(WHOLE_FILE_MUTATIONS)
    cases = []
    for i in range(n):
        rng = random.Random(seed * 100_003 + i)
        name = names[i % len(names)]  # every mutation kind in every run, even the short one
        if name == "drop" and i < len(names):  # a file still whole: every run reaches a success too
            detail, blob = m_drop(rng, src, data, SPARE_KEYS)
        elif name in MUTATIONS:
            detail, blob = MUTATIONS[name](rng, src, data)
        else:
            detail, blob = WHOLE_FILE_MUTATIONS[name](rng, src, whole)
        cases.append(Case(i, name, detail, blob))
    return cases


ERROR_KINDS = {
    "gguf_check": "is not a valid GGUF",
    "llama.cpp": "llama.cpp could not load",
    "not a GGUF": "is not a GGUF file",
    "truncated": "truncated GGUF",
}


def snapshot(*dirs: Path) -> set[tuple[str, int, int]]:
    """Every file under dirs, with size and mtime: what a run may not change."""
    seen = set()
    for d in dirs:
        if d.is_dir():
            for p in d.rglob("*"):
                if p.is_file():
                    st = p.stat()
                    seen.add((str(p), st.st_size, st.st_mtime_ns))
    return seen


def child_env(root: Path) -> dict[str, str]:
    """A child's variables: every place it could write points into `root`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLMCLI_", "HF_", "XDG_"))}
    env.update(
        HOME=str(root / "home"),
        LLMCLI_HOME=str(root / "llmcli"),
        HF_HOME=str(root / "hf"),
        XDG_DATA_HOME=str(root / "xdg"),
        XDG_CACHE_HOME=str(root / "xdg-cache"),
        TMPDIR=str(root / "tmp"),
        PYTHONPATH=os.environ.get("PYTHONPATH", ""),
        NO_COLOR="1",
    )
    return env


def run(root: Path, runs: list[tuple[str, ...]]) -> list[Result | None]:
    """Every run in one child (tests/fuzz/batch.py: a crash or a hang still ends only its case),
    with no memory limit, as a plain child."""
    return run_many(runs, env=child_env(root), cwd=root / "cwd", memory=None)


def judge(result: Result | None) -> str | None:
    """What is wrong with one run, or None."""
    if result is None:
        return "no end within 120 s"
    lines = result.stderr.splitlines()
    if result.exit_code < 0 or result.exit_code >= 128:
        return f"exit {result.exit_code}: {result.stderr[-300:]!r}"
    if "Traceback" in result.stderr:
        return "traceback"
    if "internal error" in result.stderr:
        return f"internal error: {lines[-1][:200]!r}"
    if result.exit_code != 0 and result.stdout:
        return f"exit {result.exit_code} with stdout {result.stdout[:200]!r}"
    if result.exit_code != 0 and len(lines) != 1:
        return f"exit {result.exit_code} with {len(lines)} lines on stderr: {result.stderr[:300]!r}"
    return None


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzzed_gguf_headers_end_cleanly(tmp_path_factory, seed):
    root = tmp_path_factory.mktemp("fuzz-gguf")
    for d in ("home", "llmcli", "hf", "xdg", "xdg-cache", "tmp", "cwd", "cases"):
        (root / d).mkdir()
    tiny = build_tiny(root / "tiny.gguf")
    real_home = Path(os.path.expanduser("~"))
    watched = [
        real_home / ".local/share/llmcli",
        real_home / ".cache/llmcli",
        real_home / ".cache/huggingface",
        root.parent,
    ]
    # Another test's object not yet collected may write under root.parent when it is: an unclosed
    # sqlite connection checkpoints its WAL into the database as it closes. Collected now, before
    # the snapshot, its write cannot land between the two.
    gc.collect()
    before = snapshot(*watched)
    outcomes: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    examples: dict[str, str] = {}
    failures = []
    all_cases = make_cases(tiny, N_CASES, seed)
    paths = [root / "cases" / f"case{case.index:04d}.gguf" for case in all_cases]
    for case, path in zip(all_cases, paths, strict=True):
        path.write_bytes(case.data)
    shows = run(root, [("show", str(path)) for path in paths])
    # chat loads the file into llama.cpp: on every file show accepted; on a third of the refused
    # ones (the same Python check refuses them first), which keeps the default run near a minute.
    chatted = [
        i
        for i, show in enumerate(shows)
        if (show is not None and show.exit_code == 0) or all_cases[i].index % 3 == 0
    ]
    chats = dict(
        zip(
            chatted,
            run(root, [("chat", str(paths[i]), "hi", "-n", "4", "-t", "1", "--seed", "1") for i in chatted]),
            strict=True,
        )
    )
    for i, (case, path) in enumerate(zip(all_cases, paths, strict=True)):
        runs = [("show", shows[i])] + ([("chat", chats[i])] if i in chats else [])
        for command, result in runs:
            problem = judge(result)
            if problem or result is None:
                outcomes["failure"] += 1
                failures.append(f"case {case.index} ({case.mutation}: {case.detail}) {command}: {problem}")
            elif result.exit_code == 0:
                outcomes["success"] += 1
            else:
                outcomes["clean error"] += 1
                kind = next((kind for kind, words in ERROR_KINDS.items() if words in result.stderr), "other")
                errors[kind] += 1
                examples.setdefault(kind, result.stderr.strip()[:200])
        path.unlink()
        if LONG and case.index % 100 == 99:  # a long run reports as it goes
            print(f"  {case.index + 1} cases: {dict(outcomes)}", flush=True)
    after = snapshot(*watched)
    outside = sorted(p for p, *_ in after - before if not p.startswith(str(root)))
    print(
        f"\nGGUF fuzz (seed {seed}): {N_CASES} cases, {sum(outcomes.values())} runs: "
        f"{outcomes['clean error']} clean errors ({dict(errors)}), {outcomes['success']} successes, "
        f"{outcomes['failure']} failures"
    )
    for kind, example in examples.items():
        print(f"  e.g. {kind}: {example}")
    assert not outside, f"written outside the temporary root: {outside[:10]}"
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:30])
    assert sorted(p.name for p in (root / "cases").iterdir()) == []  # nothing left beside the model files
    assert_reached(outcomes, "clean error", "success", seed=seed)  # the mutations both break and keep files


@pytest.mark.parametrize("name", list(MUTATIONS) + list(WHOLE_FILE_MUTATIONS))
def test_each_mutation_is_seeded(tmp_path, name):
    """The same seed gives the same files, so any failure above is reproducible by its case number."""
    tiny = build_tiny(tmp_path / "tiny.gguf")
    first = [c.data for c in make_cases(tiny, 20, FIXED_SEED) if c.mutation == name]
    again = [c.data for c in make_cases(tiny, 20, FIXED_SEED) if c.mutation == name]
    assert first and first == again
