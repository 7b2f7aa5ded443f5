"""`bench --chat`: a scripted conversation through the whole chat pipeline, and what it costs.

Every turn goes through ChatSession (template, tokenize, schedule, prefill, sample, detokenize,
post-process), exactly as `llmcli chat` runs it. Per turn we report:
- TTFT with prefix reuse (the KV cache kept from the turn before: only new tokens are prefilled)
  against TTFT cold (cache cleared, the same history replayed token for token);
- the end-to-end decode rate (decode + sample + detokenize + post-process per token);
- the pipeline's overhead against raw tg: single-step decodes with no sampling at the same KV
  depth as that turn, on the same loaded model, measured in the same run.
The reuse pass and the cold pass alternate, repetition after repetition, so noise from other
processes falls on both sides alike.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field

from llmcli.bench.llama import cpu_info
from llmcli.bench.memory import peak_rss_bytes, reset_peak_rss
from llmcli.bench.records import LLAMA, BenchPlan, Progress, mean, stdev

# The script: a system prompt, a document to talk about, then follow-ups. A long first turn makes
# the value of the cache visible: every later turn carries the whole history.
SYSTEM = "You are a concise assistant. Answer in at most three sentences."
DOCUMENT = (
    "A key-value cache stores the attention keys and values of every token a transformer has "
    "already processed, so that generating the next token only computes attention for the new "
    "position instead of recomputing the whole sequence. Its size grows linearly with the context: "
    "two tensors per layer, each holding one vector per key-value head and per token. Grouped-query "
    "attention shares key-value heads between several query heads, which shrinks the cache. Chat "
    "servers keep the cache between the turns of a conversation, so a follow-up question only pays "
    "for its own tokens; when the cache is dropped, the whole history must be prefilled again."
)
SCRIPT: list[str] = [
    f"Read this note:\n\n{DOCUMENT}\n\nWhat does a key-value cache store?",
    "Why does it grow with the context?",
    "How does grouped-query attention help?",
    "What happens to the time to first token when the cache is dropped?",
]
CHAT_CTX = 2048  # room for the script with 128-token replies; --ctx overrides


@dataclass
class ChatRow:
    """One turn of the scripted conversation, averaged over the repetitions."""

    model: str
    model_filename: str
    n_threads: int
    turn: int
    prompt_tokens: int  # the whole templated history + this question
    cached_tokens: int  # reused from the KV cache on the reuse pass
    prefilled_tokens: int  # computed on the reuse pass (the cold pass computes prompt_tokens)
    ttft_cold_ms: float
    ttft_cold_stddev_ms: float
    ttft_reused_ms: float
    ttft_reused_stddev_ms: float
    completion_tokens: int
    decode_tps: float  # end to end: decode + sample + detokenize + post-process
    decode_stddev_tps: float
    raw_tg_tps: float  # llama_decode + synchronize only, same threads, same KV depth as this turn
    overhead_pct: float  # extra time per token of the pipeline over raw tg
    n_ctx: int = 0
    backend: str = LLAMA
    test: str = "chat"
    cpu_info: str = ""
    peak_rss_bytes: int | None = None
    placement: dict | None = None  # where the layers and the KV cache went (Placement)
    samples_ttft_cold_ms: list[float] = field(default_factory=list)
    samples_ttft_reused_ms: list[float] = field(default_factory=list)
    samples_decode_tps: list[float] = field(default_factory=list)

    @property
    def ttft_speedup(self) -> float:
        return self.ttft_cold_ms / self.ttft_reused_ms if self.ttft_reused_ms else 0.0

    def to_dict(self) -> dict:
        data = asdict(self)
        data["ttft_speedup"] = self.ttft_speedup
        return data


@dataclass
class _Turn:
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cold_ms: list[float] = field(default_factory=list)
    reused_ms: list[float] = field(default_factory=list)
    decode_tps: list[float] = field(default_factory=list)
    decode_steps: int = 0
    decode_ms: float = 0.0


def _ask(session, text: str):
    from llmcli.engine.events import drain

    return drain(session.ask(text)).stats  # consume the stream as a caller would


def _raw_tg_tps(rt, depth: int, n_gen: int, repetitions: int, seed: int) -> float:
    """llama-bench's tg loop at a KV depth: `depth` random ids in the cache, then single steps timed.

    The ids are the seed's one run, whatever the depth: a repetition, or a deeper turn, keeps the ids
    already in the cache and prefills only the rest (prefilling each from empty cost four times the
    tokens, none of them timed). Only the depth matters to a step's cost, not what the ids are."""
    rng = random.Random(seed)
    fill = [rng.randrange(rt.n_vocab) for _ in range(depth)]
    rates = []
    for _ in range(repetitions):
        held = rt.kv_tokens  # whatever came before: a conversation, or this fill and timed steps
        same = (i for i, (a, b) in enumerate(zip(held, fill, strict=False)) if a != b)
        kept = rt.keep_prefix(next(same, min(len(held), depth)))
        rt.prefill(fill[kept:])
        rt.synchronize()
        ids = [rng.randrange(rt.n_vocab) for _ in range(n_gen)]
        t0 = time.perf_counter_ns()
        for tok in ids:
            rt.step(tok)
            rt.synchronize()
        rates.append(n_gen * 1e9 / (time.perf_counter_ns() - t0))
    return mean(rates)


