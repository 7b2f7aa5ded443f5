"""llama.cpp side of the bench: pp<N> and tg<N> exactly as llama-bench measures them.

The loops mirror llama-bench's test_prompt/test_gen (tools/llama-bench/llama-bench.cpp):
- pp: N random token ids (BOS first when the model adds one), fed in n_batch chunks, then one
  llama_synchronize; only the last token of a chunk asks for logits.
- tg: one token per llama_decode, each followed by llama_synchronize, starting from BOS.
- a warm-up pass of each test first, and the KV memory cleared before every repetition.
The loops run on the engine's Runtime, so bench measures the very load, thread and flash-attention
settings that `llmcli chat` runs with; its prefill/step are one ctypes call into libllama each.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from llmcli.bench.memory import reset_peak_rss
from llmcli.bench.records import LLAMA, BenchPlan, BenchRow, BenchTest, Progress, measure

KV_TYPE = "f16"  # llama.cpp's default K/V cache type, which we do not change
KV_BYTES_PER_ELEMENT = 2.0


@dataclass
class LlamaTarget:
    """A GGUF to measure, with the name the user knows it by."""

    name: str
    path: str


def cpu_info() -> str:
    """The CPU's model name, as llama-bench's cpu_info field reports it."""
    from llmcli.machine import this_cpu

    return this_cpu().model


class _Runner:
    """The two llama-bench loops on the engine's Runtime (the same load, threads and flash-attention
    settings that `llmcli chat` uses), with the random ids drawn before the clock starts."""

    def __init__(self, rt, seed: int) -> None:
        self.rt = rt
        self.rng = random.Random(seed)

    def _random_ids(self, n: int) -> list[int]:
        ids = [self.rng.randrange(self.rt.n_vocab) for _ in range(n)]
        if ids and self.rt.add_bos:  # as llama-bench: BOS first when the model adds one
            ids[0] = self.rt.bos_id
        return ids

    def prompt(self, n_prompt: int) -> int:
        """Prefill n_prompt random ids in n_batch chunks, then synchronize; returns elapsed ns."""
        ids = self._random_ids(n_prompt)
        t0 = time.perf_counter_ns()
        self.rt.prefill(ids)
        self.rt.synchronize()
        return time.perf_counter_ns() - t0

    def gen(self, n_gen: int) -> int:
        """Decode n_gen tokens one per step, synchronizing after each; returns elapsed ns."""
        ids = self._random_ids(n_gen)
        step, sync = self.rt.step, self.rt.synchronize
        t0 = time.perf_counter_ns()
        for tok in ids:
            step(tok)
            sync()
        return time.perf_counter_ns() - t0

    def run(self, test: BenchTest) -> int:
        """One repetition of a test from an empty KV memory; returns elapsed ns."""
        self.rt.clear()
        ns = 0
        if test.n_prompt:
            ns += self.prompt(test.n_prompt)
        if test.n_gen:
            ns += self.gen(test.n_gen)
        return ns

    def warmup(self, test: BenchTest) -> None:
        # As llama-bench: a full prompt pass and a single generation step.
        self.rt.clear()
        if test.n_prompt:
            self.prompt(test.n_prompt)
        if test.n_gen:
            self.gen(1)


def row_fields(target: LlamaTarget, rt, plan: BenchPlan, facts) -> dict:
    """The BenchRow fields every row of one loaded model shares."""
    per_token = facts.kv_bytes_per_token(KV_BYTES_PER_ELEMENT)
    return dict(
        model_filename=target.path,
        model_type=rt.description,
        model_size=rt.model_size,
        model_n_params=rt.n_params,
        n_batch=plan.n_batch,
        n_ubatch=plan.n_batch,  # as asked, like llama-bench
        # llama-bench's encoding: -1 auto (the Runtime's "on": wherever the backend supports it), 0 off
        flash_attn=-1 if plan.flash_attn else 0,
        type_k=KV_TYPE,
        type_v=KV_TYPE,
        cpu_info=cpu_info(),
        backend=LLAMA,
        model=target.name,
        n_ctx=rt.n_ctx,
        kv_cache_bytes=per_token * rt.n_ctx if per_token is not None else None,
        backends=rt.placement.backends,
        gpu_info=rt.placement.gpu_info,
        n_gpu_layers=rt.placement.offloaded,
        placement=rt.placement.as_dict(),
    )


def run_llama(target: LlamaTarget, plan: BenchPlan) -> Iterator[Progress | BenchRow]:
    """Measure every (threads, test) of the plan on one GGUF; yields progress, then each row."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.gguf_check import model_facts

    facts = model_facts(target.path)  # validates the file before llama.cpp opens it
    reset_peak_rss()
    yield Progress(model=target.name, backend=LLAMA, stage="load")
    rt = Runtime(
        target.path,
        RuntimeConfig(
            n_ctx=plan.ctx_size,
            n_threads=plan.threads[0],
            n_batch=plan.n_batch,
            flash_attn=plan.flash_attn,
            gpu_layers=plan.gpu_layers,
        ),
    )
    try:

        def set_threads(n: int) -> None:
            rt.ll.llama_set_n_threads(rt.ctx_ptr, n, n)

        common = row_fields(target, rt, plan, facts)
        yield from measure(_Runner(rt, plan.seed), plan, target.name, LLAMA, set_threads, common)
    finally:
        rt.close()
