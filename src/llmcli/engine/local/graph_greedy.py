"""Greedy picks made in llama.cpp's graph (its backend sampling), for sequences that need only the id.

A chain set on a sequence id (`llama_set_sampler`) adds its samplers to the graph llama_decode
computes, over that sequence's logits row, and `llama_get_sampled_token_ith` reads the pick. The
chain here is greedy (an argmax over the row), then top-k 1: llama.cpp copies to the host what the
chain's last sampler leaves, and after greedy alone that is the whole row (196 KB a sequence for a
49k vocabulary); after top-k 1 it is one logit. A ubatch whose outputs all have a chain copies no
raw logits either. On a GPU the picks are made beside the decode and only the ids come back; on the
CPU backend ggml's argmax is a scalar loop on one thread, slower than numpy's (benchmarks/README.md),
so the scheduler turns this on by default only where the output layer is offloaded
(SchedulerConfig.greedy_in_graph).

What the vendored llama.cpp (llama-cpp-python 0.3.36) allows, and what follows from it:
  - a chain per sequence id, set or unset at any time; each change makes the next llama_decode
    reserve its graphs again (milliseconds), so a slot keeps its chain while it is idle and changes
    only when a sequence of the other kind takes it;
  - a chain can be attached once in its life (llama.cpp asserts): attaching means a new chain;
  - a sequence with a chain has no logits row to read, so a slot has a chain only while its
    sequence needs nothing but the id: no grammar, no log-probabilities, no temperature or
    penalties, not driven by a client (chat reads its own rows, several a step);
  - a backend that cannot run a sampler of the chain leaves it, and those after it, to the host:
    without top-k the whole row is copied, as without the chain; without argmax nothing is picked
    (`token` says so; every backend llama.cpp ships has argmax);
  - the picks can only be read one call each (the array behind them is not in the C API);
  - ggml's argmax takes the last of two exactly equal maxima, numpy and llama.cpp's CPU sampler the
    first: the picks differ only on such a tie.
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
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(1))  # one logit copied, not the row
        if self._set(self._ctx, slot, chain):
            self._chains[slot] = chain
        else:  # llama.cpp cannot run it in the graph (a tensor split): this slot samples on the host
            ll.llama_sampler_free(chain)

    def token(self, idx: int) -> int:
        """The id picked in the graph at batch index idx (the row of a sequence with a chain)."""
        token = self._sampled(self._ctx, idx)
        if token == NO_TOKEN:
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