def run_chat(name: str, path: str, plan: BenchPlan, max_tokens: int) -> Iterator[Progress | ChatRow]:
    """The scripted conversation on one GGUF, for each thread count of the plan."""
    from llmcli.engine.local.chat import ChatSession
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.sampling import SamplingParams

    reset_peak_rss()
    yield Progress(model=name, backend=LLAMA, stage="load")
    rt = Runtime(
        path,
        RuntimeConfig(
            n_ctx=plan.n_ctx or CHAT_CTX,
            n_threads=plan.threads[0],
            n_batch=plan.n_batch,
            flash_attn=plan.flash_attn,
            gpu_layers=plan.gpu_layers,
        ),
    )
    # Greedy: both passes see the same replies, so the cold pass replays the reuse pass's history.
    reply = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    first_token = SamplingParams(temperature=0.0, max_tokens=1)
    try:
        for n_threads in plan.threads:
            rt.ll.llama_set_n_threads(rt.ctx_ptr, n_threads, n_threads)
            turns = [_Turn() for _ in SCRIPT]
            if plan.warmup:
                yield Progress(name, LLAMA, "warmup", "chat", n_threads)
                rt.clear()
                _ask(ChatSession(rt, system=SYSTEM, params=first_token), SCRIPT[0])
            for rep in range(plan.repetitions):
                yield Progress(name, LLAMA, "run", "chat", n_threads, rep + 1, plan.repetitions)
                # Reuse pass: one session, the cache kept from turn to turn, as in `llmcli chat`.
                rt.clear()
                session = ChatSession(rt, system=SYSTEM, params=reply)
                history = []
                for turn, question in zip(turns, SCRIPT, strict=True):
                    history.append(list(session.messages))
                    stats = _ask(session, question)
                    turn.prompt_tokens, turn.cached_tokens = stats.prompt_tokens, stats.cached_tokens
                    turn.completion_tokens = stats.completion_tokens
                    turn.reused_ms.append(stats.ttft_ms)
                    if stats.decode_steps:
                        turn.decode_tps.append(stats.decode_tps)
                        turn.decode_steps += stats.decode_steps
                        turn.decode_ms += stats.decode_ms
                # Cold pass: the same history, token for token, from an empty cache.
                for turn, question, before in zip(turns, SCRIPT, history, strict=True):
                    rt.clear()
                    cold = ChatSession(rt, system=SYSTEM, params=first_token)
                    cold.messages = list(before)
                    turn.cold_ms.append(_ask(cold, question).ttft_ms)
            # Raw tg per turn, at that turn's KV depth and for as many steps as its reply took:
            # attention cost grows with depth, so only the same depth makes a fair comparison.
            raws = []
            for i, t in enumerate(turns, start=1):
                steps = max(8, min(t.completion_tokens, rt.n_ctx - t.prompt_tokens - 1))
                yield Progress(
                    name, LLAMA, "run", f"raw tg{steps} @ depth {t.prompt_tokens} (turn {i})", n_threads
                )
                raws.append(_raw_tg_tps(rt, t.prompt_tokens, steps, plan.repetitions, plan.seed))
            rss = peak_rss_bytes()
            for i, (t, raw) in enumerate(zip(turns, raws, strict=True), start=1):
                e2e = t.decode_steps / t.decode_ms * 1000 if t.decode_ms else 0.0
                yield ChatRow(
                    model=name,
                    model_filename=path,
                    n_threads=n_threads,
                    turn=i,
                    prompt_tokens=t.prompt_tokens,
                    cached_tokens=t.cached_tokens,
                    prefilled_tokens=t.prompt_tokens - t.cached_tokens,
                    ttft_cold_ms=mean(t.cold_ms),
                    ttft_cold_stddev_ms=stdev(t.cold_ms),
                    ttft_reused_ms=mean(t.reused_ms),
                    ttft_reused_stddev_ms=stdev(t.reused_ms),
                    completion_tokens=t.completion_tokens,
                    decode_tps=e2e,
                    decode_stddev_tps=stdev(t.decode_tps),
                    raw_tg_tps=raw,
                    overhead_pct=(raw / e2e - 1) * 100 if e2e else 0.0,
                    n_ctx=rt.n_ctx,
                    cpu_info=cpu_info(),
                    peak_rss_bytes=rss,
                    placement=rt.placement.as_dict(),
                    samples_ttft_cold_ms=t.cold_ms,
                    samples_ttft_reused_ms=t.reused_ms,
                    samples_decode_tps=t.decode_tps,
                )
    finally:
        rt.close()
