"""Real vocabularies for the tokenizer tests: llama.cpp's own ggml-vocab-*.gguf files, as tokenizer.json.

llama.cpp keeps the vocabularies of many model families (Qwen2, Llama 3, GPT-2, StarCoder, Command-R...)
in its repository under models/ for its tokenizer tests, and the llama-cpp-python sdist on PyPI
vendors them. The sdist of the installed version is downloaded once (as tests/assets.py downloads its
wheels; PyPI is the registry these machines reach) and the files are read straight out of it into
models/.test-cache. Each one becomes a tokenizer.json with the family's pre-tokenizer definition.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from llmcli.convert import pretokenizers
from tests.assets import CACHE

CONTROL, USER_DEFINED = 3, 4

# The GPT-2 split rule, as `ByteLevel(use_regex=True)` applies it, written out as a Split.
GPT2_REGEX = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"


def _split(regex: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _byte_level(use_regex: bool) -> dict[str, Any]:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


# Definitions that split as a table row does but are written differently, so that recognise() misses them.
GPT2_AS_SPLIT = {"type": "Sequence", "pretokenizers": [_split(GPT2_REGEX), _byte_level(False)]}
DIGITS_AS_SPLIT = {"type": "Sequence", "pretokenizers": [_split(r"\p{N}"), _byte_level(True)]}
# Llama 3's regex with its case-insensitive contraction group spelled out in character classes.
LLAMA3_SPELLED_OUT = {
    "type": "Sequence",
    "pretokenizers": [
        _split(
            pretokenizers.LLAMA3_REGEX.replace(
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)", "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]"
            )
        ),
        _byte_level(False),
    ],
}

# ggml-vocab name -> (the table row its tokenizer.json definition is, a behaviour-preserving rewrite of
# that definition as (pre_tokenizer, ignore_merges), or None to keep the row's own with ignore_merges
# flipped).
REAL_VOCABS: dict[str, tuple[str, dict | None]] = {
    "qwen2": ("qwen2", None),  # ignore_merges: true, as transformers writes it from tiktoken
    "llama-bpe": ("llama-bpe", LLAMA3_SPELLED_OUT),
    "gpt-2": ("gpt-2", GPT2_AS_SPLIT),
    "mpt": ("gpt-2", GPT2_AS_SPLIT),
    "gpt-neox": ("gpt-2", GPT2_AS_SPLIT),
    "starcoder": ("smollm", DIGITS_AS_SPLIT),
    "refact": ("smollm", DIGITS_AS_SPLIT),
    "command-r": ("smollm", DIGITS_AS_SPLIT),
}

PAD = re.compile(r"\[PAD\d+\]")


def _sdist() -> Path:
    dest = CACHE / "sdist"
    wanted = f"llama_cpp_python-{version('llama-cpp-python')}.tar.gz"
    if not (dest / wanted).is_file():
        dest.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(dest),
                f"llama-cpp-python=={version('llama-cpp-python')}",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not (dest / wanted).is_file():
            raise RuntimeError(
                f"pip download of the llama-cpp-python sdist failed: {done.stderr.strip()[-500:]}"
            )
    return dest / wanted


def vocab_gguf(name: str) -> Path:
    """llama.cpp's models/ggml-vocab-{name}.gguf, from the llama-cpp-python sdist of the installed version."""
    target = CACHE / "vocab" / f"ggml-vocab-{name}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(_sdist()) as tar:
        member = next(
            m for m in tar.getmembers() if m.name.endswith(f"/vendor/llama.cpp/models/{target.name}")
        )
        src = tar.extractfile(member)
        assert src is not None
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(src.read())
        os.replace(tmp, target)
    return target


def tokenizer_json(name: str, pre_tokenizer: dict, ignore_merges: bool) -> dict:
    """A tokenizer.json with the real vocabulary and merges of ggml-vocab-{name}.gguf.

    Tokens typed control or user-defined become added tokens; llama.cpp's [PADn] rows (Qwen pads its
    embedding) are left out, as they are rows past the tokenizer.
    """
    kv = read_metadata(vocab_gguf(name))
    tokens, merges, types = (
        kv["tokenizer.ggml.tokens"],
        kv["tokenizer.ggml.merges"],
        kv["tokenizer.ggml.token_type"],
    )
    kept = [i for i, t in enumerate(tokens) if not (PAD.fullmatch(t) and types[i] != 1)]
    assert kept == list(range(len(kept))), f"{name}: padding rows are not all at the end"
    added = [
        {
            "id": i,
            "content": tokens[i],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": types[i] == CONTROL,
        }
        for i in kept
        if types[i] in (CONTROL, USER_DEFINED)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "NFC"} if name.startswith("qwen") else None,
        "pre_tokenizer": copy.deepcopy(pre_tokenizer),
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": ignore_merges,
            "vocab": {tokens[i]: i for i in kept},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }


SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


@functools.cache  # each test reads a vocabulary two or three times; callers only read the result
def read_metadata(path: Path) -> dict[str, Any]:
    """A GGUF's key/values. gguf.GGUFReader builds a numpy view per array item (40 s for Qwen's
    151k tokens); these trusted test files are read directly (GGUF v2/v3 layout)."""
    data = path.read_bytes()
    pos = 0

    def take(fmt: str) -> Any:
        nonlocal pos
        (value,) = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize(fmt)
        return value

    def string() -> str:
        nonlocal pos
        n = take("Q")
        pos += n
        return data[pos - n : pos].decode("utf-8")

    def value(vtype: int) -> Any:
        if vtype == 8:
            return string()
        if vtype == 9:
            item_type, count = take("I"), take("Q")
            return [value(item_type) for _ in range(count)]
        return take(SCALARS[vtype])

    magic, gguf_version, _n_tensors, n_kv = take("4s"), take("I"), take("Q"), take("Q")
    if magic != b"GGUF" or gguf_version not in (2, 3):
        raise ValueError(f"{path} is not a GGUF v2/v3 file")
    return {string(): value(take("I")) for _ in range(n_kv)}


def exact_and_rewritten(name: str) -> tuple[str, dict, dict]:
    """(row name, tokenizer.json with the row's exact definition, one with a behaviour-preserving rewrite)."""
    row_name, rewrite = REAL_VOCABS[name]
    row = pretokenizers.by_name(row_name)
    assert row is not None
    exact = tokenizer_json(name, row.definition, row.ignore_merges)
    if rewrite is None:
        changed = tokenizer_json(name, row.definition, not row.ignore_merges)
    else:
        changed = tokenizer_json(name, rewrite, row.ignore_merges)
    return row_name, exact, changed


def write_tokenizer(folder: Path, tj: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    return folder
