"""The records that cross the bench's layers (what to measure, one measured row) and the one measurement loop.

Field names of `BenchRow` follow llama-bench's JSON output (`llama-bench -o json`) so that tools
reading llama-bench results read ours; the extra fields come after them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Protocol

from llmcli.offload import EVERY_LAYER, GpuLayers

# Backend names as they appear in rows, tables and `--backend`; aliases a user may type.
LLAMA = "llama.cpp"
TRANSFORMERS = "transformers"
BACKEND_ALIASES: dict[str, str] = {
    "llama": LLAMA,
    "llama.cpp": LLAMA,
    "llamacpp": LLAMA,
    "transformers": TRANSFORMERS,
    "hf": TRANSFORMERS,
}


@dataclass(frozen=True)
class BenchTest:
    """One llama-bench test: pp<N> (n_prompt tokens in batches) or tg<N> (n_gen single steps)."""

    n_prompt: int
    n_gen: int

    @property
    def name(self) -> str:
        # llama-bench names a test by what it measures; pp+tg together is "pp512+tg128".
        parts = [f"pp{self.n_prompt}"] if self.n_prompt else []
        parts += [f"tg{self.n_gen}"] if self.n_gen else []
        return "+".join(parts)

    @property
    def n_tokens(self) -> int:
        return self.n_prompt + self.n_gen


@dataclass
class BenchPlan:
    """What one `llmcli bench` run measures, already validated (see runner.make_plan)."""

    tests: list[BenchTest]
    threads: list[int]
    repetitions: int = 5
    n_batch: int = 512  # the engine's default; the physical batch (n_ubatch) is the same
    n_ctx: int | None = None  # None: just enough for the largest test, as llama-bench does
    flash_attn: bool = True
    warmup: bool = True
    seed: int = 1234  # random token ids are reproducible run to run
    draft: str = "none"  # "lookup": also a copy task, plain and drafted (bench/copy.py)
    gpu_layers: GpuLayers = EVERY_LAYER  # --gpu-layers: llama.cpp's n_gpu_layers (every layer by default)

    @property
    def ctx_needed(self) -> int:
        # Room for the longest prompt followed by the longest generation (-p + --n-gen), so a context
        # that passes here also fits a pp+tg test or a chat turn of that shape.
        return max(t.n_prompt for t in self.tests) + max(t.n_gen for t in self.tests)

    @property
    def ctx_size(self) -> int:
        return self.n_ctx or self.ctx_needed


@dataclass
class Progress:
    """A step the bench is on, for a progress line on stderr."""

    model: str
    backend: str
    stage: str  # "load", "warmup", "run"; "wait": a server still loading its model (bench/serve.py)
    test: str = ""
    n_threads: int = 0
    rep: int = 0
    reps: int = 0


@dataclass
class BenchRow:
    """One measured row: a model × backend × threads × test, mean and spread over repetitions."""

    # llama-bench's own fields, same names and meaning
    model_filename: str
    model_type: str
    model_size: int
    model_n_params: int
    n_batch: int
    n_ubatch: int
    n_threads: int
    flash_attn: int  # llama-bench writes 1/0
    type_k: str
    type_v: str
    n_prompt: int
    n_gen: int
    n_depth: int = 0
    backends: str = "CPU"  # the backends that held layers: CUDA, Metal, CPU
    cpu_info: str = ""
    gpu_info: str = ""
    n_gpu_layers: int = 0  # layers llama.cpp offloaded, as it reported them (not what was asked)
    test_time: str = ""
    avg_ns: int = 0
    stddev_ns: int = 0
    avg_ts: float = 0.0
    stddev_ts: float = 0.0
    samples_ns: list[int] = field(default_factory=list)
    samples_ts: list[float] = field(default_factory=list)
    # ours
    test: str = ""
    backend: str = LLAMA
    model: str = ""  # the name a user gave or the store knows
    n_ctx: int = 0
    kv_cache_bytes: int | None = None  # K and V for n_ctx tokens
    peak_rss_bytes: int | None = None  # the process's peak resident set while this model ran
    ttft_ms: float | None = None  # pp rows: time until the first token's logits exist
    speedup: float | None = None  # avg_ts / the transformers row's avg_ts, same model & test & threads
    draft_acceptance: float | None = None  # copy rows with drafting: accepted / drafted tokens
    placement: dict | None = None  # llama.cpp rows: where the layers and the KV cache went (Placement)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def measured(cls, samples_ns: list[int], n_tokens: int, **fields) -> BenchRow:
        """A row from raw per-repetition durations, with llama-bench's statistics."""
        samples_ts = [n_tokens * 1e9 / ns for ns in samples_ns]
        return cls(
            test_time=datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            avg_ns=int(mean(samples_ns)),
            stddev_ns=int(stdev(samples_ns)),
            avg_ts=mean(samples_ts),
            stddev_ts=stdev(samples_ts),
            samples_ns=list(samples_ns),
            samples_ts=samples_ts,
            **fields,
        )


class Loops(Protocol):
    """A backend's two measurement loops: one timed repetition of a test, and its warm-up."""

    def run(self, test: BenchTest) -> int: ...  # elapsed ns, from an empty KV cache

    def warmup(self, test: BenchTest) -> None: ...


def measure(
    loops: Loops,
    plan: BenchPlan,
    model: str,
    backend: str,
    set_threads: Callable[[int], None],
    common: dict,
) -> Iterator[Progress | BenchRow]:
    """Every (threads, test) of the plan on one loaded model, the same way for every backend:
    warm-up, the repetitions, one row of their statistics. Yields progress, then each row."""
    from llmcli.bench.memory import peak_rss_bytes

    for n_threads in plan.threads:
        set_threads(n_threads)  # one load serves every thread count, as llama-bench keeps the model
        for test in plan.tests:
            if plan.warmup:
                yield Progress(model, backend, "warmup", test.name, n_threads)
                loops.warmup(test)
            samples = []
            for rep in range(plan.repetitions):
                yield Progress(model, backend, "run", test.name, n_threads, rep + 1, plan.repetitions)
                samples.append(loops.run(test))
            row = BenchRow.measured(
                samples,
                test.n_tokens,
                n_threads=n_threads,
                n_prompt=test.n_prompt,
                n_gen=test.n_gen,
                test=test.name,
                peak_rss_bytes=peak_rss_bytes(),
                **common,
            )
            if test.n_prompt and not test.n_gen:
                row.ttft_ms = row.avg_ns / 1e6  # prefill ends with the first token's logits
            yield row


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def stdev(values: Sequence[float], ddof: int = 1) -> float:
    """Standard deviation with `ddof` delta degrees of freedom, as numpy.std counts them.

    ddof=1 (the default): the sample deviation, as llama-bench computes it; ddof=0: the population
    deviation, as numpy.std's default (and so vLLM's std_*_ms). 0 when there are too few samples.
    """
    if len(values) <= ddof:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - ddof))
