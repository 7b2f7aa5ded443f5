"""llmcli serve against native llama-server and llama-cpp-python's server, measured by `llmcli bench`.

    .venv/bin/python benchmarks/serve_vs_native.py [--rounds 3] [-t 2] [--concurrency 1,4] [--n-gen 128]

Three sides serve the embedded model with the same threads and per-sequence room (serve_sides.py):
llmcli serve --parallel 4, llama-server -np 4 --kv-unified, and llama-cpp-python's server (one
request at a time). Each round starts every side in turn (the order rotating round to round), runs
`llmcli bench --endpoint URL --concurrency 1,4 --json` against it (short random prompts, 128 output
tokens, temperature 0, a warm-up request first) and stops it, so only one server runs at a time.

Printed: each round's aggregate output tok/s per side and concurrency, then the medians, and three
goals: llmcli / llama-server at the highest concurrency >= 0.95; llmcli's gain from the lowest to
the highest concurrency >= llama-server's; llmcli / llama-cpp-python at the highest >= 1.15.
Exit status 1 when one is missed (or a side's request failed).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys

from serve_sides import SIDES, embedded_model, llama_server_binary, make_server, run_bench

GOAL_NATIVE = 0.95
GOAL_LCP = 1.15


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4, help="sequences each server decodes together")
    ap.add_argument("--concurrency", default="1,4", help="client levels, as bench's --concurrency")
    ap.add_argument("-p", "--n-prompt", type=int, default=32, help="words of each random prompt")
    ap.add_argument("-n", "--n-gen", type=int, default=128, help="max_tokens of each request")
    ap.add_argument("--num-requests", type=int, default=32, help="requests per concurrency level")
    ap.add_argument("--duration", type=float, default=180, help="seconds per level at most")
    ap.add_argument("--ctx", type=int, default=1024, help="KV cells per sequence (serve_sides.py)")
    ap.add_argument("--sides", default=",".join(SIDES), help="a subset, for a quick look")
    ap.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = ap.parse_args()

    model = args.model or embedded_model()
    sides = [s.strip() for s in args.sides.split(",")]
    unknown = set(sides) - set(SIDES)
    if unknown:
        sys.exit(f"unknown side(s) {', '.join(sorted(unknown))}; choose among {', '.join(SIDES)}")
    native = llama_server_binary() if "llama-server" in sides else None
    levels = [int(c) for c in args.concurrency.split(",")]
    lo, hi = min(levels), max(levels)
    bench_args = ["--concurrency", args.concurrency, "-p", str(args.n_prompt), "--n-gen", str(args.n_gen)]
    bench_args += ["--num-requests", str(args.num_requests), "--duration", str(args.duration)]
    print(f"model    {model}\nnative   {native}")
    print(
        f"settings --parallel {args.parallel} -t {args.threads} ctx {args.ctx} a sequence, prompts "
        f"{args.n_prompt} words, {args.n_gen} output tokens, {args.num_requests} requests a level, "
        f"{args.rounds} rounds, the order of the sides rotating\n",
        flush=True,
    )
    # results[side][round][concurrency] = bench row
    results: dict[str, list[dict[int, dict]]] = {side: [] for side in sides}
    failures: list[str] = []
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for rnd in range(args.rounds):
            order = sides[rnd % len(sides) :] + sides[: rnd % len(sides)]
            for side in order:
                with make_server(side, model, args.parallel, args.threads, args.ctx, native) as server:
                    rows = {int(r["max_concurrency"]): r for r in run_bench(server, bench_args)}
                results[side].append(rows)
                failures += [
                    f"round {rnd + 1} {side} c{c}: {r['failed']} failed ({r['first_error']})"
                    for c, r in rows.items()
                    if r["failed"]
                ]
            cells = "  ".join(
                f"{side}: "
                + " ".join(f"c{c} {r['output_throughput']:.1f}" for c, r in results[side][-1].items())
                for side in sides
            )
            ratio = ""
            if {"llmcli", "llama-server"} <= set(sides):
                now = {s: results[s][-1][hi]["output_throughput"] for s in ("llmcli", "llama-server")}
                ratio = f"  llmcli/llama-server c{hi} {now['llmcli'] / now['llama-server']:.3f}"
            print(f"round {rnd + 1} out tok/s  {cells}{ratio}  (load {os.getloadavg()[0]:.2f})", flush=True)
    except KeyboardInterrupt:
        print("stopped early; summarising the finished rounds", flush=True)
    done = min(len(v) for v in results.values())
    if not done:
        sys.exit(1)

    def med(side: str, c: int, key: str = "output_throughput") -> float:
        return statistics.median(r[c][key] for r in results[side][:done])

    print(f"\nmedians over {done} round(s)\n")
    print("| side | concurrency | output tok/s | mean TTFT ms | mean TPOT ms | requests/s |")
    print("| ---- | ----------: | -----------: | -----------: | -----------: | ---------: |")
    for side in sides:
        for c in levels:
            print(
                f"| {side} | {c} | {med(side, c):.1f} | {med(side, c, 'mean_ttft_ms'):.0f} | "
                f"{med(side, c, 'mean_tpot_ms'):.1f} | {med(side, c, 'request_throughput'):.2f} |"
            )
    print(f"\ngain in output tok/s from c{lo} to c{hi}")
    gains = {side: med(side, hi) / med(side, lo) for side in sides}
    for side in sides:
        print(f"  {side:18} {gains[side]:.2f}x")

    ok = not failures
    checks: list[tuple[str, str, bool]] = []
    if {"llmcli", "llama-server"} <= set(sides):
        ratio = med("llmcli", hi) / med("llama-server", hi)
        per_round = ", ".join(
            f"{a[hi]['output_throughput'] / b[hi]['output_throughput']:.3f}"
            for a, b in zip(results["llmcli"][:done], results["llama-server"][:done], strict=True)
        )
        checks.append(
            (
                f"llmcli / llama-server at c{hi}: {ratio:.3f} (rounds {per_round})",
                f">= {GOAL_NATIVE}",
                ratio >= GOAL_NATIVE,
            )
        )
        checks.append(
            (
                f"gain c{lo}->c{hi}: llmcli {gains['llmcli']:.2f}x, "
                f"llama-server {gains['llama-server']:.2f}x",
                "llmcli's >= llama-server's",
                gains["llmcli"] >= gains["llama-server"],
            )
        )
    if {"llmcli", "llama-cpp-python"} <= set(sides):
        ratio = med("llmcli", hi) / med("llama-cpp-python", hi)
        checks.append(
            (f"llmcli / llama-cpp-python at c{hi}: {ratio:.3f}", f">= {GOAL_LCP}", ratio >= GOAL_LCP)
        )
    print("\n| check | goal | verdict |\n| ----- | ---- | :-----: |")
    for what, goal, met in checks:
        ok &= met
        print(f"| {what} | {goal} | {'met' if met else 'MISSED'} |")
    for failure in failures:
        print(f"FAILED REQUESTS: {failure}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
