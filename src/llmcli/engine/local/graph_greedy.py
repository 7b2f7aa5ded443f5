"""Greedy picks made in llama.cpp's graph (its backend sampling), for sequences that need only the id.

A greedy chain set on a sequence id (`llama_set_sampler`) adds an argmax over that sequence's logits
row to the graph llama_decode computes, and `llama_get_sampled_token_ith` reads the pick: no numpy
argmax on the host. On a GPU the argmax runs beside the decode; on the CPU backend ggml's argmax is a
scalar loop on one thread, slower than numpy's (benchmarks/README.md), so the scheduler turns this on
by default only where the output layer is offloaded (SchedulerConfig.greedy_in_graph).

What the vendored llama.cpp (llama-cpp-python 0.3.36) allows, and what follows from it:
  - a chain per sequence id, set or unset at any time; each change makes the next llama_decode
    reserve its graphs again (milliseconds), so a slot keeps its chain while it is idle and changes
    only when a sequence of the other kind takes it;
  - a chain can be attached once in its life (llama.cpp asserts): attaching means a new chain;
  - a slot has a chain only while its sequence needs nothing but the id (no grammar, no
    log-probabilities, no temperature or penalties, not driven by a client: chat reads its own
    rows, several a step), which keeps the rows of the others theirs: a ubatch with an output
    without a chain copies every row's raw logits, one whose outputs all have a chain none;
  - the host still gets each picked row, as the chain's "sampled logits" (what a chain leaves of
    the row is copied back; greedy leaves all of it). A top-k 1 after greedy would leave one logit,
    but ggml's CUDA top-k is a full sort of the row where CUB's top-k is missing (CCCL < 3.2):
    a 49k sort a sequence a step costs more than the copy it saves;
  - the picks can only be read one call each (the array behind them is not in the C API);
  - ggml's argmax takes the last of two exactly equal maxima on the CPU and any of them on CUDA,
    numpy and llama.cpp's CPU sampler the first: the picks differ only on such a tie.
"""

from __future__ import annotations

import ctypes

from llmcli.errors import RuntimeFailure

NO_TOKEN = -1  # LLAMA_TOKEN_NULL: nothing was sampled at that batch index


class GraphGreedy:
    """The greedy chains on a context's sequence ids (its scheduler's slots)."""

    def __init__(self, ll, ctx, n_slots: int) -> None:
        self.ll, self._ctx = ll, ctx
        # The bindings of llama-cpp-python 0.3.36 lack these two; indexing the library makes function
        # objects of our own (see logits.py).
        self._set = ll._lib["llama_set_sampler"]
        self._set.argtypes, self._set.restype = (
            [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p],
            ctypes.c_bool,
        )
        self._sampled = ll._lib["llama_get_sampled_token_ith"]
        self._sampled.argtypes, self._sampled.restype = [ctypes.c_void_p, ctypes.c_int32], ctypes.c_int32
        self._chains: list[int | None] = [None] * n_slots

    def has(self, slot: int) -> bool:
        return self._chains[slot] is not None

    def place(self, slot: int, on: bool) -> None:
        """A chain on slot's sequence id, or none; nothing changes (no graph reserve) when it is so."""
        chain = self._chains[slot]
        if on == (chain is not None):
            return
        ll = self.ll
        if chain is not None:
            # The context forgets it here, and its last graph goes at the next decode's reserve,
            # before any graph is built again: nothing refers to the chain once it is unset.
            self._set(self._ctx, slot, None)
            ll.llama_sampler_free(chain)
            self._chains[slot] = None
            return
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        if self._set(self._ctx, slot, chain):
            self._chains[slot] = chain
        else:  # llama.cpp cannot run it in the graph (a tensor split): this slot samples on the host
            ll.llama_sampler_free(chain)

    def picked(self, idx: int) -> int | None:
        """The id picked in the graph at batch index idx; None where no chain picked one."""
        token = self._sampled(self._ctx, idx)
        return None if token == NO_TOKEN else token

    def token(self, idx: int) -> int:
        """The id picked in the graph at batch index idx (the row of a sequence with a chain)."""
        token = self.picked(idx)
        if token is None:
            raise RuntimeFailure(
                f"llama.cpp picked no token in its graph at batch index {idx}; its backend cannot run "
                "the greedy sampler there (try --gpu-layers 0)"
            )
        return token

    def tokens(self, n: int) -> list[int]:
        """The ids picked at batch indices 0..n-1."""
        sampled, ctx = self._sampled, self._ctx
        tokens = [sampled(ctx, i) for i in range(n)]
        if NO_TOKEN in tokens:
            self.token(tokens.index(NO_TOKEN))  # raises, naming it
        return tokens

    def close(self) -> None:
        """Unset and free every chain (before the context is freed): the context is as it was."""
        for slot in range(len(self._chains)):
            self.place(slot, False)
