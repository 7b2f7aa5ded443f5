"""llama.cpp's native sampler chain, built from the sampling parameters."""

from __future__ import annotations

import random

from llmcli.engine.local.arrays import np  # llama.cpp first, numpy after
from llmcli.engine.local.logits import LogitRows, TopKFirst
from llmcli.engine.sampling import SamplingParams


class Sampler:
    """Owns a llama_sampler chain; `sample` picks the next token from the context's last logits."""

    def __init__(self, runtime, params: SamplingParams, grammar=None) -> None:
        """grammar: a llmcli.engine.local.sampler.GrammarCheck (owned from here on), or None."""
        ll = self.ll = runtime.ll
        self.grammar = grammar
        self._ctx = runtime.ctx_ptr
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        # Order as llama.cpp's common sampler: penalties, then truncation, then temperature, then draw.
        # Only the penalties sampler keeps state on accept; without it a drawn token needs no undo.
        self._stateful = params.repeat_penalty != 1.0
        if self._stateful:
            # The llama.cpp that llama-cpp-python 0.3.x vendors takes the vocabulary size first.
            penalties = ll.llama_sampler_init_penalties(
                runtime.n_vocab, params.repeat_last_n, params.repeat_penalty, 0.0, 0.0
            )
            ll.llama_sampler_chain_add(chain, penalties)
        if params.temperature <= 0:
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        else:
            if params.top_k > 0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(params.top_k))
            if params.top_p < 1.0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(params.top_p, 1))
            if params.min_p > 0:
                ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_min_p(params.min_p, 1))
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(params.temperature))
            seed = params.seed if params.seed is not None else random.getrandbits(32)
            ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))
        self._chain = chain
        # Greedy without penalties is the logits row's first maximum, as llama.cpp's greedy sampler
        # picks it; numpy finds it in 6 us where llama_sampler_sample first copies the row into a
        # 49k-entry candidate array (42 us), for every sequence of every step. (They differ only on a
        # row with NaNs, a broken model's: argmax returns the first NaN, llama.cpp skips them.)
        self._argmax = params.temperature <= 0 and not self._stateful
        self._rows = LogitRows(ll, self._ctx, runtime.n_vocab)
        # A chain that starts with top-k runs over the candidates top-k can keep (logits.py).
        plain_top_k = params.temperature > 0 and not self._stateful
        plain_top_k = plain_top_k and TopKFirst.fits(params.top_k, runtime.n_vocab)
        self._top_k = TopKFirst(ll, self._rows, params.top_k, runtime.n_vocab) if plain_top_k else None

    @property
    def greedy(self) -> bool:
        """Its token is the first maximum of the row, nothing else: a caller may take it in bulk."""
        return self._argmax and self.grammar is None

    def sample(self, idx: int = -1) -> int:
        """The next token from the logits of batch index idx (-1: the last decoded position).
        llama_sampler_sample also accepts the token into the chain (penalty history, RNG draw),
        exactly once per call, so verifying a draft position by position keeps the chain's state
        that of plain decoding; greedy without penalties has no state and skips the chain. A grammar
        reads the same row: a sequence of a batch is constrained at its own index."""
        grammar = self.grammar
        if grammar is None and self._argmax:
            return int(self._rows.row(idx).argmax())
        if grammar is None and self._top_k is not None:
            picked = self._top_k.sample(self._chain, idx)
            if picked is not None:
                return picked
        if grammar is None or grammar.gate.state in ("thinking", "free"):
            token = int(self.ll.llama_sampler_sample(self._chain, self._ctx, idx))
        else:
            token = grammar.sample(self._chain, self._ctx, self._stateful, idx)
        if grammar is not None:
            grammar.observe(token)
        return token

    def reset(self) -> None:
        """A fresh chain's state again (penalty history, the seeded RNG), for the next sequence."""
        self.ll.llama_sampler_reset(self._chain)

    def close(self) -> None:
        if self.grammar is not None:
            self.grammar.close()
            self.grammar = None
        if self._chain:
            self.ll.llama_sampler_free(self._chain)
            self._chain = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class SamplerPool:
    """Finished chains, reset and reused by the next sequence with the same parameters."""

    def __init__(self, runtime) -> None:
        self.rt = runtime
        self.free: dict[tuple, list[Sampler]] = {}

    @staticmethod
    def key(params: SamplingParams) -> tuple | None:
        """Chains that reset to the same state are reused; an unseeded draw needs a fresh seed."""
        if params.temperature > 0 and params.seed is None:
            return None
        return tuple(params.as_dict().values())

    def take(self, params: SamplingParams) -> Sampler:
        key = self.key(params)
        free = self.free.get(key) if key is not None else None
        if free:
            sampler = free.pop()
            sampler.reset()
            return sampler
        return Sampler(self.rt, params)

    def give(self, sampler: Sampler, params: SamplingParams) -> None:
        """Take a chain back (its grammar, if any, is the caller's to close)."""
        sampler.grammar = None
        key = self.key(params)
        if key is None:
            sampler.close()
        else:
            self.free.setdefault(key, []).append(sampler)

    def close(self) -> None:
        for free in self.free.values():
            for sampler in free:
                sampler.close()
        self.free.clear()


