"""Which waiting sequences start, in which KV slot, and which of their cells they need not prefill.

Admission owns the slots: the free ones, and the idle ones whose cells a finished sequence left as a
prefix to share (least recently used first). A waiting sequence starts in
  - its fork's slot-to-be: n choices of one prompt take the first choice's prompt cells once it has
    computed them ("fork"; the scheduler hands them over when it samples the first choice),
  - an idle slot holding a prefix of its tokens ("idle": the cells past the prefix are cut),
  - a free slot, copying a running sequence's prefix once that one has computed it ("live"),
  - or a free slot, prefilling everything ("none").
With kv_unified every sequence draws on one pool of n_ctx cells: a sequence starts only when its
estimate (prompt + reply budget, less what it shares) fits beside the others, evicting idle prefixes.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass

from llmcli.engine.local.prefix_cache import common_prefix
from llmcli.engine.local.scheduler_config import SchedulerConfig, SchedulerCounters
from llmcli.engine.local.sequence import RUNNING, Sequence


def cells_needed(seq: Sequence, reserve: bool) -> int:
    """The KV cells seq will hold: its tokens, and with `reserve` the rest of its reply budget.
    The last token of a reply is sampled, never decoded: n reply tokens occupy n - 1 cells."""
    return seq.n_tokens + (seq.max_tokens - len(seq.generated) - 1 if reserve else 0)


@dataclass(frozen=True)
class SlotPlan:
    """Where a sequence starts: its slot, where its first `shared` cells come from (`source`, and for
    "live" the index of the running sequence that holds them)."""

    slot: int
    source: str  # "fork" | "idle" | "live" | "none"
    shared: int = 0
    src: int = -1


class Admission:
    """The KV slots of one context and the policy that hands them to waiting sequences."""

    def __init__(self, ll, memory, config: SchedulerConfig, counters: SchedulerCounters, n_slots: int):
        self.ll, self._memory = ll, memory
        self.config, self.counters = config, counters
        self.free_slots: list[int] = list(range(n_slots))
        self.idle: OrderedDict[int, list[int]] = OrderedDict()  # slot -> the tokens its cells hold (LRU)
        self.hold = False  # a sequence was deferred: admit nothing more until a release

    # -- admission ---------------------------------------------------------------------------
    def admit(self, waiting: deque[Sequence], running: list[Sequence], n_ctx: int | None) -> list[Sequence]:
        """Start the waiting sequences that fit now, first come first served; each joins `running`.
        n_ctx: the one pool every sequence draws on (kv_unified), None with a stream per sequence.
        The sequences started, in order."""
        started: list[Sequence] = []
        while waiting and not self.hold:
            seq = waiting[0]
            placed = self._place(seq, running, unified=n_ctx is not None)
            if placed is None:
                break
            need = cells_needed(seq, self.config.reserve)
            need -= placed.shared if placed.source in ("live", "fork") else 0
            if n_ctx is not None and not self._room_for(need, placed.slot, running, n_ctx):
                if placed.slot not in self.idle:
                    self.free_slots.append(placed.slot)
                break
            waiting.popleft()
            self._start(seq, placed, need, running)
            started.append(seq)
        return started

    def _room_for(self, need: int, keep: int, running: list[Sequence], n_ctx: int) -> bool:
        """Evict idle prefixes (least recently used first, not `keep`) until `need` cells are free."""
        while self.used_cells(running) - len(self.idle.get(keep, ())) + need > n_ctx:
            victims = [slot for slot in self.idle if slot != keep]
            if not victims:
                return False
            self.evict(victims[0])
        return True

    def used_cells(self, running: list[Sequence]) -> int:
        return sum(s.reserved for s in running) + sum(len(t) for t in self.idle.values())

    def _place(self, seq: Sequence, running: list[Sequence], unified: bool) -> SlotPlan | None:
        """A slot for seq and where its first cells come from; None: no slot yet."""
        lead = seq.fork_of
        if unified and lead is not None and lead.state == RUNNING and lead.stats.t_first is None:
            dst = self._free_slot()
            return None if dst is None else SlotPlan(dst, "fork", len(seq.prompt))
        tokens, cap = seq.tokens(), seq.n_tokens - 1  # the last token is computed again, for logits
        best, best_len = None, 0
        if self.config.share_prefixes:
            sources = [("idle", slot, held) for slot, held in self.idle.items()]
            if unified:  # what a live sequence holds, or will once its prompt is prefilled
                sources += [
                    ("live", i, s.tokens()[: max(s.n_past, len(s.prompt))])
                    for i, s in enumerate(running)
                    if s.wait_for is None
                ]
            for kind, src, held in sources:
                n = min(common_prefix(held, tokens), cap)
                if n > best_len:
                    best, best_len = (kind, src), n
        if best is not None and best_len >= self.config.min_shared:
            kind, src = best
            if kind == "idle":  # taken over in _start, once the cells are granted
                return SlotPlan(src, "idle", best_len, src)
            dst = self._free_slot()
            if dst is not None:
                return SlotPlan(dst, "live", best_len, src)
        dst = self._free_slot()
        return None if dst is None else SlotPlan(dst, "none")

    def _free_slot(self) -> int | None:
        if not self.free_slots and self.idle:
            self.evict(next(iter(self.idle)))
        return self.free_slots.pop(0) if self.free_slots else None

    def _start(self, seq: Sequence, placed: SlotPlan, need: int, running: list[Sequence]) -> None:
        ll, mem, slot, shared = self.ll, self._memory, placed.slot, placed.shared
        if placed.source == "idle":
            del self.idle[slot]
            if not ll.llama_memory_seq_rm(mem, slot, shared, -1):
                # A state that cannot be cut (recurrent): start over.
                ll.llama_memory_seq_rm(mem, slot, -1, -1)
                shared = 0
        seq.slot, seq.n_past, seq.reserved, seq.state = slot, 0, need, RUNNING
        if placed.source == "fork" and seq.fork_of is not None:  # its cells and first token: the scheduler's
            seq.wait_for = (seq.fork_of, shared)
        elif placed.source == "live":
            seq.wait_for = (running[placed.src], shared)
            self.copy_prefix(seq)
        elif shared:
            seq.n_past = shared
            seq.stats.shared_tokens += shared
            self.counters.shared_tokens += shared
        if seq.stats.t_admit is None:
            seq.stats.t_admit = time.perf_counter()
        running.append(seq)

    # -- shared prefixes ---------------------------------------------------------------------
    def copy_prefix(self, seq: Sequence) -> bool:
        """Give seq the prefix it waits for, once its source has computed it (llama_memory_seq_cp adds
        seq's id to the same cells). False: not yet. A source that left first: seq prefills it."""
        assert seq.wait_for is not None
        src, n = seq.wait_for
        if src.state != RUNNING:
            seq.wait_for = None
            return True
        if src.n_past < n:
            return False
        self.give_cells(seq, src, min(n, seq.n_tokens - 1))
        return True

    def give_cells(self, seq: Sequence, src: Sequence, n: int) -> None:
        self.ll.llama_memory_seq_cp(self._memory, src.slot, seq.slot, 0, n)
        seq.wait_for, seq.n_past = None, n
        seq.stats.shared_tokens += n
        self.counters.shared_tokens += n

    # -- giving slots back -------------------------------------------------------------------
    def release(self, slot: int, kept: list[int] | None) -> None:
        """A sequence left `slot`: keep its cells as an idle prefix (`kept`: the tokens they hold) or
        free them. Admission may go on."""
        if kept:
            self.idle[slot] = kept
        else:
            self.drop(slot)
        self.hold = False

    def drop(self, slot: int) -> None:
        """Empty slot's cells and free it."""
        self.ll.llama_memory_seq_rm(self._memory, slot, -1, -1)
        self.free_slots.append(slot)

    def evict(self, slot: int) -> None:
        del self.idle[slot]
        self.drop(slot)
        self.counters.evictions += 1
