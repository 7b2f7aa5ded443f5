"""llmcli bench against native llama-bench, same model, same settings, interleaved in one run.

    .venv/bin/python benchmarks/bench_vs_llama_bench.py [--rounds 4] [--reps 5] [-t 2] [--model M]

Each round runs both tools once (pp512 and tg128, -r reps each), alternating which goes first,
so that a noisy neighbour on a shared machine hurts both sides alike. The figure per side is the
median over rounds of each round's mean, and also the best single repetition; the ratio is
llmcli / native. Goal: >= 0.97 on both. Exit status 1 when a ratio misses it.

Native llama-bench is built by benchmarks/build_native.sh from the llama.cpp inside the
llama-cpp-python sdist we pin, so both sides run the same kernels.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOAL = 0.97


def native_binary() -> str:
    out = subprocess.run(
        ["bash", str(HERE / "build_native.sh")],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    return out.stdout.strip().splitlines()[-1]


def run_json(cmd: list[str]) -> dict[str, dict]:
    """Run a tool with JSON output (llama-bench -o json, llmcli bench --json); return {test name: row}.

    Both tools write llama-bench's field names.
    """
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    rows = json.loads(proc.stdout)
    return {(f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"): r for r in rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = ap.parse_args()

    sys.path.insert(0, str(HERE.parent / "src"))
    from llmcli.environment import Environment
    from llmcli.model_ref import default_model_ref
    from llmcli.store import Store

    env = Environment()
    model = args.model or Store(env.store_root).resolve(default_model_ref(env.default_model, env.home)).path
    bench = native_binary()
    # Same settings on both sides: threads, batch = ubatch = 512 (llmcli's engine default),
    # flash attention auto (both tools' default), the same repetitions, warm-up on.
    common = ["-p", str(args.n_prompt), "-t", str(args.threads), "-r", str(args.reps), "-b", "512"]
    n_gen = str(args.n_gen)  # llama-bench's -n is llmcli's --n-gen (-n is chat's --max-tokens there)
    sides = {
        "native": [bench, "-m", model, *common, "-n", n_gen, "-ub", "512", "-o", "json"],
        "llmcli": [sys.executable, "-m", "llmcli", "bench", model, *common, "--n-gen", n_gen, "--json"],
    }
    print(
        f"model    {model}\nnative   {bench}\nsettings {' '.join(common)} -n {n_gen}, {args.rounds} rounds, "
        "interleaved\n",
        flush=True,
    )
    results: dict[str, list[dict[str, dict]]] = {name: [] for name in sides}
    # Ctrl-C or a timeout's SIGTERM ends the run early but still summarises the finished rounds.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for rnd in range(args.rounds):
            order = list(sides) if rnd % 2 == 0 else list(sides)[::-1]
            done = [run_json(sides[name]) for name in order]
            for name, rows in zip(order, done, strict=True):
                results[name].append(rows)
            line = "  ".join(
                f"{name} " + " ".join(f"{t} {r['avg_ts']:8.2f}" for t, r in results[name][-1].items())
                for name in sides
            )
            print(f"round {rnd + 1}: {line}  (load {os.getloadavg()[0]:.2f})", flush=True)
    except KeyboardInterrupt:
        print(f"stopped after {len(results['native'])} complete rounds", flush=True)
    if not results["native"]:
        sys.exit(1)

    tests = list(results["native"][0])
    # Two estimators, both printed: the median of the rounds' means (typical), and the best single
    # repetition (the least disturbed by other processes; on a shared machine often the fairest).
    print(f"\n| test  | estimator | native llama-bench t/s | llmcli bench t/s | ratio | goal >= {GOAL} |")
    print("| ----- | --------- | ---------------------: | ---------------: | ----: | :---------: |")
    ok = True
    estimators = {
        "median": lambda rounds, t: statistics.median(r[t]["avg_ts"] for r in rounds),
        "best": lambda rounds, t: max(s for r in rounds for s in r[t]["samples_ts"]),
    }
    for test in tests:
        for label, estimate in estimators.items():
            native, ours = estimate(results["native"], test), estimate(results["llmcli"], test)
            ratio = ours / native
            ok &= ratio >= GOAL
            print(
                f"| {test:5} | {label:9} | {native:22.2f} | {ours:16.2f} | {ratio:5.3f} | "
                f"{'met' if ratio >= GOAL else 'MISSED':^11} |"
            )
    per_round = [
        " ".join(f"{t} {r2[t]['avg_ts'] / r1[t]['avg_ts']:.3f}" for t in tests)
        for r1, r2 in zip(results["native"], results["llmcli"], strict=True)
    ]
    print("\nper-round ratios: " + " | ".join(per_round))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
