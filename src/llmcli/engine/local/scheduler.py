"""Many sequences over one llama context: one llama_decode per step, each sequence sampled at its row.

A step (llama-server's update_slots, in small):
  release what was cancelled → admit waiting sequences (a slot, KV cells, a shared prefix)
  → one batch: every generating sequence's last token, then capped prefill chunks
  → llama_decode (on "no KV slot": evict idle prefixes, else defer the newest sequence, and retry)
  → sample each sequence at its batch index → post-process → release the finished → admit again.

The KV pool is n_ctx cells. With kv_unified every sequence draws on the whole pool and a prefix can
be shared between live sequences (llama_memory_seq_cp adds a sequence id to the same cells);
without it each of the n_seq_max sequences owns n_ctx / n_seq_max cells of its own stream.
n choices of one prompt are forks of its first: admitted with it, they take its prompt's cells and
sample their first tokens from its logits row, so the prompt is prefilled once.
A driven sequence (a chat's) is admitted, prefilled and released here, decoded by its client (cells.py).
Which waiting sequence starts where, and the slots' bookkeeping, is admission.py's.
"""

from __future__ import annotations

import time
from collections import deque
from operator import attrgetter

from llmcli.engine.local.admission import Admission, cells_needed
from llmcli.engine.local.batch import TokenBatch
from llmcli.engine.local.cells import SeqCells
from llmcli.engine.local.graph_greedy import GraphGreedy
from llmcli.engine.local.logits import LogitBlock
from llmcli.engine.local.sampler import SamplerPool
from llmcli.engine.local.scheduler_config import NeverFits, SchedulerConfig, SchedulerCounters
from llmcli.engine.local.sequence import DONE, RUNNING, WAITING, Request, SeqEvent, Sequence
from llmcli.errors import RuntimeFailure, UsageError

SLOT = attrgetter("slot")


