"""A reusable llama_batch that holds tokens of several sequences, filled with slice writes."""

from __future__ import annotations

import ctypes
from typing import Any


class TokenBatch:
    """llama_batch_init(capacity, 0, 1) with Python views of its arrays.

    Each token belongs to one sequence (n_seq_id = 1). Whole runs of a sequence are written with
    ctypes slice assignment, so a prefill chunk of hundreds of tokens costs a few calls, not one
    per field per token.
    """

    def __init__(self, ll, capacity: int) -> None:
        self.ll = ll
        self.capacity = capacity
        self.raw = ll.llama_batch_init(capacity, 0, 1)
        raw = self.raw
        self._token: Any = (ctypes.c_int32 * capacity).from_address(ctypes.addressof(raw.token.contents))
        self._pos: Any = (ctypes.c_int32 * capacity).from_address(ctypes.addressof(raw.pos.contents))
        self._n_seq: Any = (ctypes.c_int32 * capacity).from_address(ctypes.addressof(raw.n_seq_id.contents))
        self._logits: Any = (ctypes.c_int8 * capacity).from_address(ctypes.addressof(raw.logits.contents))
        # seq_id is int32**, one pointer per token to its own 1-id array: pointed instead at the
        # entries of one array, the ids of a run are one slice write (llama.cpp reads them the same
        # way); the pointers llama_batch_init made are put back before llama_batch_free frees them.
        self._seq_ptrs: Any = (ctypes.c_void_p * capacity).from_address(ctypes.addressof(raw.seq_id.contents))
        self._own_ptrs = list(self._seq_ptrs)
        self._seq: Any = (ctypes.c_int32 * capacity)()
        base, size = ctypes.addressof(self._seq), ctypes.sizeof(ctypes.c_int32)
        self._seq_ptrs[:capacity] = [base + i * size for i in range(capacity)]
        self._n_seq[:capacity] = [1] * capacity
        self.n = 0
        # The sequence ids add_lasts wrote at rows 0.., their logits flags set: a decode loop's next
        # step has the same ones, and writes only the tokens and the positions.
        self._lasts: list[int] = []

    def clear(self) -> None:
        self.n = 0

    def add_run(self, tokens: list[int], pos: int, seq_id: int, logits_last: bool) -> int:
        """Append tokens at positions pos, pos+1, ... of seq_id; return the batch index of the last one
        (whose logits are kept when logits_last), or -1."""
        n0, k = self.n, len(tokens)
        n1 = n0 + k
        if n1 > self.capacity:
            raise ValueError(f"a batch of {n1} tokens exceeds its capacity of {self.capacity}")
        if n0 < len(self._lasts):
            self._lasts = []
        self._token[n0:n1] = tokens
        self._pos[n0:n1] = range(pos, pos + k)
        self._logits[n0:n1] = [0] * k
        self._seq[n0:n1] = [seq_id] * k
        self.n = n1
        if logits_last:
            self._logits[n1 - 1] = 1
            return n1 - 1
        return -1

    def add_lasts(self, tokens: list[int], positions: list[int], seq_ids: list[int]) -> int:
        """Append one token of each of several sequences (token i at positions[i] of seq_ids[i]), each
        with its logits kept; return the batch index of the first (the others follow it)."""
        n0 = self.n
        n1 = n0 + len(tokens)
        if n1 > self.capacity:
            raise ValueError(f"a batch of {n1} tokens exceeds its capacity of {self.capacity}")
        self._token[n0:n1] = tokens
        self._pos[n0:n1] = positions
        if n0 or seq_ids != self._lasts:
            self._seq[n0:n1] = seq_ids
            self._logits[n0:n1] = [1] * len(tokens)
            self._lasts = [] if n0 else seq_ids
        self.n = n1
        return n0

    def add_scored(self, tokens: list[int], pos: int, seq_id: int) -> None:
        """Append a run with logits at every position (a draft to verify: row n0 + i is tokens[i])."""
        self.add_run(tokens, pos, seq_id, False)
        self._logits[self.n - len(tokens) : self.n] = [1] * len(tokens)

    def seq_ids(self) -> list[int]:
        """The sequence of each token in the batch, in order."""
        return self._seq[: self.n]

    def for_decode(self):
        self.raw.n_tokens = self.n
        return self.raw

    def close(self) -> None:
        if self.raw is not None:
            self._seq_ptrs[: self.capacity] = self._own_ptrs
            self.ll.llama_batch_free(self.raw)
            self.raw = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def free_context(ll, ctx, batch) -> None:
    """What a context's owner frees on close (the runtime's, an embedder's): its raw llama_batch and
    the context, its KV cache with it, each if it was made."""
    if batch is not None:
        ll.llama_batch_free(batch)
    if ctx:
        ll.llama_free(ctx)
