"""A SentencePiece tokenizer saved as tokenizer.json only -> llama.cpp's SentencePiece vocabulary.

transformers 5 saves a SentencePiece tokenizer (Gemma's) as tokenizer.json alone: a BPE model with
byte fallback, whose normalizer turns spaces into "▁", and no tokenizer.model. llama.cpp runs such
a vocabulary with its SentencePiece tokenizer ("llama"), which merges the adjacent pair whose
concatenation is the highest-scoring token. HF's BPE merges the pair that comes first in its
merge list. So each token's score is minus the rank of the first merge that makes it: the two
choose the same pair, and the GGUF tokenizes as the HF tokenizer does.

Only forms whose splitting llama.cpp reproduces are accepted; each is a row of `FORMS`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.convert.errors import BadCheckpoint, shown
from llmcli.convert.pretokenizers import signature
from llmcli.convert.vocab_checks import checked_tokens
from llmcli.convert.vocab_record import BYTE, NORMAL, UNUSED, sentencepiece

BYTE_TOKEN = re.compile(r"<0x[0-9A-F]{2}>")
MAX_MERGES = 1 << 24


@dataclass(frozen=True)
class SpmJsonForm:
    name: str
    normalizer: Any  # the tokenizer.json "normalizer" this form has
    pre_tokenizers: tuple[Any, ...]  # the "pre_tokenizer" values that leave its text whole
    add_space_prefix: bool  # tokenizer.ggml.add_space_prefix


_SPACE_TO_META = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
# After the normalizer has replaced every space, splitting on spaces is a no-op.
_SPLIT_ON_SPACE = {
    "type": "Split",
    "pattern": {"String": " "},
    "behavior": "MergedWithPrevious",
    "invert": False,
}

FORMS: tuple[SpmJsonForm, ...] = (
    # Gemma 2/3: spaces become "▁", no dummy prefix, the whole text goes to BPE.
    SpmJsonForm("gemma", _SPACE_TO_META, (None, _SPLIT_ON_SPACE), add_space_prefix=False),
)


def recognise(tj: dict) -> SpmJsonForm | None:
    """The FORMS row this tokenizer.json is (a byte-fallback BPE split as one text), or None."""
    model = tj.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE" or model.get("byte_fallback") is not True:
        return None
    try:
        norm, pre = signature(tj.get("normalizer")), signature(tj.get("pre_tokenizer"))
    except RecursionError:
        return None
    for form in FORMS:
        if norm == signature(form.normalizer) and any(pre == signature(p) for p in form.pre_tokenizers):
            return form
    return None


def _merge_pairs(raw: Any, where: str) -> list[tuple[str, str]]:
    if raw is None:  # a BPE without merges: characters (and bytes) only
        return []
    if not isinstance(raw, list) or len(raw) > MAX_MERGES:
        raise BadCheckpoint(f"{where}: model.merges must be a list; download the tokenizer again")
    pairs = []
    for m in raw:
        pair = m.split(" ") if isinstance(m, str) else m
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
            raise BadCheckpoint(
                f"{where}: merge {shown(repr(m))} is not a pair of pieces; download the tokenizer again"
            )
        pairs.append((pair[0], pair[1]))
    return pairs


def spm_vocab_from_json(src: Path, tj: dict, form: SpmJsonForm, n_rows: int):
    """The Vocab (model "llama") of a tokenizer.json of a recognised form, with `n_rows` tokens."""
    where = f"{src.name}/tokenizer.json"
    model = tj["model"]
    vocab_map, added = checked_tokens(tj, n_rows, where)
    # llama.cpp's SentencePiece tokenizer looks up "<0xXX>" for every byte it cannot merge and has
    # no answer if one is missing; a byte-fallback vocabulary has all 256.
    n_bytes = sum(1 for text in vocab_map if BYTE_TOKEN.fullmatch(text))
    if n_bytes != 256:
        raise BadCheckpoint(
            f"{where} uses byte fallback but has {n_bytes} of the 256 byte tokens <0x00>..<0xFF>; "
            "download the tokenizer again"
        )

    merges = _merge_pairs(model.get("merges"), where)
    first_rank: dict[str, int] = {}
    for rank, (a, b) in enumerate(merges):
        if a not in vocab_map or b not in vocab_map or a + b not in vocab_map:
            raise BadCheckpoint(
                f"{where}: merge {shown(repr(a + ' ' + b))} joins pieces that are not in the "
                "vocabulary; download the tokenizer again"
            )
        first_rank.setdefault(a + b, rank)
    unmade = float(-len(merges) - 1)  # single characters: the starting pieces, never a merge's result

    tokens = [f"[PAD{i}]" for i in range(n_rows)]
    scores = [0.0] * n_rows
    types = [UNUSED] * n_rows
    for text, tid in vocab_map.items():
        tokens[tid] = text
        if BYTE_TOKEN.fullmatch(text):
            types[tid] = BYTE
        else:
            types[tid] = NORMAL
            scores[tid] = -float(first_rank[text]) if text in first_rank else unmade
    return sentencepiece(tokens, types, scores, added, form.add_space_prefix)
