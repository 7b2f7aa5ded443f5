"""The logits rows llama.cpp keeps after a decode, read as numpy arrays at the cost of one C call.

`np.ctypeslib.as_array(llama_get_logits_ith(...))` builds a ctypes pointer, a ctypes array type and
an array interface on every call: about 20 k instructions a token, more than the argmax over the
row. The rows live in llama.cpp's output buffer, which moves only when it grows, so a view is made
once per row address and reused; the address comes from a second binding of the same C function
whose result is a plain integer (no ctypes pointer object).
"""

from __future__ import annotations

import ctypes

from llmcli.engine.local.arrays import np  # llama.cpp first, numpy after
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
    top-k: 0.7 M instructions a token for a 49k vocabulary. Here the chain runs over the logits at
    or above a threshold t instead, chosen so that at least k+1 of them are: top-k keeps the same k
    tokens in the same order, and the later samplers and the seeded draw see the very array they
    would have seen. Only an exact tie among the k+1 largest logits could be ordered otherwise by
    the two sorts; such a row returns None (the caller samples it the full way), as do a row with a
    NaN or +inf and one whose logits bunch so that no t is reached by between k+1 and 4k columns
    (below): all sampled the full way, the same draw, only slower.

    t is found without a pass over the whole row for each try. The row is read as a grid of ROWS
    rows of n_vocab/ROWS columns, and one pass takes each column's maximum (elementwise maxima of
    long slices: where numpy is quickest). t is searched among those maxima: at least k+1 columns
    must reach it, and every logit at or above it lies in one of them (a column's maximum is at
    least each of its logits), so the candidates are only those columns' logits, read again. A
    search over the row itself took a pass over all of it per try, and its candidates ran to
    hundreds; these are about 2k on the model's rows.
    """

    ROWS = 16
    MAX_K = 256  # a larger top-k goes the full way
    START = 8.0  # the first width searched, in logits

    @classmethod
    def fits(cls, k: int, n_vocab: int) -> bool:
        """Whether a grid of this vocabulary has the columns for the search (4k of them)."""
        return 0 < k <= cls.MAX_K and 4 * k <= n_vocab // cls.ROWS

    def __init__(self, ll, rows: LogitRows, k: int, n_vocab: int) -> None:
        self.ll, self.rows, self.k = ll, rows, k
        self.delta = self.START  # t below the highest column maximum, in logits; adapted to the rows
        self.full = 0  # rows left to the full way (a tie, a NaN, a flat row)
        self.most = 4 * k  # columns read again at most
        columns = self.columns = n_vocab // self.ROWS
        self.body = self.ROWS * columns
        # The flat index of each grid row's first logit, to add to the columns' indices.
        self._starts = (np.arange(self.ROWS, dtype=np.intp) * columns)[:, None]
        # A vocabulary that does not divide into ROWS leaves a few last logits: always candidates.
        self._tail = np.arange(self.body, n_vocab, dtype=np.intp)
        self._maxima = np.empty(columns, dtype=np.float32)
        # id(row) -> (row, its grid). The rows are LogitRows' views of llama.cpp's own buffer, so
        # an entry holds no memory of its own.
        self._grids: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        size = self.ROWS * self.most + len(self._tail)
        fields = [("id", np.int32), ("logit", np.float32), ("p", np.float32)]  # llama_token_data
        self._cands = np.zeros(size, dtype=np.dtype(fields))
        self._arr = ll.llama_token_data_array(self._cands.ctypes.data_as(ll.llama_token_data_p), 0, -1, False)
        self._ref = ctypes.byref(self._arr)
        # The fields' views, made once: a structured array's field lookup builds a new view each time.
        self._ids, self._logits, self._p = self._cands["id"], self._cands["logit"], self._cands["p"]

    def _grid(self, row: np.ndarray) -> np.ndarray:
        # LogitRows hands out the same view for the same row, so its grid is made once; the row is
        # kept beside it, so that its id cannot be another array's while the entry lives.
        entry = self._grids.get(id(row))
        if entry is not None and entry[0] is row:
            return entry[1]
        if len(self._grids) >= MAX_VIEWS:
            self._grids.clear()
        grid = row[: self.body].reshape(self.ROWS, self.columns)
        self._grids[id(row)] = (row, grid)
        return grid

    def sample(self, chain, idx: int) -> int | None:
        row, k = self.rows.row(idx), self.k
        grid, maxima = self._grid(row), self._maxima
        grid.max(axis=0, out=maxima)
        top, delta, low, high = maxima.max(), self.delta, 0.0, 0.0
        for _ in range(16):  # each try counts over the column maxima only
            t = top - delta
            reach = maxima >= t
            n_hot = np.count_nonzero(reach)
            if n_hot <= k:  # too few: widen, halfway to a width known to be too wide
                low, delta = delta, (delta + high) / 2 if high else delta * 2
            elif n_hot > self.most:
                high, delta = delta, (delta + low) / 2 if low else delta * 0.6
            else:
                break
        else:  # a flat row, a NaN (then the maximum is NaN, and no column reaches t) or +inf
            # A width adapted to rows unlike the next ones could keep failing: start afresh.
            self.full, self.delta = self.full + 1, self.START
            return None
        self.delta = delta * 0.8 if n_hot > 3 * k else delta  # fewer columns next time
        hot = reach.nonzero()[0]
        ids = (hot + self._starts).ravel()
        if len(self._tail):
            ids = np.concatenate((ids, self._tail))
        logits = row[ids]
        if len(self._tail) and np.isnan(logits[-len(self._tail) :]).any():  # the grid's maxima miss it
            self.full += 1
            return None
        kept = (logits >= t).nonzero()[0]
        ids, logits = ids[kept], logits[kept]
        n = len(ids)
        largest = np.sort(logits)[-(k + 1) :]
        if (largest[1:] == largest[:-1]).any():
            self.full += 1
            return None
        self._ids[:n] = ids
        self._logits[:n] = logits
        self._p[:n] = 0.0
        arr = self._arr
        arr.size, arr.selected, arr.sorted = n, -1, False
        self.ll.llama_sampler_apply(chain, self._ref)
        token = int(self._ids[arr.selected])
        self.ll.llama_sampler_accept(chain, token)
        return token
