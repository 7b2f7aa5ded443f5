"""`bench --parallel 1,2,4,8`: B independent sequences decoded together by the scheduler.

The measurement is llama-batched-bench's: B prompts of pp random tokens prefilled, then tg steps
that each decode one token of every sequence. Rows carry its `--output-format jsonl` field names,
so the two compare line by line: speed_pp = B*pp / t_pp, speed_tg (S_TG) = B*tg / t_tg.
"""

from __future__ import annotations

import csv
import io
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from llmcli.errors import RuntimeFailure, UsageError
from llmcli.offload import EVERY_LAYER, GpuLayers

FORMATS = ("md", "json", "jsonl", "csv")
MAX_PARALLEL = 256  # llama.cpp's LLAMA_MAX_SEQ: the most sequences one context serves


@dataclass
class ParallelRow:
    # llama-batched-bench's jsonl fields, in its order
    n_kv_max: int
    n_batch: int
    n_ubatch: int
    flash_attn: int
    is_pp_shared: int
    n_gpu_layers: int  # layers llama.cpp offloaded, as it reported them
    n_threads: int
    n_threads_batch: int
    pp: int
    tg: int
    pl: int
    n_kv: int
    t_pp: float
    speed_pp: float
    t_tg: float
    speed_tg: float
    t: float
    speed: float
    # ours
    model: str = ""
    backend: str = "llmcli"
    kv_unified: bool = False
    placement: dict | None = None  # where the layers and the KV cache went (Placement)


def bench_parallel(
    parallel: str,
    models: list[str] | None,
    *,
    n_prompt: str,
    n_gen: str,
    threads: str | None,
    n_ctx: int | None,
    n_batch: int,
    flash_attn: bool,
    out_format: str,
    store_root: Path,
    default_model: str | None,
    conflicts: dict[str, object],
    kv_unified: bool = False,
    gpu_layers: GpuLayers | None = None,
    home: Path | None = None,
) -> str:
    """Parse the options, measure every model, and return the rendered rows (the command prints them).

    `conflicts`: the bench options that mean another measurement, by flag; any that is set is refused.
    """
    from llmcli.bench.records import LLAMA
    from llmcli.bench.runner import parse_int_list, parse_threads, resolve_target, usable_cores
    from llmcli.store import Store

    given = [flag for flag, value in conflicts.items() if value]
    if given:
        raise UsageError(f"{', '.join(given)} cannot go with --parallel; leave them out")
    if out_format not in FORMATS:
        raise UsageError(f"unknown output format '{out_format}'; choose one of {', '.join(FORMATS)}")
    pls = parse_int_list(parallel, "--parallel", 1)
    if max(pls) > MAX_PARALLEL:
        raise UsageError(
            f"bad --parallel list '{parallel}': llama.cpp serves at most {MAX_PARALLEL} sequences"
        )
    pps, tgs = parse_int_list(n_prompt, "-p", 1), parse_int_list(n_gen, "-n", 1)
    counts = parse_threads(threads, usable_cores())
    if len(counts) > 1:
        raise UsageError("--parallel measures one thread count; give one -t")
    # As llama-batched-bench: room for the largest B with the longest prompt and reply, unless -c.
    needed = max(pls) * (max(pps) + max(tgs))
    if n_ctx is not None and n_ctx < needed:
        raise UsageError(
            f"--parallel {max(pls)} with -p {max(pps)} --n-gen {max(tgs)} needs --ctx {needed} or more; "
            "raise --ctx or leave it out"
        )
    ctx = n_ctx or needed
    store = Store(store_root)
    specs: list[str | None] = list(models) if models else [None]
    targets = [resolve_target(spec, [LLAMA], store, default_model, home) for spec in specs]
    rows: list[ParallelRow] = []
    for target in targets:
        rows += measure(
            target.gguf or "",
            target.name,
            pls,
            pps,
            tgs,
            n_threads=counts[0],
            n_ctx=ctx,
            n_batch=n_batch,
            flash_attn=flash_attn,
            kv_unified=kv_unified,
            gpu_layers=gpu_layers or EVERY_LAYER,
        )
    return render(rows, out_format)


