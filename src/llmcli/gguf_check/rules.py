"""What llama.cpp asserts on, as data: the metadata keys it reads, their types and their ranges.

llama.cpp throws a clean error for a missing key or a key of the wrong type, but it GGML_ASSERTs
(SIGABRT, a gdb backtrace on the terminal) on a number out of range: `block_count` 0 or above
LLAMA_MAX_LAYERS, more experts used than there are, an unknown rope scaling type, a tokenizer with
no vocabulary. And llmcli itself reads these keys (`show`, the KV-cache plan, the chat template),
so a key of the wrong type must fail here, as one line, and never reach Python arithmetic.

Sources: llama.cpp's llama-model.cpp (load_hparams), llama-vocab.cpp (load), llama-arch.cpp (key
names), ggml/src/gguf.cpp (alignment), as vendored by llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmcli.errors import BadModelFile

if TYPE_CHECKING:
    from llmcli.gguf_check.records import GGUFHeader

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
TYPE_NAMES = {
    U8: "uint8",
    I8: "int8",
    U16: "uint16",
    I16: "int16",
    U32: "uint32",
    I32: "int32",
    F32: "float32",
    BOOL: "bool",
    STR: "string",
    ARR: "array",
    U64: "uint64",
    I64: "int64",
    F64: "float64",
}

LLAMA_MAX_LAYERS = 512  # llama-hparams.h
LLAMA_MAX_EXPERTS = 1024
# gguf.cpp only wants a power of two, but llama.cpp maps the data section as a CPU buffer that must
# start on TENSOR_ALIGNMENT (32) bytes: alignment 1, 8 and 16 all end in GGML_ASSERT (ggml-backend.cpp).
MIN_ALIGNMENT = 32
U32_MAX = 2**32 - 1
# Far above any real model, low enough that no product of them overflows what llama.cpp computes in.
MAX_WIDTH = 1 << 20  # embedding and feed-forward lengths
MAX_HEADS = 1 << 14
MAX_CONTEXT = 2**31 - 1  # llama_model_n_ctx_train returns an int32

# tokenizer.ggml.model -> the vocabulary type llama.cpp builds for it (llama_vocab::impl::load).
# "none"/"no_vocab" load, but every tokenize call then asserts: refused as "no vocabulary".
TOKENIZER_MODELS = {
    "llama": "SPM",
    "bert": "WPM",
    "gpt2": "BPE",
    "hybriddna": "BPE",
    "whitespace": "BPE",
    "gemma4": "BPE",
    "t5": "UGM",
    "rwkv": "RWKV",
    "plamo2": "PLAMO2",
}
ROPE_SCALING_TYPES = frozenset({"none", "linear", "yarn", "longrope"})
SPECIAL_TOKEN_KEYS = tuple(
    f"tokenizer.ggml.{name}_token_id"
    for name in (
        "bos",
        "eos",
        "eot",
        "eom",
        "unknown",
        "seperator",
        "padding",
        "cls",
        "mask",
        "prefix",
        "suffix",
        "middle",
        "fim_pre",
        "fim_suf",
        "fim_mid",
        "fim_pad",
        "fim_rep",
        "fim_sep",
    )
)


def _power_of_two(v: int) -> bool:
    return v > 0 and not v & (v - 1)


ARCH_NAME = re.compile(r"[a-z][a-z0-9_.\-]{0,63}")  # every name in llama-arch.cpp; it prefixes key names


def _arch_name(v: str) -> bool:
    return ARCH_NAME.fullmatch(v) is not None


@dataclass(frozen=True)
class KeyRule:
    """One metadata key: the GGUF type llama.cpp requires (it compares types exactly) and its range."""

    key: str  # "{arch}" stands for general.architecture
    type: int  # a scalar type, or ARR with item_types
    item_types: tuple[int, ...] = ()
    low: float | None = None  # inclusive range of the number
    high: float | None = None
    choices: frozenset[str] | None = None
    per_layer: bool = False  # may also be an array of uint32/int32, one item a layer (0 = layer without it)
    required: bool = False  # for a model file (one with general.architecture)
    test: Callable[[Any], bool] | None = None
    expect: str = ""  # what `test` wants, for the message

    def expected(self) -> str:
        kind = (
            f"an array of {' or '.join(TYPE_NAMES[t] for t in self.item_types)}"
            if self.type == ARR
            else _a(TYPE_NAMES[self.type]) + (" (or one per layer)" if self.per_layer else "")
        )
        if self.choices is not None:
            kind += f", one of {', '.join(sorted(self.choices))}"
        elif self.low is not None and self.high not in (None, float("inf")):
            kind += f" in {_number(self.low)}..{_number(self.high)}"
        elif self.low is not None and self.low > float("-inf"):
            kind += f" of at least {_number(self.low)}"
        return kind + (f", {self.expect}" if self.expect else "")


def _a(type_name: str) -> str:
    return ("an " if type_name[0] in "aeio" else "a ") + type_name


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _u32(key: str, low: float = 0, high: float = U32_MAX, **kw: Any) -> KeyRule:
    return KeyRule(key, U32, low=low, high=high, **kw)


def _f32(key: str, low: float = float("-inf"), high: float = float("inf"), **kw: Any) -> KeyRule:
    return KeyRule(key, F32, low=low, high=high, **kw)


KEY_RULES: tuple[KeyRule, ...] = (
    # general.*: gguf.cpp requires alignment as a uint32 power of two; llmcli shows name and file type.
    KeyRule("general.architecture", STR, test=_arch_name, expect="a lowercase name like 'llama'"),
    _u32("general.alignment", MIN_ALIGNMENT, 1 << 16, test=_power_of_two, expect="a power of two"),
    KeyRule("general.name", STR),
    _u32("general.file_type"),
    _u32("general.quantization_version"),
    # {arch}.*: llama_model_base::load_hparams.
    _u32("{arch}.block_count", 1, LLAMA_MAX_LAYERS, required=True),
    _u32("{arch}.context_length", 1, MAX_CONTEXT, required=True),
    _u32("{arch}.embedding_length", 1, MAX_WIDTH, required=True),
    _u32("{arch}.embedding_length_out", 1, MAX_WIDTH),
    _u32("{arch}.feed_forward_length", 0, MAX_WIDTH, per_layer=True),
    _u32("{arch}.expert_feed_forward_length", 1, MAX_WIDTH),
    _u32("{arch}.expert_shared_feed_forward_length", 1, MAX_WIDTH),
    # 0 heads is how recurrent models (Mamba, RWKV) say "no attention": see _heads.
    _u32("{arch}.attention.head_count", 0, MAX_HEADS, per_layer=True),
    _u32("{arch}.attention.head_count_kv", 1, MAX_HEADS, per_layer=True),
    _u32("{arch}.attention.key_length", 1, MAX_WIDTH),
    _u32("{arch}.attention.value_length", 1, MAX_WIDTH),
    _f32("{arch}.attention.layer_norm_epsilon", 0),
    _f32("{arch}.attention.layer_norm_rms_epsilon", 0),
    KeyRule("{arch}.attention.causal", BOOL),
    _u32("{arch}.attention.sliding_window"),
    _u32("{arch}.rope.dimension_count", 1, MAX_WIDTH),
    _f32("{arch}.rope.freq_base", 0),
    KeyRule("{arch}.rope.scaling.type", STR, choices=ROPE_SCALING_TYPES),
    _f32("{arch}.rope.scaling.factor", 0),
    _u32("{arch}.rope.scaling.original_context_length", 1, MAX_CONTEXT),
    _u32("{arch}.expert_count", 0, LLAMA_MAX_EXPERTS),
    _u32("{arch}.expert_used_count", 0, LLAMA_MAX_EXPERTS, per_layer=True),
    _u32("{arch}.expert_shared_count", 0, LLAMA_MAX_EXPERTS),
    _u32("{arch}.expert_group_count", 0, LLAMA_MAX_EXPERTS),
    _u32("{arch}.expert_group_used_count", 0, LLAMA_MAX_EXPERTS),
    _u32("{arch}.nextn_predict_layers", 0, LLAMA_MAX_LAYERS),
    _u32("{arch}.leading_dense_block_count", 0, LLAMA_MAX_LAYERS),
    _u32("{arch}.vocab_size", 1, U32_MAX),
    _u32("{arch}.pooling_type", 0, 8),
    # tokenizer.*: llama_vocab::impl::load; the chat template is text llmcli renders.
    KeyRule("tokenizer.ggml.model", STR, choices=frozenset(TOKENIZER_MODELS), required=True),
    KeyRule("tokenizer.ggml.pre", STR),
    KeyRule("tokenizer.ggml.tokens", ARR, (STR,), required=True),
    KeyRule("tokenizer.ggml.scores", ARR, (F32, I32)),
    KeyRule("tokenizer.ggml.token_type", ARR, (I32,)),
    KeyRule("tokenizer.ggml.merges", ARR, (STR,)),
    KeyRule("tokenizer.ggml.precompiled_charsmap", ARR, (U8, I8)),
    _u32("tokenizer.ggml.token_type_count"),
    *(_u32(key) for key in SPECIAL_TOKEN_KEYS),  # in range of the vocabulary: see _vocabulary
    *(
        KeyRule(f"tokenizer.ggml.{flag}", BOOL)
        for flag in (
            "add_bos_token",
            "add_eos_token",
            "add_sep_token",
            "add_space_prefix",
            "remove_extra_whitespaces",
        )
    ),
    KeyRule("tokenizer.chat_template", STR),
    # split.*: gguf-split writes these; llmcli reads them to know a file holds part of the layers.
    KeyRule("split.no", U16, low=0, high=65535),
    KeyRule("split.count", U16, low=1, high=65535),
)


def _type_of(header: GGUFHeader, key: str) -> tuple[int, int | None]:
    value = header.metadata[key]
    return header.types[key], getattr(value, "item_type", None)


def _type_name(gguf_type: int | None) -> str:
    return "?" if gguf_type is None else TYPE_NAMES.get(gguf_type, "?")


def _check_rule(rule: KeyRule, key: str, header: GGUFHeader) -> str | None:
    """What is wrong with one present key, or None."""
    vtype, item_type = _type_of(header, key)
    value = header.metadata[key]
    if rule.per_layer and vtype == ARR and item_type in (U32, I32):
        items = value.items or ()  # None past KEEP_ARRAY_ITEMS, already more layers than llama.cpp allows
        if not items or min(items) < 0 or max(items) > rule.high or max(items) < rule.low:
            shown = list(items)[:8] if items else f"an array of {value.count}"
            return f"{key} is {shown}, expected {rule.expected()}"
        return None
    if vtype != rule.type or (rule.type == ARR and item_type not in rule.item_types):
        got = f"an array of {_type_name(item_type)}" if vtype == ARR else _a(_type_name(vtype))
        return f"{key} is {got}, expected {rule.expected()}"
    if rule.choices is not None and value not in rule.choices:
        return f"{key} is {value[:40]!r}, expected {rule.expected()}"
    if rule.low is not None and not rule.low <= value <= rule.high:  # NaN fails here too
        return f"{key} is {value}, expected {rule.expected()}"
    if rule.test is not None and not rule.test(value):
        return f"{key} is {value!r:.60}, expected {rule.expected()}"
    return None


def check_keys(header: GGUFHeader, fail: Callable[[str], BadModelFile]) -> str | None:
    """Raise fail(what) for the first key of the wrong type or range, or a required key missing.
    Returns the model's architecture when the file is a model whose keys the checks across keys
    may read (None: not a model, or a later split part, which carries no metadata)."""
    md = header.metadata
    arch = md.get("general.architecture")
    arch = arch if isinstance(arch, str) else None
    is_model = arch is not None and not md.get("split.no")  # later split parts carry no metadata
    for rule in KEY_RULES:
        if "{arch}" in rule.key and arch is None:
            continue
        key = rule.key.format(arch=arch)
        if key not in md:
            if rule.required and is_model:
                raise fail(f"{key} is missing, expected {rule.expected()}")
            continue
        if (problem := _check_rule(rule, key, header)) is not None:
            raise fail(problem)
    return arch if is_model else None