# A refused draw is redrawn from the likeliest 256 tokens, then 4,096, then all (GrammarCheck).
TOP_TIERS = (256, 4096)
TOP_MARGINS = (8.0, 16.0, 32.0)  # logits below the best: how far the first tier reaches, widened in turn


def _likeliest(logits: np.ndarray, size: int) -> np.ndarray:
    """The ids of at most `size` of the highest logits: those within a margin of the best, the margin
    widened until they are a quarter of `size` (one pass over the row each, where selecting the top
    k of 49k logits costs ten), then cut to `size`."""
    best = logits.max()
    for margin in TOP_MARGINS:
        top = np.flatnonzero(logits >= best - margin)
        if len(top) >= size // 4:
            break
    if len(top) > size:
        top = top[np.argpartition(logits[top], len(top) - size)[len(top) - size :]]
    return top


MAX_REDRAWS = 32  # tokens refused at a lazy grammar's trigger, in one position


class GrammarCheck:
    """A llama.cpp grammar sampler used as llama.cpp's common sampler uses it, for speed.

    Masking the whole vocabulary with a grammar on every token is what makes constrained decoding
    slow elsewhere. Instead: draw from the normal chain, check that one token against the grammar
    (a one-candidate array), and only when it is rejected draw again over the full vocabulary with
    the grammar applied first. The chosen token is then accepted into both samplers. When the
    grammar leaves no candidate at all, the reply ends (see `sample`).
    """

    def __init__(self, runtime, grammar_ptr, gate) -> None:
        ll = self.ll = runtime.ll
        self.runtime = runtime
        self.gate = gate  # llmcli.engine.local.grammar.ThinkGate: when the grammar starts to apply
        self._grammar = grammar_ptr
        self.resamples = 0  # tokens the grammar rejected (for tests and the benchmark)
        self.dead_ends = 0  # times no token could continue the grammar: the reply ended there
        # What ends the reply at a dead end: the model's end-of-generation token (a model without
        # one gets token 0, accepted nowhere, and its reply runs to its length limit instead).
        eos = runtime.eos_id
        self._end = eos if 0 <= eos < runtime.n_vocab and runtime.is_eog(eos) else 0
        n = runtime.n_vocab
        self._ids = np.arange(n, dtype=np.int32)
        self._cands = np.zeros(
            n, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])
        )
        self._all = ll.llama_token_data_array(self._cands.ctypes.data_as(ll.llama_token_data_p), n, -1, False)
        self._top = np.zeros(min(TOP_TIERS[-1], n), dtype=self._cands.dtype)  # see _top_allowed
        self._top_arr = ll.llama_token_data_array(
            self._top.ctypes.data_as(ll.llama_token_data_p), len(self._top), -1, False
        )
        self._one_data = (ll.llama_token_data * 1)()
        self._one = ll.llama_token_data_array(self._one_data, 1, -1, False)

    def _fill(self, ctx, idx: int) -> None:
        """The full candidate array from the logits of batch index idx (samplers reorder it in place,
        so refill)."""
        logits = np.ctypeslib.as_array(self.ll.llama_get_logits_ith(ctx, idx), shape=(len(self._ids),))
        self._cands["id"] = self._ids
        self._cands["logit"] = logits
        self._cands["p"] = 0.0
        arr = self._all
        arr.data = self._cands.ctypes.data_as(self.ll.llama_token_data_p)
        arr.size, arr.selected, arr.sorted = len(self._ids), -1, False

    def _draw(self, sampler, arr=None) -> int:
        import ctypes

        arr = arr if arr is not None else self._all
        self.ll.llama_sampler_apply(sampler, ctypes.byref(arr))
        return int(arr.data[arr.selected].id)

    def _top_allowed(self, ctx, idx: int) -> bool:
        """The grammar applied to the likeliest tokens of logits row idx (into `_top_arr`), in
        widening tiers: True if it allows any. Applying it to the whole vocabulary costs ~50x more
        than to 256 tokens (every token's text against the grammar's stacks), and when the model's
        own choice was refused, an allowed token is most often among its likeliest. Only the others
        are lost to the draw, and only while a likelier one is allowed. When a grammar forces
        markup a model does not know, one allowed token may rank anywhere: the last tier is the
        whole vocabulary (False here)."""
        import ctypes

        logits = np.ctypeslib.as_array(self.ll.llama_get_logits_ith(ctx, idx), shape=(len(self._ids),))
        for size in TOP_TIERS:
            top = _likeliest(logits, size)
            k = len(top)
            self._top["id"][:k], self._top["logit"][:k], self._top["p"][:k] = top, logits[top], 0.0
            arr = self._top_arr
            arr.data = self._top.ctypes.data_as(self.ll.llama_token_data_p)
            arr.size, arr.selected, arr.sorted = k, -1, False
            self.ll.llama_sampler_apply(self._grammar, ctypes.byref(arr))
            if (self._top["logit"][:k] > -np.inf).any():
                return True
            if k == len(logits):
                break
        return False

    def allows(self, token: int, grammar=None) -> bool:
        import ctypes

        one = self._one_data[0]
        one.id, one.logit, one.p = token, 1.0, 0.0
        self._one.size, self._one.selected, self._one.sorted = 1, -1, False
        self.ll.llama_sampler_apply(grammar or self._grammar, ctypes.byref(self._one))
        return one.logit != float("-inf")

    def sample(self, chain, ctx, stateful_chain: bool = True, idx: int = -1) -> int:
        """One token that the grammar allows, from the logits of batch index idx. stateful_chain: the
        chain remembers accepted tokens (penalties), so the first draw must not be accepted before
        the grammar has seen it."""
        import ctypes

        ll = self.ll
        if stateful_chain:
            self._fill(ctx, idx)
            token = self._draw(chain)
        else:  # all in C: the chain's accept is a no-op
            token = int(ll.llama_sampler_sample(chain, ctx, idx))
        if self.gate.state == "undecided" and self.gate.first(token):
            if stateful_chain:
                ll.llama_sampler_accept(chain, token)
            return token  # it opens a thinking block: no grammar yet
        if self.gate.state == "waiting":
            token = self._wait(token, chain, ctx, idx)
            if stateful_chain:
                ll.llama_sampler_accept(chain, token)
            return token
        if not self.allows(token):
            self.resamples += 1
            if self._top_allowed(ctx, idx):
                token = self._draw(chain, self._top_arr)
            else:
                self._fill(ctx, idx)
                ll.llama_sampler_apply(self._grammar, ctypes.byref(self._all))
                if not (self._cands["logit"] > -np.inf).any():
                    # A dead end: no token continues the grammar and it is not complete. Drawing anyway
                    # would hand llama.cpp a token its grammar refuses, and accepting that aborts the
                    # process; end the reply instead, with the end-of-generation token, accepted nowhere.
                    self.dead_ends += 1
                    return self._end
                token = self._draw(chain)
        ll.llama_sampler_accept(self._grammar, token)
        if stateful_chain:
            ll.llama_sampler_accept(chain, token)
        return token

    def _wait(self, token: int, chain, ctx, idx: int) -> int:
        """A lazy grammar's free text: the token as drawn, unless it completes the trigger with text
        after it that the grammar refuses; then it is drawn again without it."""
        gate = self.gate
        refused: list[int] = []
        while True:
            piece = self.runtime.piece(token, special=True)
            verdict = gate.verdict(piece)
            if verdict != "fires" or self._start(gate.from_trigger(piece)):
                break
            refused.append(token)
            self.resamples += 1
            if len(refused) > MAX_REDRAWS:  # no way to write the trigger cleanly here: end the reply
                self.dead_ends += 1
                return self._end
            self._fill(ctx, idx)
            self._cands["logit"][refused] = -np.inf
            token = self._draw(chain)
        gate.advance(piece, verdict)
        return token

    def _start(self, text: bytes) -> bool:
        """Feed the grammar the reply from the trigger on (the trigger, and whatever the token that
        completed it wrote after it), on a copy: llama.cpp aborts on a token its grammar refuses, so
        each is checked first. True, and the copy replaces the grammar, if it accepts it all."""
        try:
            tokens = self.runtime.tokenize(text.decode("utf-8"))
        except UnicodeDecodeError:  # a character cut by the token's end: refuse it, draw another
            return False
        ll = self.ll
        copy = ll.llama_sampler_clone(self._grammar)
        for token in tokens:
            if not self.allows(token, copy):
                ll.llama_sampler_free(copy)
                return False
            ll.llama_sampler_accept(copy, token)
        ll.llama_sampler_free(self._grammar)
        self._grammar = copy
        return True

    def observe(self, token: int) -> None:
        if self.gate.state == "thinking":
            self.gate.observe(self.runtime.piece(token, special=True).decode("utf-8", "replace"))

    def close(self) -> None:
        if self._grammar:
            self.ll.llama_sampler_free(self._grammar)
            self._grammar = None
