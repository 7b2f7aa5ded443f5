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
