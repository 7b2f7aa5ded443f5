"""The scheduler's settings and counters, and the refusal of a sequence that can never fit."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from llmcli.errors import ContextOverflow


class NeverFits(ContextOverflow):
    """A sequence that no amount of waiting would make fit the KV pool (exit 2)."""


@dataclass
class SchedulerConfig:
    # Prefill tokens per step while other sequences are generating: a long prompt is fed in chunks,
    # so the others' time between tokens grows by one chunk's compute, not by the whole prompt.
    # When nothing is generating, a step takes up to n_batch prompt tokens.
    prefill_chunk: int = 128
    reserve: bool = True  # admission sets aside prompt + max_tokens cells (else prompt cells only)
    keep_prefixes: bool = True  # a finished sequence's cells stay, as a prefix to share, until needed
    share_prefixes: bool = True
    min_shared: int = 4  # a shorter common prefix is prefilled again rather than copied
    # No decoding while a prompt is being prefilled (llama-batched-bench's phases: all prompts, then
    # all replies); the default interleaves them, so that generating sequences never stall.
    prefill_first: bool = False
    # Greedy picks of sequences that need only the ids made in llama.cpp's graph (graph_greedy.py):
    # None: where the model's output layer is on a GPU (on the CPU backend numpy's argmax is faster).
    greedy_in_graph: bool | None = None


@dataclass
class SchedulerCounters:
    decode_calls: int = 0
    no_slot: int = 0  # llama_decode returned 1
    deferrals: int = 0
    evictions: int = 0  # idle prefixes dropped to make room
    shared_tokens: int = 0
    # The latest steps' times: a server steps for as long as it runs, and a list would grow with it.
    step_ms: deque[float] = field(default_factory=lambda: deque(maxlen=4096))
