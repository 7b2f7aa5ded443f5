"""BERT's WordPiece tokenizer (tokenizer.json with a WordPiece model) as llama.cpp's `bert` vocabulary.

llama.cpp's WPM tokenizer keeps its tokens in "phantom space" form: a word-initial piece is written
with a leading U+2581, a continuation ("##ing") without its "##". So the token list is rewritten that
way, and the normalizer's two switches are written as keys. llama.cpp's WPM itself differs from BERT's
on combining marks, Hangul and words over 100 characters, so llmcli embeds with its own WordPiece
(engine/wordpiece.py) over this vocabulary, verified by behaviour (vocab_verify.verify_wordpiece): it
must give the Hugging Face ids on the whole check corpus, or the tokenizer is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from llmcli.convert.errors import UnsupportedTokenizer, shown
from llmcli.convert.vocab_checks import checked_tokens
from llmcli.convert.vocab_record import CONTROL, NORMAL, UNUSED, Vocab
from llmcli.engine.wordpiece import MAX_WORD_CHARS

PHANTOM_SPACE = "\u2581"
CONTINUATION = "##"

# The tokenizer.json parts llama.cpp's WPM reproduces: anything else is refused before the check.
NORMALIZERS = ("BertNormalizer",)
PRE_TOKENIZERS = ("BertPreTokenizer",)


def is_wordpiece(tokenizer_json: dict | None) -> bool:
    model = (tokenizer_json or {}).get("model")
    return isinstance(model, dict) and model.get("type") == "WordPiece"


def wordpiece_vocab(src: Path, tj: dict, n_rows: int) -> Vocab:
    where = f"{src.name}/tokenizer.json"
    model = tj["model"]
    normalizer: dict = given if isinstance(given := tj.get("normalizer"), dict) else {}
    pre: dict = given if isinstance(given := tj.get("pre_tokenizer"), dict) else {}
    if normalizer.get("type") not in NORMALIZERS or pre.get("type") not in PRE_TOKENIZERS:
        raise UnsupportedTokenizer(
            f"{where} is WordPiece with normalizer {shown(repr(normalizer.get('type')))} and pre-tokenizer "
            f"{shown(repr(pre.get('type')))}; llmcli reproduces BERT's only "
            "(BertNormalizer, BertPreTokenizer)"
        )
    if model.get("continuing_subword_prefix", CONTINUATION) != CONTINUATION:
        raise UnsupportedTokenizer(
            f"{where}: WordPiece continuation prefix is not '##', which llmcli's WordPiece assumes"
        )
    if model.get("max_input_chars_per_word", MAX_WORD_CHARS) != MAX_WORD_CHARS:
        raise UnsupportedTokenizer(
            f"{where}: max_input_chars_per_word is not {MAX_WORD_CHARS}, the one llmcli's WordPiece uses"
        )
    vocab_map, added = checked_tokens(tj, n_rows, where)
    tokens: list[str | None] = [None] * n_rows
    types = [UNUSED] * n_rows
    special = {t["id"] for t in added if t.get("special")}
    for text, tid in vocab_map.items():
        tokens[tid], types[tid] = text, NORMAL
    for t in added:
        tokens[t["id"]], types[t["id"]] = t["content"], NORMAL
    for tid in special:
        types[tid] = CONTROL
    lowercase = normalizer.get("lowercase", True) is True
    strip = normalizer.get("strip_accents")
    return Vocab(
        model="bert",
        pre="default",
        tokens=[
            f"[PAD{i}]" if tok is None else phantom(tok, types[i] == CONTROL) for i, tok in enumerate(tokens)
        ],
        types=types,
        n_padding=tokens.count(None),
        # BertNormalizer strips accents when lowercasing unless told otherwise; so does llama.cpp.
        normalizer={"lowercase": lowercase, "strip_accents": lowercase if strip is None else strip is True},
        hf_json=tj,
    )


def phantom(token: str, control: bool) -> str:
    """A WordPiece token as llama.cpp's WPM tokenizer looks it up."""
    if control:
        return token
    if token.startswith(CONTINUATION):
        return token[len(CONTINUATION) :]
    return PHANTOM_SPACE + token


def special_tokens(vocab: Vocab, config: dict, tj: dict) -> None:
    """[CLS] (as bos), [SEP], [MASK], and whether the post-processor wraps a sequence in them."""
    ids = {text: i for i, text in enumerate(vocab.tokens) if vocab.types[i] == CONTROL}
    for kind, default in (("cls", "[CLS]"), ("sep", "[SEP]"), ("mask", "[MASK]")):
        entry = config.get(f"{kind}_token", default)
        text = entry.get("content") if isinstance(entry, dict) else entry
        if isinstance(text, str) and text in ids:
            vocab.special["bos" if kind == "cls" else kind] = ids[text]
    single = _single_template(tj)
    first, last = (single[0], single[-1]) if single else (None, None)
    vocab.add_bos = first is not None and first == _text(vocab, "bos")
    vocab.add_sep = last is not None and last == _text(vocab, "sep")
    vocab.add_eos = False


def _text(vocab: Vocab, kind: str) -> str | None:
    return vocab.tokens[vocab.special[kind]] if kind in vocab.special else None


def _single_template(tj: dict) -> list[Any]:
    """The special-token ids of the post-processor's single-sequence template, in order (None for $A)."""
    post = tj.get("post_processor")
    if not isinstance(post, dict):
        return []
    if post.get("type") == "BertProcessing":  # older tokenizer.json: {"cls": [text, id], "sep": [...]}
        cls, sep = post.get("cls"), post.get("sep")
        return [
            cls[0] if isinstance(cls, list) and cls else None,
            None,
            sep[0] if isinstance(sep, list) and sep else None,
        ]
    steps = post.get("single") if post.get("type") == "TemplateProcessing" else None
    out = []
    for step in steps if isinstance(steps, list) else []:
        token = step.get("SpecialToken") if isinstance(step, dict) else None
        out.append(token.get("id") if isinstance(token, dict) else None)
    return out
