"""Which llama.cpp pre-tokenizer splits text as a Hugging Face tokenizer.json does.

llama.cpp does not run the tokenizer.json pre-tokenizer: it has a fixed set of splitting rules,
chosen by the `tokenizer.ggml.pre` name. A wrong name gives a model that loads and then sees
different tokens than it was trained on. So the name is recognised from the tokenizer's own
pre-tokenizer definition, compared exactly against this table. A definition that matches no row
exactly gets the rows ranked by nearness (`candidates`), and vocab_verify.py accepts one only if
llama.cpp and Hugging Face give identical ids on a check corpus.

Each row is data: the llama.cpp name and the tokenizer.json parts that llama.cpp reproduces.
The same rows let `export` write a tokenizer.json back from a GGUF.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

# The regexes exactly as the tokenizers library stores them in tokenizer.json.
LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _split(regex: str) -> dict[str, Any]:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _byte_level(use_regex: bool) -> dict[str, Any]:
    return {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": use_regex}


@dataclass(frozen=True)
class PreTokenizer:
    name: str  # tokenizer.ggml.pre
    definition: dict[str, Any]  # the tokenizer.json "pre_tokenizer" that llama.cpp's rules match
    # llama.cpp's BPE for some pre-types takes a whole word that is in the vocab without merging
    # (HF's `ignore_merges`); the HF tokenizer must do the same or ids differ.
    ignore_merges: bool = False
    example: str = ""


PRE_TOKENIZERS: tuple[PreTokenizer, ...] = (
    PreTokenizer(
        "llama-bpe",
        {"type": "Sequence", "pretokenizers": [_split(LLAMA3_REGEX), _byte_level(False)]},
        ignore_merges=True,
        example="Llama 3",
    ),
    PreTokenizer(
        "qwen2",
        {"type": "Sequence", "pretokenizers": [_split(QWEN2_REGEX), _byte_level(False)]},
        example="Qwen2.5, Qwen3",
    ),
    PreTokenizer(
        "smollm",
        {
            "type": "Sequence",
            "pretokenizers": [{"type": "Digits", "individual_digits": True}, _byte_level(True)],
        },
        example="SmolLM, StarCoder",
    ),
    PreTokenizer("gpt-2", _byte_level(True), example="GPT-2, Phi-2"),
)

# Normalizers that leave byte-level BPE input unchanged for text as people type it. Qwen2 ships NFC:
# llama.cpp skips it, which only matters for text that is not already NFC.
HARMLESS_NORMALIZERS = (None, {"type": "NFC"})


def signature(node: Any) -> Any:
    """The parts of a pre-tokenizer definition that change how text is split (not offsets)."""
    if node is None:
        return None
    if not isinstance(node, dict):
        return ("?", repr(node))
    kind = node.get("type")
    if kind == "Sequence":
        return ("Sequence", tuple(signature(p) for p in node.get("pretokenizers") or ()))
    if kind == "ByteLevel":
        return ("ByteLevel", bool(node.get("add_prefix_space", True)), bool(node.get("use_regex", True)))
    if kind == "Split":
        pattern = node.get("pattern") or {}
        return (
            "Split",
            tuple(sorted(pattern.items())),
            node.get("behavior"),
            bool(node.get("invert", False)),
        )
    if kind == "Digits":
        return ("Digits", bool(node.get("individual_digits", False)))
    return (kind, tuple(sorted((k, repr(v)) for k, v in node.items() if k != "type")))


def recognise(pre_tokenizer: Any, normalizer: Any, ignore_merges: bool) -> PreTokenizer | None:
    """The table row whose definition matches this tokenizer.json exactly, or None."""
    try:
        if normalizer not in HARMLESS_NORMALIZERS:
            return None
        sig = signature(pre_tokenizer)
    except RecursionError:  # nested beyond any real tokenizer: not one llama.cpp reproduces
        return None
    for row in PRE_TOKENIZERS:
        if signature(row.definition) == sig and row.ignore_merges == bool(ignore_merges):
            return row
    return None


def candidates(pre_tokenizer: Any, normalizer: Any, ignore_merges: bool) -> list[PreTokenizer]:
    """Every row, nearest definition first, for a definition `recognise` did not match exactly.

    Nearness is the similarity of the signatures' text (regexes included), with `ignore_merges`
    breaking ties: cheap, and only an order to try them in, as behaviour decides.
    """
    try:
        sig = repr((signature(pre_tokenizer), normalizer))
    except RecursionError:
        return []

    def nearness(row: PreTokenizer) -> tuple[float, bool]:
        row_sig = repr((signature(row.definition), normalizer))
        return difflib.SequenceMatcher(None, sig, row_sig).ratio(), row.ignore_merges == bool(ignore_merges)

    return sorted(PRE_TOKENIZERS, key=nearness, reverse=True)


def by_name(name: str) -> PreTokenizer | None:
    return next((row for row in PRE_TOKENIZERS if row.name == name), None)


def supported() -> str:
    return ", ".join(f"{row.name} ({row.example})" for row in PRE_TOKENIZERS)