class Scheduler:
    """Serves Requests on `runtime`'s context (a Runtime made with RuntimeConfig(n_seq_max=N))."""

    def __init__(self, runtime, config: SchedulerConfig | None = None) -> None:
        self.rt = runtime
        self.ll = ll = runtime.ll
        self.config = config or SchedulerConfig()
        self._ctx = ctx = runtime.ctx_ptr  # the runtime's for as long as it is loaded
        self.n_slots = int(ll.llama_n_seq_max(ctx))
        self.n_ctx = int(ll.llama_n_ctx(ctx))
        self.n_ctx_seq = int(ll.llama_n_ctx_seq(ctx))  # cells one sequence can ever hold
        self.unified = self.n_slots == 1 or self.n_ctx_seq * self.n_slots > self.n_ctx
        self.n_batch = runtime.n_batch
        self.batch = TokenBatch(ll, self.n_batch)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order
        self.counters = SchedulerCounters()
        self.admission = Admission(ll, ll.llama_get_memory(ctx), self.config, self.counters, self.n_slots)
        self.pool = SamplerPool(runtime)  # finished chains, reset and reused
        self.block = LogitBlock(ll, ctx, runtime.n_vocab)
        in_graph = self.config.greedy_in_graph
        if in_graph is None:  # where the output layer is on a GPU: ggml's CPU argmax is slower than numpy's
            in_graph = runtime.placement.offloaded > 0
        self.graph = GraphGreedy(ll, ctx, self.n_slots) if in_graph else None
        self._generating: list[Sequence] = []  # this step's, rows 0.. of its batch
        self._pending_events: list[SeqEvent] = []
        self._cancelled = False  # a running sequence's cancel waits for the next step
        self._next_id = 0
        runtime.clear()  # the scheduler owns the context's cells from here on

    # -- the client's side -------------------------------------------------------------------
    def submit(self, request: Request, fork_of: Sequence | None = None) -> Sequence:
        """Queue a request. NeverFits (a UsageError) when it could not fit even alone. fork_of: the
        first choice of the same prompt (n choices): admitted with it, this one shares its prompt's
        cells and samples its first token from the same logits row, so the prompt is prefilled once."""
        n_prompt, budget = len(request.prompt), request.budget
        if not n_prompt:
            raise UsageError("an empty prompt gives the model nothing to continue; send at least one token")
        if budget < 1:
            raise UsageError(f"max tokens must be at least 1, not {budget}")
        seq = Sequence(self._next_id, request)
        need = cells_needed(seq, self.config.reserve)
        if need > self.n_ctx_seq:
            raise NeverFits(
                f"the prompt ({n_prompt} tokens) and its reply budget ({budget}) need {need} KV cells "
                f"and a sequence can hold {self.n_ctx_seq}; shorten the prompt, lower --max-tokens "
                "or raise --ctx"
            )
        seq.fork_of = fork_of
        self._next_id += 1
        self.waiting.append(seq)
        return seq

    def cancel(self, seq: Sequence) -> None:
        """Stop it: a waiting one at once, a running one at the start of the next step (its cells free)."""
        if seq.state == DONE:
            return
        seq.cancel_requested = True
        self._cancelled = seq.state == RUNNING or self._cancelled
        if seq.state == WAITING:
            self.waiting.remove(seq)
            seq.state = DONE
            self._return_sampler(seq)
            self._pending_events.append(seq.finish("cancelled"))

    # -- a client that drives its one sequence (chat): admit, prefill by steps, decode in SeqCells
    def cells(self, seq: Sequence) -> SeqCells:
        """The cells of a running sequence, for its client to read, restore into and decode in; the
        client sets seq.n_past to len(kv_tokens) before it releases seq."""
        return SeqCells(self.rt, seq.slot, seq.tokens()[: seq.n_past], self.n_ctx_seq)

    def release(self, seq: Sequence, keep: bool) -> None:
        """End a driven sequence: free its cells, or keep them as an idle prefix, and admit the next."""
        if seq.state == RUNNING:
            self._release(seq, keep)
            self.admit()

    def forget(self, slot: int) -> None:
        """Empty an idle slot whose cells were changed behind the scheduler's back."""
        if slot in self.admission.idle:
            self.admission.evict(slot)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running or self._pending_events)

    def run(self) -> list[SeqEvent]:
        """Step until every submitted sequence is done; every event, in order."""
        events: list[SeqEvent] = []
        while self.busy:
            calls = self.counters.decode_calls
            new = self.step()
            if not new and calls == self.counters.decode_calls:
                # Nothing decoded and nothing ended: stepping again would spin for ever.
                raise RuntimeFailure(
                    f"the scheduler cannot place {len(self.waiting)} waiting sequences in "
                    f"{self.n_ctx} KV cells; raise --ctx"
                )
            events += new
        return events

    # -- one step ----------------------------------------------------------------------------
    def step(self) -> list[SeqEvent]:
        t0 = time.perf_counter()
        events, self._pending_events = self._pending_events, []
        if self._cancelled:  # a running sequence was cancelled since the last step
            self._cancelled = False
            for seq in [s for s in self.running if s.cancel_requested]:
                events.append(seq.finish("cancelled"))
                self._release(seq, keep=False)
        self.admit()
        while True:
            plan = self._fill_batch()
            if not plan:
                return events
            self.rt.threads.tick()  # the thread count follows what else keeps the cores busy
            rc = int(self.ll.llama_decode(self._ctx, self.batch.for_decode()))
            self.counters.decode_calls += 1
            if rc == 0:
                break
            if rc != 1:
                raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.rt.last_log()})")
            self.counters.no_slot += 1
            events += self._make_room(plan)
        self._after_decode(plan, events)
        if self.waiting:
            self.admit()  # the cells released in this step go to waiting sequences now
        self.counters.step_ms.append((time.perf_counter() - t0) * 1000)
        return events

    def _fill_batch(self) -> list[tuple[Sequence, int]]:
        """The next batch: every generating sequence's last token first, then prefill chunks."""
        batch, plan = self.batch, []
        batch.n = 0  # cleared
        # Slot order: with a KV stream per sequence, llama.cpp cuts a batch where ids stop being consecutive
        running, generating = self.running, []
        for seq in running:  # seq.prefilling, inlined: this runs for every sequence of every step
            seq.i_batch = -1
            generated = seq.generated
            if generated and len(seq.prompt) + len(generated) - seq.n_past <= 1 and not seq.request.driven:
                generating.append(seq)
        if len(generating) > 1:
            generating.sort(key=SLOT)
        if self.config.prefill_first and len(generating) < len(running):
            generating = []
        if generating:  # one slice write per field for them all, and rows 0.. of the logits
            tokens, positions, slots = [], [], []
            for i, seq in enumerate(generating, batch.n):
                seq.i_batch = i
                tokens.append(seq.generated[-1])
                positions.append(seq.n_past)
                slots.append(seq.slot)
                plan.append((seq, 1))
            batch.add_lasts(tokens, positions, slots)
        self._generating = generating
        if len(generating) == len(running):  # nothing to prefill: every running sequence generates
            return plan
        room = self.n_batch - len(generating)
        budget = min(room, self.config.prefill_chunk) if generating else room
        for seq in running:
            if budget <= 0:
                break
            if not seq.prefilling or (seq.wait_for is not None and not self.admission.copy_prefix(seq)):
                continue
            chunk = seq.pending(budget)
            last = seq.n_past + len(chunk) == seq.n_tokens
            seq.i_batch = batch.add_run(chunk, seq.n_past, seq.slot, last)
            plan.append((seq, len(chunk)))
            budget -= len(chunk)
        return plan

    def _after_decode(self, plan: list[tuple[Sequence, int]], events: list[SeqEvent]) -> None:
        generating = self._generating
        for seq in generating:  # plan's first entries, one token each
            seq.n_past += 1
        for seq, n in plan[len(generating) :]:
            if seq.prefilling:
                seq.stats.prefill_tokens += n
            seq.n_past += n
        greedy, rt, room = self._greedy(), self.rt, self.n_ctx_seq
        for j, (seq, _) in enumerate(plan):
            if seq.i_batch < 0 or seq.request.driven:  # its client samples it at i_batch
                continue
            first = seq.stats.t_first is None
            event = seq.sample(rt, room, greedy[j] if j < len(greedy) else self._picked(seq))
            events.append(event)
            if first:  # before seq's release: its forks take its cells and read its logits row
                n = len(seq.prompt)
                for fork in [s for s in self.running if s.wait_for is not None and s.wait_for == (seq, n)]:
                    self.admission.give_cells(fork, seq, n)
                    fork.i_batch = seq.i_batch
                    events.append(fork.sample(rt, room, self._picked(fork)))
                    self._release_if_done(fork, events[-1])
            if event.finish_reason is not None:  # _release_if_done, inlined for every sequence's step
                self._release(seq, keep=event.finish_reason != "cancelled")

    def _greedy(self) -> list[int]:
        """The tokens of this step's generating sequences (plan's first entries), when every one of
        them samples greedily: picked in llama.cpp's graph where each has its chain (graph_greedy.py),
        else one argmax over their rows instead of a numpy call each."""
        generating, graph = self._generating, self.graph
        if not generating:
            return []
        if graph is not None:
            chained = [graph.has(s.slot) for s in generating]
            if all(chained):
                return graph.tokens(len(generating))
            if any(chained):  # each its own: the picked rows and the others lie in two buffers
                return []
        if not all(s.sampler is not None and s.sampler.greedy for s in generating):
            return []
        rows = self.block.first(len(generating))
        return [] if rows is None else rows.argmax(axis=1).tolist()

    def _picked(self, seq: Sequence) -> int | None:
        """Its token where llama.cpp picked it in the graph (a chain on its slot), else None: it
        samples its own row. A fork reads its first choice's row, picked there by the same kind of
        chain: n choices share their sampling parameters, grammar and log-probabilities."""
        graph = self.graph
        return graph.token(seq.i_batch) if graph is not None and graph.has(seq.slot) else None

    def _release_if_done(self, seq: Sequence, event: SeqEvent) -> None:
        if event.finish_reason is not None:
            self._release(seq, keep=event.finish_reason != "cancelled")

    # -- admission and release ---------------------------------------------------------------
    def admit(self) -> None:
        """Admit the waiting sequences that fit now. A step does it; the client of a driven sequence
        calls it first, to restore a cached prefix into its cells before they are prefilled."""
        if not self.waiting:
            return
        pool = self.n_ctx if self.unified else None
        for seq in self.admission.admit(self.waiting, self.running, pool):
            if seq.sampler is None:
                seq.sampler = self.pool.take(seq.request.params)
                seq.sampler.grammar = seq.request.grammar
            if self.graph is not None:  # a chain on its slot only if it needs nothing but the ids
                request = seq.request
                self.graph.place(
                    seq.slot, seq.sampler.greedy and request.logprobs is None and not request.driven
                )

    def _release(self, seq: Sequence, keep: bool) -> None:
        """Free its cells at once (or keep them as an idle prefix) and its slot."""
        self.running.remove(seq)
        seq.state = DONE
        slot, seq.slot = seq.slot, -1
        keep = keep and self.config.keep_prefixes and seq.n_past > 0
        self.admission.release(slot, seq.tokens()[: seq.n_past] if keep else None)
        self._return_sampler(seq)

    def _make_room(self, plan: list[tuple[Sequence, int]]) -> list[SeqEvent]:
        """llama_decode found no KV slot for the batch: free cells without losing any work for good."""
        if self.admission.idle:
            for slot in list(self.admission.idle):
                self.admission.evict(slot)
            return []
        if len(self.running) > 1:
            self._defer(self.running[-1])
            return []
        # One sequence alone does not fit the pool that is left: its reply ends here.
        seq = self.running[0]
        event = seq.finish("length")
        self._release(seq, keep=False)
        return [event]

    def _defer(self, seq: Sequence) -> None:
        """Give back its cells and queue it first again; it prefills prompt + reply when readmitted."""
        self.running.remove(seq)
        self.admission.drop(seq.slot)
        seq.slot, seq.n_past, seq.reserved, seq.i_batch, seq.state = -1, 0, 0, -1, WAITING
        seq.wait_for = None
        seq.stats.deferrals += 1
        self.counters.deferrals += 1
        self.waiting.appendleft(seq)
        self.admission.hold = True

    def _return_sampler(self, seq: Sequence) -> None:
        sampler, seq.sampler = seq.sampler, None
        if seq.request.grammar is not None:
            seq.request.grammar.close()  # its state was this sequence's
        if sampler is not None:
            self.pool.give(sampler, seq.request.params)

    def close(self) -> None:
        """Free every cell and sampler; the runtime stays loaded (its owner closes it)."""
        for seq in list(self.running):
            self._release(seq, keep=False)
        for slot in list(self.admission.idle):
            self.admission.evict(slot)
        if self.graph is not None:
            self.graph.close()
        self.pool.close()
        self.batch.close()
