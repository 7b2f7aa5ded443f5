"""The logits rows llama.cpp keeps after a decode, read as numpy arrays at the cost of one C call.

`np.ctypeslib.as_array(llama_get_logits_ith(...))` builds a ctypes pointer, a ctypes array type and
an array interface on every call: about 20 k instructions a token, more than the argmax over the
row. The rows live in llama.cpp's output buffer, which moves only when it grows, so a view is made
once per row address and reused; the address comes from a second binding of the same C function
whose result is a plain integer (no ctypes pointer object).
"""

from __future__ import annotations

import ctypes

import numpy as np

from llmcli.errors import RuntimeFailure

# Views kept at most (a batch of B sequences has B rows; an output buffer that grew leaves stale
# addresses behind, dropped all at once when there are this many).
MAX_VIEWS = 4096


class LogitRows:
    def __init__(self, ll, ctx, n_vocab: int) -> None:
        # Indexing the library makes a new function object: the bindings' own, with its ctypes
        # pointer result, stays as it is for every other caller.
        address = ll._lib["llama_get_logits_ith"]
        address.argtypes, address.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.c_void_p
        self._address, self._ctx, self._n_vocab = address, ctx, n_vocab
        self._views: dict[int, np.ndarray] = {}

    def row(self, idx: int) -> np.ndarray:
        """The logits of batch index idx (-1: the last row), valid until the next decode."""
        addr = self._address(self._ctx, idx)
        view = self._views.get(addr)
        if view is not None:
            return view
        if not addr:
            raise RuntimeFailure(f"llama.cpp kept no logits at batch index {idx}")
        if len(self._views) >= MAX_VIEWS:
            self._views.clear()
        view = self._views[addr] = np.ctypeslib.as_array((ctypes.c_float * self._n_vocab).from_address(addr))
        return view


class LogitBlock:
    """The first n rows of the last batch's logits as one (n, n_vocab) view: a batch's first n
    outputs are stored one after another, so their greedy tokens are one argmax call for them all."""

    def __init__(self, ll, ctx, n_vocab: int) -> None:
        address = ll._lib["llama_get_logits_ith"]  # a function object of its own (see LogitRows)
        address.argtypes, address.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.c_void_p
        self._address, self._ctx, self._n_vocab = address, ctx, n_vocab
        self._views: dict[tuple[int, int], np.ndarray] = {}

    def first(self, n: int) -> np.ndarray | None:
        """Rows 0..n-1; None where llama.cpp did not keep them one after another."""
        addr = self._address(self._ctx, 0)
        view = self._views.get((addr, n))
        if view is not None:
            return view
        if not addr or self._address(self._ctx, n - 1) != addr + (n - 1) * self._n_vocab * 4:
            return None
        if len(self._views) >= MAX_VIEWS:
            self._views.clear()
        flat = np.ctypeslib.as_array((ctypes.c_float * (n * self._n_vocab)).from_address(addr))
        view = self._views[(addr, n)] = flat.reshape(n, self._n_vocab)
        return view


class TopKFirst:
    """llama.cpp's sampler chain, when it starts with top-k, run over the few candidates top-k keeps.

    `llama_sampler_sample` copies all n_vocab logits into candidates and partial-sorts them for
    top-k: 0.7 M instructions a token for a 49k vocabulary. Every logit within `delta` of the row's
    maximum is picked here instead (delta widens until at least k are), and the chain runs over
    those: top-k keeps the same k tokens in the same order, and the later samplers and the seeded
    draw see the very array they would have seen. Only an exact tie among the k+1 largest logits
    could be ordered otherwise by the two sorts; such a row returns None (the caller samples it
    the full way), as does a row with a NaN.
    """

    CAP = 1024  # candidates at most; a flatter row goes the full way

    def __init__(self, ll, rows: LogitRows, k: int) -> None:
        self.ll, self.rows, self.k = ll, rows, k
        self.delta = 8.0  # in logits; adapted to the rows seen
        self.full = 0  # rows left to the full way (a tie, a NaN, a flat row)
        self._cands = np.zeros(
            self.CAP, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        )
        self._arr = ll.llama_token_data_array(self._cands.ctypes.data_as(ll.llama_token_data_p), 0, -1, False)
        self._ref = ctypes.byref(self._arr)
        # The fields' views, made once: a structured array's field lookup builds a new view each time.
        self._ids, self._logits, self._p = self._cands["id"], self._cands["logit"], self._cands["p"]

    def sample(self, chain, idx: int) -> int | None:
        row, k, start = self.rows.row(idx), self.k, self.delta
        top = row.max()
        for _ in range(12):  # one pass over the row, usually: delta follows the rows
            picked = np.flatnonzero(row >= top - self.delta)
            n = len(picked)
            if n < k:
                self.delta *= 2
            elif n > self.CAP:
                self.delta *= 0.6
            else:
                break
        else:  # a flat row, or a NaN in it
            self.full, self.delta = self.full + 1, start
            return None
        if n > 4 * k:
            self.delta *= 0.8  # fewer candidates next time
        logits = row[picked]
        largest = np.sort(logits)[-(k + 1) :]
        if (largest[1:] == largest[:-1]).any():
            self.full += 1
            return None
        self._ids[:n] = picked
        self._logits[:n] = logits
        self._p[:n] = 0.0
        arr = self._arr
        arr.size, arr.selected, arr.sorted = n, -1, False
        self.ll.llama_sampler_apply(chain, self._ref)
        token = int(self._ids[arr.selected])
        self.ll.llama_sampler_accept(chain, token)
        return token