def measure(
    path: str,
    name: str,
    pls: list[int],
    pps: list[int],
    tgs: list[int],
    *,
    n_threads: int,
    n_ctx: int,
    n_batch: int = 512,
    flash_attn: bool = True,
    kv_unified: bool = False,
    gpu_layers: GpuLayers = EVERY_LAYER,
    seed: int = 1234,
) -> list[ParallelRow]:
    """Every (pp, tg, B) on one loaded model, in llama-batched-bench's order."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.local.scheduler import Scheduler
    from llmcli.engine.local.scheduler_config import SchedulerConfig
    from llmcli.engine.local.sequence import Request
    from llmcli.engine.sampling import SamplingParams
    from llmcli.gguf_check import model_facts

    model_facts(path)  # validates the file before llama.cpp opens it
    config = RuntimeConfig(
        n_ctx=n_ctx,
        n_threads=n_threads,
        n_batch=n_batch,
        flash_attn=flash_attn,
        n_seq_max=max(pls),
        kv_unified=kv_unified,
        gpu_layers=gpu_layers,
    )
    rng = random.Random(seed)
    rt = Runtime(path, config)
    # The scheduler's own policy for a benchmark: every prompt first, no prefix shared or kept.
    policy = SchedulerConfig(
        prefill_chunk=n_batch, keep_prefixes=False, share_prefixes=False, prefill_first=True
    )
    greedy = SamplingParams(temperature=0.0)
    rows = []
    try:
        sched = Scheduler(rt, policy)
        sched.submit(Request([rng.randrange(rt.n_vocab) for _ in range(16)], greedy, max_tokens=1))
        sched.run()  # warm-up, as llama-batched-bench decodes 16 random tokens first
        for pp in pps:
            for tg in tgs:
                for pl in pls:
                    # tg + 1 tokens: the first comes from the prompt's logits, then tg decode steps.
                    requests = [
                        Request(
                            [rng.randrange(rt.n_vocab) for _ in range(pp)], greedy, tg + 1, ignore_eog=True
                        )
                        for _ in range(pl)
                    ]
                    t_pp, t_tg = _timed(sched, requests)
                    rows.append(
                        ParallelRow(
                            n_kv_max=rt.n_ctx,
                            n_batch=n_batch,
                            n_ubatch=n_batch,
                            flash_attn=-1 if flash_attn else 0,
                            is_pp_shared=0,
                            n_gpu_layers=rt.placement.offloaded,
                            n_threads=n_threads,
                            n_threads_batch=n_threads,
                            pp=pp,
                            tg=tg,
                            pl=pl,
                            n_kv=pl * (pp + tg),
                            t_pp=t_pp,
                            speed_pp=pl * pp / t_pp,
                            t_tg=t_tg,
                            speed_tg=pl * tg / t_tg,
                            t=t_pp + t_tg,
                            speed=pl * (pp + tg) / (t_pp + t_tg),
                            model=name,
                            kv_unified=sched.unified and sched.n_slots > 1,
                            placement=rt.placement.as_dict(),
                        )
                    )
        sched.close()
    finally:
        rt.close()
    return rows


def _timed(sched, requests) -> tuple[float, float]:
    """Seconds to prefill every prompt (to each one's first token), then to decode the rest."""
    seqs = [sched.submit(r) for r in requests]
    t0 = time.perf_counter()
    while any(s.stats.t_first is None for s in seqs):
        sched.step()
    t1 = time.perf_counter()
    while sched.busy:
        sched.step()
    t2 = time.perf_counter()
    if any(s.stats.deferrals or len(s.generated) != r.budget for s, r in zip(seqs, requests, strict=True)):
        raise RuntimeFailure("a benchmark sequence was deferred or cut short; the KV pool is too small")
    return t1 - t0, t2 - t1


COLUMNS = [  # llama-batched-bench's table
    ("PP", "pp", "{}"),
    ("TG", "tg", "{}"),
    ("B", "pl", "{}"),
    ("N_KV", "n_kv", "{}"),
    ("T_PP s", "t_pp", "{:.3f}"),
    ("S_PP t/s", "speed_pp", "{:.2f}"),
    ("T_TG s", "t_tg", "{:.3f}"),
    ("S_TG t/s", "speed_tg", "{:.2f}"),
    ("T s", "t", "{:.3f}"),
    ("S t/s", "speed", "{:.2f}"),
]


def to_markdown(rows: list[ParallelRow]) -> str:
    head = ["model"] + [title for title, _, _ in COLUMNS]
    body = [[r.model] + [fmt.format(getattr(r, key)) for _, key, fmt in COLUMNS] for r in rows]
    widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
    lines = [
        "| " + " | ".join(cell.rjust(w) for cell, w in zip(line, widths, strict=True)) + " |"
        for line in [head] + body
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines) + "\n"


def render(rows: list[ParallelRow], fmt: str) -> str:
    dicts = [asdict(r) for r in rows]
    if fmt == "json":
        return json.dumps(dicts, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(d) + "\n" for d in dicts)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(dicts[0]) if dicts else [], lineterminator="\n")
        writer.writeheader()
        writer.writerows(
            {k: json.dumps(v) if isinstance(v, dict) else v for k, v in d.items()} for d in dicts
        )
        return buf.getvalue()
    return to_markdown(rows)
