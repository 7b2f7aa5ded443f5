"""Seeded fuzzing of `llmcli convert`: mutated safetensors headers, configs, tokenizer files and file kinds.

Each case copies a tiny valid checkpoint (tests/convert/handmade.py), applies one to three
mutations drawn from a seeded generator, and runs `llmcli convert` in this process through the
CLI's own entry point. Whatever the input, the run must end with an exit below 128, no traceback,
never "internal error", at most one line on stderr for an error, no output file after an error,
and nothing written outside the temporary root. A per-case alarm turns a hang into a failure.

60 cases per seed by default (a few seconds); LLMCLI_FUZZ_LONG=1 runs 1500 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.convert.handmade import CONFIG, write_tiny_llama
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.support.cli import Hung, cli

N_CASES = cases(default=60, long=1500)
FIXED_SEED = 14
CASE_SECONDS = 30  # a case that takes longer is a hang (a clean one takes well under a second)

# Nesting past Python's recursion limit can be neither built nor dumped as an object, so a
# marker string stands for it until `dumps` writes the file.
DEEP = "[" * 50_000 + "]" * 50_000
DEEP_MARK = "\u0000deep\u0000"


def dumps(value: Any) -> str:
    return json.dumps(value).replace(json.dumps(DEEP_MARK), DEEP)


# Values a hostile file puts where a number, a name or an object belongs.
POOL: list[Any] = [
    0,
    1,
    -1,
    2,
    3,
    7,
    8,
    15,
    16,
    17,
    32,
    64,
    259,
    260,
    261,
    1024,
    1025,
    10**7,
    10**12,
    2**31,
    2**32,
    2**63,
    2**64,
    -(2**63),
    0.5,
    1.5,
    1e-9,
    1e308,
    -0.0,
    float("nan"),
    float("inf"),
    "16",
    "",
    "x" * 1000,
    "F32",
    "a\nb",
    "\u202e",
    None,
    True,
    False,
    [],
    [1],
    [[[]]],
    ["t h"],
    {},
    {"a": 1},
    {"type": "ByteLevel"},
    {"rope_type": "linear"},
    {"rope_type": "yarn", "factor": 2},
    {"rope_type": "llama3", "factor": 8},
    {"type": "dynamic", "factor": 0},
    {"type": "longrope", "long_factor": [1] * 4, "short_factor": [1] * 4},
]


def pick(rng: random.Random) -> Any:
    return DEEP_MARK if rng.random() < 0.03 else rng.choice(POOL)


# -- mutations: each changes the checkpoint in `src` and returns what it did ------------------------


def _read_st(src: Path) -> tuple[dict, bytes]:
    data = (src / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + n]), data[8 + n :]


def _write_st(src: Path, header: Any, body: bytes, raw: bytes | None = None) -> None:
    blob = raw if raw is not None else dumps(header).encode()
    (src / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + body)


def _shape_value(rng: random.Random, shape: list[int]) -> Any:
    ops: list[Callable[[], Any]] = [
        lambda: shape[::-1],
        lambda: shape[:-1],
        lambda: [*shape, 1],
        lambda: [1, *shape],
        lambda: [d * 2 for d in shape],
        lambda: [0, *shape[1:]],
        lambda: [10**8, 0],
        lambda: [2**64, 0],
        lambda: [-1, *shape[1:]],
        lambda: [1] * 9,
        lambda: [str(d) for d in shape],
        lambda: [1.5],
        lambda: pick(rng),
    ]
    return rng.choice(ops)()


def _offsets_value(rng: random.Random, offsets: list[int]) -> Any:
    a, b = offsets
    ops: list[Callable[[], Any]] = [
        lambda: [a + 4, b + 4],
        lambda: [a - 4, b - 4],
        lambda: [b, a],
        lambda: [a, b + 4],
        lambda: [0, 0],
        lambda: [a, 2**64],
        lambda: [-8, b],
        lambda: [a, b, 0],
        lambda: [a],
        lambda: [float(a), b],
        lambda: pick(rng),
    ]
    return rng.choice(ops)()


NAMES = [
    "model.layers.0.mlp.foo.weight",
    "model.layers.99.mlp.up_proj.weight",
    "x",
    "",
    "a.1.b",
    "a.b.1",
    "model.layers.01.mlp.up_proj.weight",
    "model.layers.0.\n.weight",
    "lm_head.bias",
    "model.norm.bias",
    "model.layers.1e3.mlp.up_proj.weight",
    "model.layers.0.self_attn.rotary_emb.inv_freq",
]


def header_field(rng: random.Random, src: Path) -> str:
    header, body = _read_st(src)
    name = rng.choice(sorted(header))
    field = rng.choice(["dtype", "shape", "data_offsets"])
    info = header[name]
    if field == "dtype":
        info[field] = rng.choice(["F16", "BF16", "F64", "I8", "BOOL", "F8_E4M3", "f32", ["F32"], pick(rng)])
    elif field == "shape":
        info[field] = _shape_value(rng, info["shape"])
    else:
        info[field] = _offsets_value(rng, info["data_offsets"])
    _write_st(src, header, body)
    return f"header {name} {field}={str(info[field])[:40]}"


def header_structure(rng: random.Random, src: Path) -> str:
    header, body = _read_st(src)
    name = rng.choice(sorted(header))
    kind = rng.choice(["delete", "rename", "add", "duplicate", "metadata", "info", "whole"])
    if kind == "delete":
        del header[name]
    elif kind == "rename":
        header[rng.choice(NAMES)] = header.pop(name)
    elif kind == "add":
        header[rng.choice(NAMES)] = {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}
    elif kind == "duplicate":
        other = rng.choice(sorted(header))
        raw = dumps(header).replace(json.dumps(other), json.dumps(name), 1).encode()
        _write_st(src, None, body, raw)
        return f"header duplicate key {name}"
    elif kind == "metadata":
        header["__metadata__"] = pick(rng)
    elif kind == "info":
        header[name] = pick(rng)
    else:
        header = pick(rng)
    _write_st(src, header, body)
    return f"header {kind} {name}"


def header_bytes(rng: random.Random, src: Path) -> str:
    path = src / "model.safetensors"
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    kind = rng.choice(["length", "flip", "truncate", "garbage"])
    if kind == "length":
        value = rng.choice([0, 1, n - 1, n + 1, n + 8, len(data), 2**32, 2**64 - 1])
        data[:8] = struct.pack("<Q", value)
        detail = str(value)
    elif kind == "flip":
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(8, 8 + n)] ^= 1 << rng.randrange(8)
        detail = ""
    elif kind == "truncate":
        data = data[: rng.randrange(len(data))]
        detail = str(len(data))
    else:
        blob = rng.choice([b"\xff\xfe{}", b"{" * 10_000, b'{"a": 1e999999}', b'{"a": ' + b"9" * 5000 + b"}"])
        data = bytearray(struct.pack("<Q", len(blob)) + blob + bytes(data[8 + n :]))
        detail = blob[:10].decode("latin-1")
    path.write_bytes(bytes(data))
    return f"header bytes {kind} {detail}"


CONFIG_KEYS = [
    *CONFIG,
    "head_dim",
    "rope_scaling",
    "rope_parameters",
    "text_config",
    "partial_rotary_factor",
    "sliding_window",
]


def config_value(rng: random.Random, src: Path) -> str:
    cfg = json.loads((src / "config.json").read_text())
    key = rng.choice(CONFIG_KEYS)
    if rng.random() < 0.15:
        cfg.pop(key, None)
        what = "deleted"
    else:
        cfg[key] = pick(rng)
        what = str(cfg[key])[:40]
    if rng.random() < 0.03:
        cfg = pick(rng)
    (src / "config.json").write_text(dumps(cfg))
    return f"config {key}={what}"


def tokenizer_value(rng: random.Random, src: Path) -> str:
    tj = json.loads((src / "tokenizer.json").read_text())
    model = tj["model"]
    kind = rng.choice(
        [
            "model",
            "vocab",
            "token id",
            "merges",
            "merge",
            "added",
            "added field",
            "pre_tokenizer",
            "normalizer",
            "post_processor",
            "decoder",
            "whole",
            "truncate",
        ]
    )
    if kind == "model":
        tj["model"] = pick(rng)
    elif kind == "vocab":
        model["vocab"] = pick(rng)
    elif kind == "token id":
        model["vocab"][rng.choice(sorted(model["vocab"]))] = rng.choice(
            [-1, 259, 260, 10**6, 2**63, "1", None, 1.0]
        )
    elif kind == "merges":
        model["merges"] = rng.choice(["t h", [1, 2], [["t"]], [["t", "h", "x"]], [" th"], ["th"], pick(rng)])
    elif kind == "merge":
        model["merges"].append(pick(rng))
    elif kind == "added":
        tj["added_tokens"] = pick(rng)
    elif kind == "added field":
        tj["added_tokens"][rng.randrange(len(tj["added_tokens"]))][
            rng.choice(["id", "content", "special"])
        ] = pick(rng)
    elif kind == "post_processor":
        tj[kind] = rng.choice(
            [
                {"type": "TemplateProcessing", "single": [5]},
                {"type": "Sequence", "processors": 5},
                {"type": "TemplateProcessing", "single": [{"SpecialToken": 5}, 1]},
                pick(rng),
            ]
        )
    elif kind == "whole":
        tj = pick(rng)
    elif kind == "truncate":
        text = dumps(tj)
        (src / "tokenizer.json").write_text(text[: rng.randrange(len(text))])
        return "tokenizer.json truncated"
    else:
        tj[kind] = pick(rng)
    (src / "tokenizer.json").write_text(dumps(tj))
    return f"tokenizer.json {kind}"


def tokenizer_config_value(rng: random.Random, src: Path) -> str:
    kind = rng.choice(
        ["chat_template", "bos_token", "eos_token", "add_bos_token", "whole", "jinja", "generation"]
    )
    if kind == "jinja":
        (src / "tokenizer_config.json").write_text("{}")
        (src / "chat_template.jinja").write_bytes(bytes(rng.randrange(256) for _ in range(64)))
        return "chat_template.jinja random bytes"
    if kind == "generation":
        (src / "generation_config.json").write_text(
            dumps({"eos_token_id": pick(rng), "bos_token_id": pick(rng)})
        )
        return "generation_config.json ids"
    tc = json.loads((src / "tokenizer_config.json").read_text())
    if kind == "whole":
        tc = pick(rng)
    else:
        tc[kind] = rng.choice([[{"name": "default", "template": 5}], {"content": 5}, pick(rng)])
    (src / "tokenizer_config.json").write_text(dumps(tc))
    return f"tokenizer_config.json {kind}"


def index_file(rng: random.Random, src: Path) -> str:
    outside = os.path.relpath(src.parent.parent.parent / "outside" / "x.safetensors", src)
    weight_map = rng.choice(
        [
            {"a": "model.safetensors"},
            {"a": outside},
            {"a": "/etc/hostname"},
            {"a": "missing.safetensors"},
            {"a": ""},
            {"a": "."},
            {"a": 5},
            pick(rng),
        ]
    )
    (src / "model.safetensors.index.json").write_text(dumps({"weight_map": weight_map}))
    return f"index weight_map={str(weight_map)[:40]}"


def index_of_the_one_file(rng: random.Random, src: Path) -> str:
    """An index that maps to the checkpoint's own weights file: a change that still converts."""
    (src / "model.safetensors.index.json").write_text(dumps({"weight_map": {"a": "model.safetensors"}}))
    return "index weight_map={'a': 'model.safetensors'}"


def file_kind(rng: random.Random, src: Path) -> str:
    name = rng.choice(
        [
            "model.safetensors",
            "tokenizer.json",
            "config.json",
            "tokenizer_config.json",
            "tokenizer.model",
            "chat_template.jinja",
        ]
    )
    kind = rng.choice(["fifo", "symlink out", "dev zero", "folder", "empty"])
    path = src / name
    if path.exists() or path.is_symlink():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink out":
        path.symlink_to(src.parent.parent.parent / "outside" / "x.safetensors")
    elif kind == "dev zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"")
    return f"{name} is {kind}"


MUTATIONS: list[Callable[[random.Random, Path], str]] = [
    header_field,
    header_field,
    header_structure,
    header_bytes,
    config_value,
    config_value,
    tokenizer_value,
    tokenizer_value,
    tokenizer_config_value,
    index_file,
    file_kind,
]


def mutate(mutation: Callable[[random.Random, Path], str], rng: random.Random, src: Path) -> str:
    try:
        return mutation(rng, src)
    except (
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        AttributeError,
        OSError,
        struct.error,
        RecursionError,
    ):
        return f"{mutation.__name__} skipped (an earlier mutation broke its file)"


# -- running a case ----------------------------------------------------------------------------


@dataclass
class Outcome:
    what: str
    code: int
    stdout: str
    stderr: str
    problem: str = ""


