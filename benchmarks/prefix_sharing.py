"""Prefix sharing between sequences: 4 questions about one 1,500-token document, admitted together.

    .venv/bin/python benchmarks/prefix_sharing.py [-t 2] [--doc 1500] [--questions 4] [--model M]

Shared: the scheduler prefills the document once (for the first sequence) and gives the others its
cells with llama_memory_seq_cp; they prefill only their question. Unshared: every sequence
prefills the whole prompt. Both on a unified KV pool (live sequences share cells only there),
greedy, 16 reply tokens. Printed: total prefill tokens, mean and max TTFT, wall time; alternated.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORDS = (
    "river stone market winter lantern orchard copper harbor meadow signal engine quiet garden "
    "thunder ledger violet canyon pilot bridge candle forest mirror ribbon saddle tunnel velvet"
).split()
QUESTIONS = [
    "What is the document about?",
    "Which word appears most often?",
    "Summarise it in one sentence.",
    "Is the tone happy or sad?",
    "Who might have written it?",
    "What is the last word?",
    "Give it a title.",
    "How long is it?",
]


def run(rt, prompts: list[list[int]], share: bool) -> dict:
    from llmcli.engine.local.scheduler import Scheduler
    from llmcli.engine.local.scheduler_config import SchedulerConfig
    from llmcli.engine.local.sequence import Request
    from llmcli.engine.sampling import SamplingParams

    sched = Scheduler(rt, SchedulerConfig(share_prefixes=share, keep_prefixes=False))
    greedy = SamplingParams(temperature=0.0, max_tokens=16)
    t0 = time.perf_counter()
    seqs = [sched.submit(Request(p, greedy)) for p in prompts]
    sched.run()
    wall = time.perf_counter() - t0
    sched.close()
    ttfts = [s.stats.ttft_ms for s in seqs]
    return {
        "prefill": sum(s.stats.prefill_tokens for s in seqs),
        "shared": sum(s.stats.shared_tokens for s in seqs),
        "ttft_mean": statistics.mean(ttfts),
        "ttft_max": max(ttfts),
        "wall": wall,
        "texts": [s.text for s in seqs],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--doc", type=int, default=1500, help="document tokens")
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE.parent / "src"))
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    n = args.questions
    ctx = n * (args.doc + 64)
    rt = Runtime(model, RuntimeConfig(n_ctx=ctx, n_threads=args.threads, n_seq_max=n, kv_unified=True))
    rng = random.Random(7)
    text = " ".join(rng.choice(WORDS) for _ in range(args.doc * 2))
    doc = rt.tokenize(text, add_special=True)[: args.doc]
    prompts = [doc + rt.tokenize(" Question: " + q + " Answer:") for q in QUESTIONS[:n]]
    print(f"model {model}\n{n} sequences, a {len(doc)}-token document, -t {args.threads}, ctx {rt.n_ctx}\n")
    results: dict[str, list[dict]] = {"shared": [], "unshared": []}
    for rnd in range(args.rounds):
        for name in ["shared", "unshared"] if rnd % 2 == 0 else ["unshared", "shared"]:
            results[name].append(run(rt, prompts, name == "shared"))
        print(
            f"round {rnd + 1}: "
            + "  ".join(f"{k} TTFT {v[-1]['ttft_mean']:.0f} ms" for k, v in results.items())
            + f"  (load {os.getloadavg()[0]:.2f})",
            flush=True,
        )
    print("\n| | prefill tokens | shared tokens | mean TTFT ms | max TTFT ms | wall s |")
    print("| - | -: | -: | -: | -: | -: |")
    for name, rows in results.items():
        med = {
            k: statistics.median(r[k] for r in rows) for k in ("prefill", "shared", "ttft_mean", "ttft_max")
        }
        wall = statistics.median(r["wall"] for r in rows)
        print(
            f"| {name} | {med['prefill']:.0f} | {med['shared']:.0f} | {med['ttft_mean']:.0f} | "
            f"{med['ttft_max']:.0f} | {wall:.2f} |"
        )
    ratio = statistics.median(r["ttft_mean"] for r in results["unshared"]) / statistics.median(
        r["ttft_mean"] for r in results["shared"]
    )
    same = sum(
        a == b for a, b in zip(results["shared"][0]["texts"], results["unshared"][0]["texts"], strict=True)
    )
    print(f"\nmean TTFT unshared / shared: {ratio:.2f}x; replies identical in {same} of {n}")
    rt.close()


if __name__ == "__main__":
    main()
