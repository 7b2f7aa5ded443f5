"""Choose llama.cpp's pre-tokenizer for a tokenizer.json whose definition is not a known one, by behaviour.

A definition that differs from the table's byte for byte may still split text exactly as one of
llama.cpp's pre-tokenizers does: transformers writes Qwen's tokenizer with `"ignore_merges": true`
when it converts from tiktoken, and a regex can be written in more than one way. So the candidates
are tried, nearest definition first: each is written with the vocabulary into a small vocab-only
GGUF, and llama.cpp (a vocab-only load) and the Hugging Face `tokenizers` library both tokenize the
check corpus. The first candidate that gives identical ids on every string is chosen; if none does,
the tokenizer is refused with the first string on which the nearest candidate differs.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.convert.check_corpus import check_corpus, corpus_digest
from llmcli.convert.errors import BadCheckpoint, UnsupportedTokenizer, shown
from llmcli.convert.vocab_record import CONTROL, PreCheck, Vocab

WriteHeader = Callable[[Any], None]  # adds the architecture's keys to a gguf.GGUFWriter


@dataclass(frozen=True)
class Mismatch:
    text: str
    hf: list[int]
    llama: list[int]


def hf_ids(tokenizer_json: dict, texts: Sequence[str], where: str) -> list[list[int]]:
    """The Hugging Face tokenizer's ids for each text, without special tokens."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_str(json.dumps(tokenizer_json))
        # A saved truncation or fixed padding (all-MiniLM's: 128 tokens) would cut or pad the ids
        # compared; llama.cpp does neither.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        return [e.ids for e in tokenizer.encode_batch(list(texts), add_special_tokens=False)]
    except (KeyboardInterrupt, SystemExit):
        raise
    except (
        BaseException
    ) as exc:  # plain Exceptions on bad definitions, and pyo3's PanicException (a BaseException)
        raise BadCheckpoint(
            f"{where}: the tokenizers library cannot load or run it ({shown(str(exc), 120)}); "
            "download the tokenizer again"
        ) from exc


def llama_ids(gguf_path: Path, texts: Sequence[str]) -> list[list[int]]:
    """llama.cpp's ids for each text on a vocab-only load of `gguf_path`, without special tokens."""
    from llmcli import llama_lib

    C = llama_lib.load()
    suppress_stdout_stderr = llama_lib.load("_utils").suppress_stdout_stderr

    C.llama_backend_init()
    params = C.llama_model_default_params()
    params.vocab_only = True
    with suppress_stdout_stderr(disable=False):  # llama.cpp logs every key it reads on stderr
        model = C.llama_model_load_from_file(str(gguf_path).encode(), params)
    if not model:
        raise UnsupportedTokenizer(
            "llama.cpp cannot load the converted vocabulary; this tokenizer is not one llmcli can convert"
        )
    try:
        vocab = C.llama_model_get_vocab(model)
        out = []
        for text in texts:
            data = text.encode("utf-8")
            n_max = len(data) + 8  # byte-level BPE gives at most one token per byte
            buf = (C.llama_token * n_max)()
            n = C.llama_tokenize(vocab, data, len(data), buf, n_max, False, False)
            if (
                n < 0
            ):  # cannot happen for byte-level BPE; kept so a change upstream fails loudly, not silently
                raise UnsupportedTokenizer(f"llama.cpp needs {-n} tokens for a {len(data)}-byte check string")
            out.append(list(buf[:n]))
        return out
    finally:
        C.llama_model_free(model)


def first_mismatch(texts: Sequence[str], want: list[list[int]], got: list[list[int]]) -> Mismatch | None:
    for text, a, b in zip(texts, want, got, strict=True):
        if a != b:
            return Mismatch(text, a, b)
    return None


def write_vocab_gguf(path: Path, arch: str, name: str, write_header: WriteHeader, vocab: Vocab) -> None:
    """A GGUF with the architecture's keys, the vocabulary and no tensors: what a vocab-only load reads."""
    import gguf

    from llmcli.convert.gguf_write import GGUFWriter

    writer = GGUFWriter(path=str(path), arch=arch)
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)  # llama.cpp keys some token attributes on the model's name
        write_header(writer)
        vocab.write(writer)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
    finally:
        writer.close()


def verify_wordpiece(vocab: Vocab, tokenizer_json: dict, where: str) -> PreCheck:
    """Check that llmcli's WordPiece (engine/wordpiece.py, which embeds this vocabulary: llama.cpp's own
    differs from BERT's on combining marks, Hangul and long words) gives the Hugging Face ids on the
    whole corpus; refused with the first difference."""
    from llmcli.engine.wordpiece import WordPiece

    texts = check_corpus()
    want = hf_ids(tokenizer_json, texts, where)
    unk = vocab.special.get("unk", 0)
    specials = {text: i for i, text in enumerate(vocab.tokens) if vocab.types[i] == CONTROL}
    switches = vocab.normalizer
    ours = WordPiece(
        vocab.tokens,
        unk,
        lowercase=switches.get("lowercase", False),
        strip_accents=switches.get("strip_accents"),
        specials=specials,
    )
    mismatch = first_mismatch(texts, want, [ours.encode(t) for t in texts])
    if mismatch is not None:
        raise UnsupportedTokenizer(
            f"llmcli's WordPiece does not tokenize as {where} does: the ids first differ on "
            f"{shown(repr(mismatch.text), 80)} (Hugging Face {shown(str(mismatch.hf), 50)}, llmcli "
            f"{shown(str(mismatch.llama), 50)}); refusing, as different tokens silently change the vectors"
        )
    return PreCheck(
        pre=vocab.pre or "default",
        verified_by="behaviour",
        check_strings=len(texts),
        check_tokens=sum(map(len, want)),
        corpus=corpus_digest(),
    )


def choose_by_behaviour(
    vocab: Vocab,
    tokenizer_json: dict,
    candidates: Sequence[str],
    *,
    arch: str,
    name: str,
    write_header: WriteHeader,
    where: str,
) -> PreCheck:
    """The first candidate with which llama.cpp gives the HF ids on the whole corpus; refused if none."""
    texts = check_corpus()
    want = hf_ids(tokenizer_json, texts, where)
    first: tuple[str, Mismatch] | None = None
    tried: list[str] = []
    with tempfile.TemporaryDirectory(prefix="llmcli-vocab-") as tmp:
        for pre in candidates:
            path = Path(tmp) / f"{pre}.gguf"
            vocab.pre = pre
            write_vocab_gguf(path, arch, name, write_header, vocab)
            mismatch = first_mismatch(texts, want, llama_ids(path, texts))
            path.unlink()
            if mismatch is None:
                return PreCheck(
                    pre=pre,
                    verified_by="behaviour",
                    check_strings=len(texts),
                    check_tokens=sum(map(len, want)),
                    corpus=corpus_digest(),
                    tried=tuple(tried),
                )
            tried.append(pre)
            first = first or (pre, mismatch)
    vocab.pre = None
    assert first is not None, "choose_by_behaviour needs at least one candidate"
    pre, m = first
    raise UnsupportedTokenizer(
        f"the pre-tokenizer in {where} is not one llama.cpp reproduces: with the nearest, {pre}, the ids "
        f"first differ on {shown(repr(m.text), 80)} (Hugging Face {shown(str(m.hf), 50)}, llama.cpp "
        f"{shown(str(m.llama), 50)}); tried {', '.join(tried)}; "
        "refusing, as a wrong pre-tokenizer silently changes the tokens"
    )