def run_convert(args: list[str]) -> tuple[int, str, str]:
    # A Python warning would reach the real stderr as extra lines; record it as part of the output.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = cli("convert", *args, time_limit=CASE_SECONDS)
        except Hung:
            return -1, "", ""
    noise = "".join(f"{w.category.__name__}: {w.message}\n" for w in caught)
    return result.exit_code, result.stdout, noise + result.stderr


def problem(code: int, stdout: str, stderr: str, output: Path) -> str:
    lines = stderr.strip().splitlines()
    if code == -1:
        return f"hung for more than {CASE_SECONDS}s"
    if not 0 <= code < 128:
        return f"exit {code}"
    if "Traceback" in stderr or "internal error" in stderr:
        return "internal error or traceback"
    if "Warning: " in stderr:
        return "a Python warning on stderr"
    if code == 0:
        return "" if output.is_file() else "exit 0 without an output file"
    if len(lines) != 1 or not lines[0].startswith("llmcli: error: "):
        return f"{len(lines)} lines on stderr for an error"
    if output.exists() or any(p.name.endswith(".partial") for p in output.parent.iterdir()):
        return "an output file was left after an error"
    return ""


def listing(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.lstat().st_size for p in folder.rglob("*")}


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzz_convert(tmp_path, capsys, seed):
    root = tmp_path / "root"
    base = write_tiny_llama(root / "base")
    outside = root / "outside"
    outside.mkdir()
    shutil.copy(base / "model.safetensors", outside / "x.safetensors")
    outside_before = listing(outside)
    around_before = sorted(p.name for p in tmp_path.parent.iterdir())
    cwd = os.getcwd()
    os.chdir(root)
    rng = random.Random(seed)
    outcomes: list[Outcome] = []
    try:
        for i in range(N_CASES):
            case = root / "cases" / f"case{i}"
            src = case / "ckpt"
            shutil.copytree(base, src)
            (case / "out").mkdir()
            n = 1 if rng.random() < 0.7 else rng.randint(2, 3)
            chosen = [rng.choice(MUTATIONS) for _ in range(n)]
            if i == 0:  # one checkpoint that still converts, so that every seed reaches a success
                chosen = [index_of_the_one_file]
            # A FIFO made by file_kind would block the next mutation's own read of that file.
            chosen.sort(key=lambda m: m is file_kind)
            what = "; ".join(mutate(m, rng, src) for m in chosen)
            output = case / "out" / "model.gguf"
            code, stdout, stderr = run_convert([str(src), "-o", str(output), "--name", f"fuzz{i}"])
            outcomes.append(Outcome(what, code, stdout, stderr, problem(code, stdout, stderr, output)))
            shutil.rmtree(case, ignore_errors=True)
    finally:
        os.chdir(cwd)
    if listing(outside) != outside_before:
        outcomes.append(Outcome("the folder next to the checkpoints", 0, "", "", "changed by a conversion"))
    if sorted(p.name for p in tmp_path.parent.iterdir()) != around_before:
        outcomes.append(Outcome("the folder around the temporary root", 0, "", "", "written to"))

    failures = [o for o in outcomes if o.problem]
    counts = Counter(
        "failure" if o.problem else "success" if o.code == 0 else f"clean error (exit {o.code})"
        for o in outcomes[:N_CASES]
    )
    with capsys.disabled():
        print(
            f"\nfuzz convert (seed {seed}): {N_CASES} cases, "
            + ", ".join(f"{k}: {v}" for k, v in sorted(counts.items()))
        )
    assert not failures, f"seed {seed}:\n" + "\n".join(
        f"{o.what} -> {o.problem}: {o.stderr.strip()[:300]}" for o in failures[:20]
    )
    # The generator must reach both sides: conversions that still succeed and inputs that are refused.
    clean = sum(v for k, v in counts.items() if k.startswith("clean"))
    assert_reached({"success": counts["success"], "clean error": clean}, "success", "clean error", seed=seed)
