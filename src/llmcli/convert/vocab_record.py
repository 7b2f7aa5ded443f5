"""The vocabulary a conversion writes, as records: what vocab.py and spm_json.py read a tokenizer into,
and what vocab_verify.py checks by behaviour, each importing it from here rather than from the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# gguf.TokenType values, repeated here so that planning needs no gguf import.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# The score of a token added on top of a SentencePiece model: added tokens match before the model
# runs, as in the GGUFs llama.cpp's converter writes from a tokenizer.model.
ADDED_SCORE = -1000.0


@dataclass(frozen=True)
class PreCheck:
    """How the pre-tokenizer written to the GGUF was chosen."""

    pre: str  # tokenizer.ggml.pre
    verified_by: str  # "definition" (matched the table exactly) or "behaviour" (identical ids on the corpus)
    check_strings: int = 0  # corpus strings tokenized, for "behaviour"
    check_tokens: int = 0  # ids compared, for "behaviour"
    corpus: str = ""  # the corpus fingerprint, for "behaviour"
    tried: tuple[str, ...] = ()  # candidates tried before the one chosen, in order

    def describe(self) -> str:
        if self.verified_by == "definition":
            return f"{self.pre}, its definition matches exactly"
        rejected = f"; {', '.join(self.tried)} differed" if self.tried else ""
        return (
            f"{self.pre}, verified by behaviour: identical ids on {self.check_strings} check strings "
            f"({self.check_tokens} tokens, corpus {self.corpus}){rejected}"
        )


# Keys some gguf-py versions have no adder for, written by name.
NORMALIZER_KEYS = {
    "add_sep": "tokenizer.ggml.add_sep_token",
    "lowercase": "tokenizer.ggml.normalizer.lowercase",
    "strip_accents": "tokenizer.ggml.normalizer.strip_accents",
}

# Written when the pre-tokenizer was chosen by behaviour: which one, and on what it was verified.
PRE_CHECK_KEY = "llmcli.tokenizer.pre_check"


@dataclass
class Vocab:
    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str | None  # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    scores: list[float] | None = None
    merges: list[str] = field(default_factory=list)
    special: dict[str, int] = field(default_factory=dict)  # bos/eos/unk/pad/eot/sep/mask -> id
    add_bos: bool | None = None
    add_eos: bool | None = None
    add_space_prefix: bool | None = None
    add_sep: bool | None = None  # WordPiece: [SEP] after the text
    # WordPiece: BertNormalizer's switches ("lowercase", "strip_accents"), as llama.cpp's WPM reads them.
    normalizer: dict[str, bool] = field(default_factory=dict)
    chat_template: str | None = None
    n_padding: int = 0  # rows of the embedding beyond the tokenizer
    # When the pre-tokenizer definition matched no known one exactly: the names to verify by
    # behaviour, nearest first, and the parsed tokenizer.json to verify against (pre is None until then).
    pre_candidates: tuple[str, ...] = ()
    hf_json: dict | None = field(default=None, repr=False)
    pre_check: PreCheck | None = None  # how `pre` was chosen (byte-level BPE only)

    def write(self, writer: Any) -> None:
        """Add this vocabulary's keys to a gguf.GGUFWriter."""
        writer.add_tokenizer_model(self.model)
        if self.pre is not None:
            writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.types)
        if self.scores is not None:
            writer.add_token_scores(self.scores)
        if self.merges:
            writer.add_token_merges(self.merges)
        adders = {
            "bos": writer.add_bos_token_id,
            "eos": writer.add_eos_token_id,
            "unk": writer.add_unk_token_id,
            "pad": writer.add_pad_token_id,
            "eot": writer.add_eot_token_id,
            "sep": writer.add_sep_token_id,
            "mask": writer.add_mask_token_id,
        }
        for kind, tid in self.special.items():
            adders[kind](tid)
        if self.add_bos is not None:
            writer.add_add_bos_token(self.add_bos)
        if self.add_eos is not None:
            writer.add_add_eos_token(self.add_eos)
        if self.add_sep is not None:
            writer.add_bool(NORMALIZER_KEYS["add_sep"], self.add_sep)
        for name, value in self.normalizer.items():
            writer.add_bool(NORMALIZER_KEYS[name], value)
        if self.add_space_prefix is not None:
            writer.add_add_space_prefix(self.add_space_prefix)
        if self.chat_template:
            writer.add_chat_template(self.chat_template)
        if self.pre_check is not None and self.pre_check.verified_by == "behaviour":
            writer.add_string(PRE_CHECK_KEY, self.pre_check.describe())


def sentencepiece(
    tokens: list[str], types: list[int], scores: list[float], added: list[dict], add_space_prefix: bool
) -> Vocab:
    """A SentencePiece vocabulary (llama.cpp's "llama"), with the tokens added on top of the model
    (chat markers; a special one is a control token): from a tokenizer.model or a tokenizer.json."""
    for t in added:
        tid = t["id"]
        tokens[tid], scores[tid] = t["content"], ADDED_SCORE
        types[tid] = CONTROL if t.get("special") else USER_DEFINED
    vocab = Vocab("llama", "default", tokens, types, scores, add_space_prefix=add_space_prefix)
    vocab.n_padding = types.count(UNUSED)  # the embedding's rows beyond the tokenizer
    return vocab
