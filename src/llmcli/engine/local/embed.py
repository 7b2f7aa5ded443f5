"""Sentence embeddings from a loaded model: many inputs, one llama_decode, one pooled vector each.

An Embedder owns a second llama.cpp context on the Runtime's weights, made for embeddings
(`embeddings=true`, the pooling type), so a chat context and its KV cells are never touched. Every
input is its own sequence; inputs are packed into batches of at most `batch_tokens` tokens and
`MAX_SEQS` sequences, and each batch is one llama_decode. A non-causal model (BERT) attends over the
whole batch at once, so a batch must fit one ubatch: the context's ubatch is the batch size, and no
input may be longer than it. After a decode each sequence's pooled vector is read with
llama_get_embeddings_seq; a causal model's cells are then cleared, as nothing is kept between batches.

Pooling is the GGUF's (`<arch>.pooling_type`, which convert writes from sentence-transformers'
pooling module), or the one asked for (mean, cls, last) for a decoder model that has none. A model
with neither cannot pool: `CannotPool` says so and what to pass.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llmcli.engine.local.batch import free_context
from llmcli.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:
    from llmcli.engine.local.arrays import np
    from llmcli.engine.local.runtime import Runtime
    from llmcli.engine.wordpiece import WordPiece

# --pooling names -> llama.cpp's enum llama_pooling_type.
POOLING: dict[str, int] = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}
POOLING_NAMES = {v: k for k, v in POOLING.items()}
CHOOSABLE = ("mean", "cls", "last")  # what --pooling may ask of a decoder model
UNSPECIFIED = -1

# Sequences one decode may hold (llama.cpp's LLAMA_MAX_SEQ is 256; its per-sequence bookkeeping is
# small, so this bounds the batch's Python-side work, not memory).
MAX_SEQS = 64
# Tokens one batch may hold when the model does not ask for fewer. A non-causal ubatch's attention
# is n_tokens x n_tokens per head, so this is kept to llama-server's default ubatch (512) unless the
# model's own context is longer, up to 2048.
MIN_BATCH_TOKENS = 512
MAX_BATCH_TOKENS = 2048


def choosable_pooling(name: str | None) -> str | None:
    """--pooling's value, checked: None (the GGUF's), or one of CHOOSABLE."""
    if name is None:
        return None
    if name.strip().lower() not in CHOOSABLE:
        raise UsageError(f"--pooling {name} is not one of {', '.join(CHOOSABLE)}")
    return name.strip().lower()


def gguf_pooling(rt: Runtime) -> str | None:
    """`<arch>.pooling_type` from the GGUF (what an embedding model was converted with), or None."""
    text = _meta(rt, f"{rt.arch}.pooling_type")
    return POOLING_NAMES.get(int(text)) if text is not None and text.isdigit() else None


def _meta(rt: Runtime, key: str) -> str | None:
    import ctypes

    buf = ctypes.create_string_buffer(64)
    if rt.ll.llama_model_meta_val_str(rt.model_ptr, key.encode(), buf, len(buf)) < 0:
        return None
    return buf.value.decode("utf-8", "replace")


def wordpiece_of(rt: Runtime) -> WordPiece:
    """The GGUF's WordPiece vocabulary and normalizer switches, as engine/wordpiece.py runs them."""
    from llmcli.engine.wordpiece import WordPiece

    ll, vocab = rt.ll, rt.vocab
    pieces = [
        (ll.llama_vocab_get_text(vocab, i) or b"").decode("utf-8", "replace") for i in range(rt.n_vocab)
    ]
    unk = _meta(rt, "tokenizer.ggml.unknown_token_id")
    lowercase, strip = (
        _meta(rt, f"tokenizer.ggml.normalizer.{name}") for name in ("lowercase", "strip_accents")
    )
    unk_id = (
        int(unk) if unk is not None and unk.isdigit() else pieces.index("[UNK]") if "[UNK]" in pieces else 0
    )
    specials = {pieces[i]: i for i in range(rt.n_vocab) if ll.llama_vocab_is_control(vocab, i) and pieces[i]}
    return WordPiece(
        pieces,
        unk_id,
        lowercase=lowercase == "true",  # llama.cpp's default too: no key, no lowercasing
        strip_accents=None if strip is None else strip == "true",
        specials=specials,
    )


class CannotPool(UsageError):
    """An embedding asked of a model with no pooling (a chat model loaded without --pooling)."""


@dataclass
class Embedded:
    """One batch of inputs embedded: a pooled (not normalized) vector per input, in order."""

    vectors: list[np.ndarray]
    n_tokens: list[int]
    decodes: int  # llama_decode calls it took
    ms: float  # their wall time


