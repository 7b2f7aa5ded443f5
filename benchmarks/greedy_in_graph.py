"""Greedy picks in llama.cpp's graph against numpy's argmax on the host, at B sequences, alternated.

    .venv/bin/python benchmarks/greedy_in_graph.py [-b 64] [-t 2] [--tg 16] [--rounds 4] [--model M]

The scheduler steps B greedy sequences of random 32-token prompts, as `bench --parallel` does
(every prompt first, nothing shared), once with SchedulerConfig(greedy_in_graph=True) and once
with False in each round, the order swapped every round. Printed per round and as medians over the
rounds: the decode steps' wall time (S_TG, tokens a second) and the engine thread's CPU time a
step, which a loaded machine stretches less (at -t 1 it is the whole of the work). Also checked:
both picks give the same token ids.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def run(rt, prompts: list[list[int]], tg: int, in_graph: bool) -> tuple[float, float, list[list[int]]]:
    """(S_TG, CPU ms a decode step, the ids) of one batch."""
    from llmcli.engine.local.scheduler import Scheduler
    from llmcli.engine.local.scheduler_config import SchedulerConfig
    from llmcli.engine.local.sequence import Request
    from llmcli.engine.sampling import SamplingParams

    config = SchedulerConfig(
        prefill_chunk=rt.n_batch,
        keep_prefixes=False,
        share_prefixes=False,
        prefill_first=True,
        greedy_in_graph=in_graph,
    )
    sched = Scheduler(rt, config)
    greedy = SamplingParams(temperature=0.0)
    seqs = [sched.submit(Request(p, greedy, tg + 1, ignore_eog=True)) for p in prompts]
    while any(s.stats.t_first is None for s in seqs):  # the prompts (the first tokens come from them)
        sched.step()
    steps, wall, cpu = 0, time.perf_counter(), time.thread_time()
    while sched.busy:
        sched.step()
        steps += 1
    wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    ids = [s.generated for s in seqs]
    sched.close()
    return len(prompts) * tg / wall, cpu / steps * 1000, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", type=int, default=64)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--tg", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    sys.path.insert(0, str(HERE.parent / "src"))
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    config = RuntimeConfig(
        n_ctx=args.b * (32 + args.tg + 8), n_threads=args.threads, n_seq_max=args.b, kv_unified=True
    )
    rt = Runtime(model, config)
    rng = random.Random(1)
    prompts = [[rng.randrange(rt.n_vocab) for _ in range(32)] for _ in range(args.b)]
    run(rt, prompts[:1], 2, False)  # warm-up
    results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    ids: dict[bool, list[list[int]]] = {}
    for r in range(args.rounds):
        for in_graph in (True, False) if r % 2 else (False, True):
            tps, cpu, ids[in_graph] = run(rt, prompts, args.tg, in_graph)
            results[in_graph].append((tps, cpu))
            where = "graph" if in_graph else "host "
            print(f"round {r} {where}: S_TG {tps:8.1f} tok/s, CPU {cpu:8.1f} ms a step", flush=True)
    rt.close()
    med = {
        k: (statistics.median(t for t, _ in v), statistics.median(c for _, c in v))
        for k, v in results.items()
    }
    print(
        f"B = {args.b}, -t {args.threads}, {args.rounds} rounds: host S_TG {med[False][0]:.1f} tok/s, "
        f"CPU {med[False][1]:.1f} ms a step; graph {med[True][0]:.1f} tok/s, {med[True][1]:.1f} ms; "
        f"graph/host S_TG {med[True][0] / med[False][0]:.3f}, CPU {med[True][1] / med[False][1]:.3f}; "
        f"same ids: {ids[True] == ids[False]}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
