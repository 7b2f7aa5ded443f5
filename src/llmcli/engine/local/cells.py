"""The KV cells of one sequence, decoded by its own client: Runtime's single-sequence API on a slot.

Chat serves one sequence: once the scheduler has admitted and prefilled it, the decode loop runs
here, one llama_decode per token over a one-token batch written in place, as fast as the plain loop
(a scheduler step per token would add its bookkeeping to every token). The lookup drafter verifies
its drafts here too (the scheduler's batches do not carry drafts), and the disk prefix cache reads
and writes the state of these cells.
"""

from __future__ import annotations

from llmcli.engine.local.batch import TokenBatch
from llmcli.errors import RuntimeFailure


class SeqCells:
    """What the cells of sequence id `slot` hold (kv_tokens, position by position) and the calls that
    change them: step, decode_all, keep_prefix, state_bytes, load_state, as Runtime has them for
    sequence 0. The scheduler made them and takes them back at release (its caller syncs n_past)."""

    def __init__(self, runtime, slot: int, tokens: list[int], n_ctx: int) -> None:
        ll = self.ll = runtime.ll
        self.rt, self.slot, self.kv_tokens, self.n_ctx = runtime, slot, tokens, n_ctx
        self.is_eog, self.last_log, self.state_bound = runtime.is_eog, runtime.last_log, runtime.state_bound
        self._ctx, self._decode, self._tick = runtime.ctx_ptr, ll.llama_decode, runtime.threads.tick
        self._memory = ll.llama_get_memory(self._ctx)
        self._one = TokenBatch(ll, 1)
        self._one.add_run([0], 0, slot, True)  # the sequence id and the logits flag stay; token, pos change
        self._raw = self._one.for_decode()
        self._tok, self._pos = self._one._token, self._one._pos
        self._many: TokenBatch | None = None

    def step(self, token: int) -> None:
        """Decode one token at the next position (the decode loop's forward pass)."""
        self._tok[0] = token
        self._pos[0] = len(self.kv_tokens)
        self._tick()
        rc = self._decode(self._ctx, self._raw)
        if rc != 0:
            raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.last_log()})")
        self.kv_tokens.append(token)

    def decode_all(self, tokens: list[int]) -> None:
        """Decode tokens in one batch with logits at every position (batch index i = tokens[i])."""
        n, start = len(tokens), len(self.kv_tokens)
        if n > self.rt.n_batch or start + n > self.n_ctx:
            raise RuntimeFailure(
                f"a batch of {n} tokens does not fit at position {start}; raise --ctx or draft fewer tokens"
            )
        batch = self._many
        if batch is None:  # every position of this sequence, logits at each: only tokens and positions change
            batch = self._many = TokenBatch(self.ll, self.rt.n_batch)
            batch.add_scored([0] * batch.capacity, 0, self.slot)
        batch._token[:n] = tokens
        batch._pos[:n] = range(start, start + n)
        batch.n = n
        self._tick()
        rc = self._decode(self._ctx, batch.for_decode())
        if rc != 0:
            raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.last_log()})")
        self.kv_tokens.extend(tokens)

    def keep_prefix(self, n_keep: int) -> int:
        """Drop every position from n_keep on; return how many are kept."""
        n_keep = max(0, min(n_keep, len(self.kv_tokens)))
        if n_keep == len(self.kv_tokens):
            return n_keep
        if not self.ll.llama_memory_seq_rm(self._memory, self.slot, n_keep, -1):
            self.clear()  # some memory types (recurrent) cannot cut a sequence; start over
            return 0
        del self.kv_tokens[n_keep:]
        return n_keep

    def clear(self) -> None:
        self.ll.llama_memory_seq_rm(self._memory, self.slot, -1, -1)
        self.kv_tokens.clear()

    def state_bytes(self) -> bytearray:
        return self.rt.state_bytes(self.slot)

    def load_state(self, data: bytes | bytearray | memoryview, tokens: list[int]) -> bool:
        """Replace what the cells hold with a state that holds `tokens`; False (the cells empty) when
        llama.cpp refuses it."""
        self.clear()
        if len(tokens) > self.n_ctx or not self.rt.set_seq_state(data, self.slot):
            self.clear()
            return False
        self.kv_tokens[:] = tokens
        return True

    def close(self) -> None:
        self._one.close()
        if self._many is not None:
            self._many.close()