class Embedder:
    def __init__(self, rt: Runtime, pooling: str | None = None, batch_tokens: int | None = None) -> None:
        ll = self.ll = rt.ll
        self.rt = rt
        model = rt.model_ptr
        self.n_ctx_train = rt.n_ctx_train or MIN_BATCH_TOKENS
        self.batch_tokens = batch_tokens or max(MIN_BATCH_TOKENS, min(self.n_ctx_train, MAX_BATCH_TOKENS))
        # The longest input: what fits one ubatch, and no more than the positions the model was trained on.
        self.max_tokens = min(self.batch_tokens, self.n_ctx_train)
        self.n_embd = int(ll.llama_model_n_embd(model))
        cparams = ll.llama_context_default_params()
        cparams.embeddings = True
        cparams.pooling_type = POOLING[pooling] if pooling is not None else UNSPECIFIED
        cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = self.batch_tokens
        cparams.n_seq_max = MAX_SEQS
        cparams.kv_unified = True  # one pool of cells for the batch's sequences, however they split it
        cparams.n_threads = cparams.n_threads_batch = rt.n_threads
        cparams.no_perf = True
        self._ctx = ll.llama_init_from_model(model, cparams)
        if not self._ctx:
            raise RuntimeFailure(f"llama.cpp could not create an embedding context ({rt.last_log()})")
        self.pooling = POOLING_NAMES.get(int(ll.llama_pooling_type(self._ctx)), "none")
        self.from_gguf = pooling is None  # an embedding model's own pooling, not one a chat model was given
        self._memory = ll.llama_get_memory(self._ctx)
        self._batch = ll.llama_batch_init(self.batch_tokens, 0, 1)
        self.add_sep = bool(ll.llama_vocab_get_add_sep(rt.vocab))
        self.sep_id = int(ll.llama_vocab_sep(rt.vocab))
        self.wordpiece = (
            wordpiece_of(rt) if ll.llama_vocab_type(rt.vocab) == ll.LLAMA_VOCAB_TYPE_WPM else None
        )

    @property
    def can_pool(self) -> bool:
        return self.pooling in CHOOSABLE

    def check_can_pool(self, name: str) -> None:
        if not self.can_pool:
            raise CannotPool(
                f"the model {name} has no pooling (pooling type {self.pooling}), so it cannot embed; "
                f"load it with --pooling {'|'.join(CHOOSABLE)}, or use an embedding model"
            )

    def tokenize(self, text: str) -> list[int]:
        """An input as the model embeds it: with its special tokens ([CLS] ... [SEP], or bos). A
        WordPiece vocabulary is tokenized as Hugging Face does (engine/wordpiece.py), not by llama.cpp."""
        if self.wordpiece is None:
            return self.rt.tokenize(text, add_special=True, parse_special=False)
        ids = self.wordpiece.encode(text)
        first = [self.rt.bos_id] if self.rt.add_bos and self.rt.bos_id >= 0 else []
        return first + ids + ([self.sep_id] if self.add_sep and self.sep_id >= 0 else [])

    def truncate(self, tokens: list[int]) -> list[int]:
        """Cut to max_tokens, keeping a closing [SEP] where the model adds one (as HF truncation does)."""
        if len(tokens) <= self.max_tokens:
            return tokens
        if self.add_sep and tokens and tokens[-1] == self.sep_id:
            return [*tokens[: self.max_tokens - 1], self.sep_id]
        return tokens[: self.max_tokens]

    def batches(self, inputs: Sequence[Sequence[int]]) -> list[list[int]]:
        """The inputs' indexes, packed in order into batches that fit one decode each."""
        out: list[list[int]] = []
        room = 0
        for i, tokens in enumerate(inputs):
            n = len(tokens)
            if not 0 < n <= self.max_tokens:
                raise UsageError(f"input {i} has {n} tokens; an input holds 1 to {self.max_tokens}")
            if not out or n > room or len(out[-1]) == MAX_SEQS:
                out.append([])
                room = self.batch_tokens
            out[-1].append(i)
            room -= n
        return out

    def embed(self, inputs: Sequence[Sequence[int]]) -> Embedded:
        """Each input's pooled vector (not normalized), its inputs packed into as few decodes as fit."""
        from llmcli.engine.local.arrays import np

        t0 = time.perf_counter()
        vectors: list[Any] = [None] * len(inputs)
        groups = self.batches(inputs)
        for group in groups:
            for seq, vec in zip(group, self.decode([inputs[i] for i in group]), strict=True):
                vectors[seq] = vec
        return Embedded(
            vectors=[np.asarray(v, dtype=np.float32) for v in vectors],
            n_tokens=[len(t) for t in inputs],
            decodes=len(groups),
            ms=(time.perf_counter() - t0) * 1000,
        )

    def decode(self, group: Sequence[Sequence[int]]) -> list[Any]:
        """One llama_decode of inputs that fit one batch (see batches): each one's pooled vector."""
        from llmcli.engine.local.arrays import np

        ll, batch = self.ll, self._batch
        n = 0
        for seq, tokens in enumerate(group):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq
                batch.logits[n] = 1  # every position is an output: pooling reads all of them
                n += 1
        batch.n_tokens = n
        if self._memory:  # an encoder (BERT) has no KV memory at all
            ll.llama_memory_clear(self._memory, True)
        rc = ll.llama_decode(self._ctx, batch)
        if rc != 0:
            raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.rt.last_log()})")
        out = []
        for seq in range(len(group)):
            ptr = ll.llama_get_embeddings_seq(self._ctx, seq)
            if not ptr:
                raise RuntimeFailure(f"llama.cpp gave no pooled embedding for sequence {seq}")
            out.append(np.ctypeslib.as_array(ptr, shape=(self.n_embd,)).copy())
        return out

    def close(self) -> None:
        free_context(self.ll, self._ctx, self._batch)
        self._batch = self._ctx = None


def normalized(vector: np.ndarray) -> np.ndarray:
    """L2-normalized (a zero vector stays zero)."""
    from llmcli.engine.local.arrays import np

    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector
