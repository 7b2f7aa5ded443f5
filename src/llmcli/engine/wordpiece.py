"""BERT's WordPiece tokenizer, exactly as Hugging Face's `tokenizers` runs it (BertNormalizer,
BertPreTokenizer, WordPiece), in plain Python.

llama.cpp's WPM tokenizer is close but not the same: it strips every combining mark where BERT strips
only the nonspacing ones (Devanagari's vowel signs are spacing marks, which BERT keeps), it does not
decompose Hangul syllables into jamo as BERT's NFD does, and it has no limit on a word's length (BERT
gives a word over 100 characters one [UNK]). On the check corpus a quarter of the Indic, Korean and
keycap-emoji strings came out different. So an embedding model with a WordPiece vocabulary is
tokenized here, from the GGUF's own vocabulary and normalizer switches, and convert verifies this
tokenizer against Hugging Face's on the check corpus before it writes the file.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

PHANTOM_SPACE = "\u2581"  # how llama.cpp's bert vocabulary marks a word-initial piece
CONTINUATION = "##"
MAX_WORD_CHARS = 100  # tokenizers' default max_input_chars_per_word, which BERT checkpoints keep

# tokenizers' is_chinese_char: the CJK ideograph blocks BERT splits one character at a time.
CJK = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B920, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)
# Rust's char::is_whitespace (the White_Space property), which tokenizers uses; Python's isspace()
# also counts U+001C..U+001F, control characters that BERT drops instead.
WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)
OTHER = ("Cc", "Cf", "Cs", "Co", "Cn")  # Rust's char::is_other: what clean_text drops
ASCII_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _is_cjk(cp: int) -> bool:
    return any(low <= cp <= high for low, high in CJK)


class WordPiece:
    def __init__(
        self,
        pieces: Sequence[str],
        unk_id: int,
        *,
        lowercase: bool = True,
        strip_accents: bool | None = None,
        max_word_chars: int = MAX_WORD_CHARS,
        specials: dict[str, int] | None = None,
    ) -> None:
        """`pieces`: the vocabulary in llama.cpp's form (a word-initial piece after U+2581, a
        continuation bare, a control token as it is), index = id. `specials`: the control tokens
        ([CLS], [SEP], [MASK]...), which Hugging Face matches in the raw text before anything else."""
        self.words: dict[str, int] = {}
        self.rest: dict[str, int] = {}
        for tid, piece in enumerate(pieces):
            if piece.startswith(PHANTOM_SPACE):
                self.words.setdefault(piece[1:], tid)
            else:
                self.rest.setdefault(piece, tid)
        self.unk_id = unk_id
        self.lowercase = lowercase
        self.strip_accents = lowercase if strip_accents is None else strip_accents
        self.max_word_chars = max_word_chars
        self.specials = specials or {}
        self._split_specials = (
            re.compile("(" + "|".join(map(re.escape, sorted(self.specials, key=len, reverse=True))) + ")")
            if self.specials
            else None
        )

    @classmethod
    def from_hf(cls, tokenizer_json: dict) -> WordPiece:
        """From a tokenizer.json with a WordPiece model ("##" continuations) and a BertNormalizer."""
        model, normalizer = tokenizer_json["model"], tokenizer_json.get("normalizer") or {}
        vocab: dict[str, int] = model["vocab"]
        pieces = [""] * (max(vocab.values()) + 1)
        for text, tid in vocab.items():
            pieces[tid] = text[2:] if text.startswith(CONTINUATION) else PHANTOM_SPACE + text
        specials = {t["content"]: t["id"] for t in tokenizer_json.get("added_tokens", []) if t.get("special")}
        for text, tid in specials.items():
            pieces[tid] = text
        return cls(
            pieces,
            vocab.get(model.get("unk_token", "[UNK]"), 0),
            lowercase=normalizer.get("lowercase", True),
            strip_accents=normalizer.get("strip_accents"),
            specials=specials,
        )

    def normalize(self, text: str) -> str:
        """BertNormalizer: clean_text, handle_chinese_chars, strip_accents, lowercase, in that order."""
        out = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD or (ch not in "\t\n\r" and unicodedata.category(ch) in OTHER):
                continue
            if ch in WHITESPACE:
                out.append(" ")
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        text = "".join(out)
        if self.strip_accents:
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        # Character by character, as tokenizers does: str.lower() would make a word's last sigma final (ς).
        return "".join(c.lower() for c in text) if self.lowercase else text

    @staticmethod
    def split(text: str) -> list[str]:
        """BertPreTokenizer: whitespace separates words, each punctuation character is a word alone."""
        words: list[str] = []
        current: list[str] = []
        for ch in text:
            if ch in WHITESPACE:
                if current:
                    words.append("".join(current))
                    current = []
            elif ch in ASCII_PUNCTUATION or unicodedata.category(ch).startswith("P"):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
        return words

    def word_ids(self, word: str) -> list[int]:
        """Greedy longest match first; a word with a piece that matches nothing is one [UNK]."""
        if len(word) > self.max_word_chars:
            return [self.unk_id]
        ids, start = [], 0
        while start < len(word):
            table = self.words if start == 0 else self.rest
            end = len(word)
            while end > start and word[start:end] not in table:
                end -= 1
            if end == start:
                return [self.unk_id]
            ids.append(table[word[start:end]])
            start = end
        return ids

    def encode(self, text: str) -> list[int]:
        """The ids of `text`, without the [CLS]/[SEP] around it (a [SEP] typed in it is one)."""
        parts = self._split_specials.split(text) if self._split_specials else [text]
        ids: list[int] = []
        for i, part in enumerate(parts):
            if i % 2:  # a special token's text, as re.split puts the matches between the rest
                ids.append(self.specials[part])
            elif part:
                ids += [tid for word in self.split(self.normalize(part)) for tid in self.word_ids(word)]
        return ids
