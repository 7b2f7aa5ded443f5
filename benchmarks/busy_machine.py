"""Decode speed of `llmcli chat` with no --threads on a busy machine and on a quiet one, against native
llama-bench in every configuration a user could pick by hand, side by side.

"Busy" is one spinning process (`python -c 'while 1: pass'`, one per --hogs, pinned to the last usable
CPUs with --pin) started before the condition's runs and killed after; "quiet" is without it. In
each round both conditions run, in alternating order, and so do the contestants:

  llmcli       `llmcli chat --json` (decode_tps: the decode stage's forward passes a second) with no
               -t (the count follows the load, engine/local/threads.py), then -t 1 and -t N by hand
  native       llama-bench tg at the chat's KV depth (-d), -t 1 and -t N, --poll default and 0: the
               hand-picked configurations. --poll sets the spin of ggml's own threadpool, which an
               OpenMP build (the wheel's and build_native.sh's) does not use: expect no difference.
  PASSIVE      llama-bench -t N with OMP_WAIT_POLICY=PASSIVE (libgomp's threads sleep at barriers):
               the wait-policy design, for the record; not one of the goal's configurations
  SPIN=k       with --spincount k[,k...]: llama-bench -t N with GOMP_SPINCOUNT=k (libgomp spins k
               rounds at a barrier, then sleeps; its default is 300000), for the record as well

Every process runs without OMP_WAIT_POLICY / GOMP_SPINCOUNT in its environment (the test suite sets
one; a user's shell does not), except the PASSIVE and SPIN rows. Goals: llmcli with no flag >= 0.9x the best
hand-picked native on the busy machine, >= 0.97x native tg (-t N, and the best) on the quiet one.
Exit status 1 when a goal is missed. The 1-minute load is printed with every condition.

    python benchmarks/busy_machine.py [--rounds 5] [--n 32] [--hogs 1] [--pin] [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Greedy SmolLM2 keeps listing for thousands of tokens on this request, so decode runs the full -n.
INSTRUCTION = "List 200 animals, one per line."
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "OMP_PROC_BIND", "GOMP_CPU_AFFINITY")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment a user's shell gives: none of the OpenMP settings the test suite makes."""
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(extra)
    return env


def llama_bench_binary() -> str:
    if path := os.environ.get("LLAMA_BENCH"):
        return path
    script = HERE / "build_native.sh"
    return subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True).stdout.strip()


def native(
    binary: str, model: str, threads: int, n_gen: int, depth: int, poll: int | None, **env: str
) -> float:
    """llama-bench's tg<n_gen> at KV depth `depth` (one repetition after its warm-up), tok/s."""
    args = [binary, "-m", model, "-t", str(threads), "-fa", "1", "-p", "0", "-n", str(n_gen)]
    args += ["-d", str(depth), "-r", "1", "-o", "json"]
    if poll is not None:
        args += ["--poll", str(poll)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=clean_env(**env))
    return float(json.loads(out.stdout)[0]["avg_ts"])


def llmcli(model: str, threads: int | None, n_gen: int, home: str) -> dict:
    args = [sys.executable, "-m", "llmcli", "chat", "-m", model, "--json", "--temp", "0", "--no-cache"]
    args += ["-n", str(n_gen), *(["-t", str(threads)] if threads else []), INSTRUCTION]
    env = clean_env(LLMCLI_HOME=home, LLMCLI_NO_LOG="1")
    doc = json.loads(subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout)
    if doc["usage"]["completion_tokens"] < n_gen:
        print(f"  note: llmcli stopped after {doc['usage']['completion_tokens']} tokens", file=sys.stderr)
    return doc


def _child(cpu: int | None) -> Callable[[], None]:
    """In a spinning child before it starts: die with this script (however it ends), pinned if asked."""

    def setup() -> None:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if cpu is not None:
            os.sched_setaffinity(0, {cpu})

    return setup


class Hogs:
    """n processes that spin for as long as the condition lasts (pinned to the last CPUs with pin)."""

    def __init__(self, n: int, pin: bool) -> None:
        self.n, self.pin = n, pin
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Hogs:
        cpus = sorted(os.sched_getaffinity(0))
        for i in range(self.n):
            cpu = cpus[-1 - i % len(cpus)] if self.pin else None
            spin = [sys.executable, "-c", "while 1: pass"]
            self.procs.append(subprocess.Popen(spin, preexec_fn=_child(cpu)))
        if self.procs:
            time.sleep(0.5)  # spinning, and placed by the scheduler, before anything is timed
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=32, help="tokens decoded per run (tg<n>)")
    parser.add_argument("--hogs", type=int, default=1, help="spinning processes on the busy machine")
    parser.add_argument("--pin", action="store_true", help="pin each spinning process to one CPU")
    parser.add_argument("--spincount", default="", help="GOMP_SPINCOUNT values for extra -t N rows")
    parser.add_argument("--only", default="", help="comma-separated labels to run (default: every row)")
    parser.add_argument("--model", default=None, help="a GGUF (default: the embedded SmolLM2)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `kill` ends it as Ctrl-C does: a summary
    from llmcli.store import embedded_model_path

    model = args.model or str(embedded_model_path())
    binary = llama_bench_binary()
    n_max = len(os.sched_getaffinity(0))
    home = tempfile.mkdtemp(prefix="busy-machine-")
    depth = llmcli(model, 1, 1, home)["usage"]["prompt_tokens"]  # where chat's decode starts
    n = args.n

    # label -> how to measure it once (tok/s, and what llmcli reports about its threads)
    runs: dict[str, Callable[[], tuple[float, str]]] = {}

    def chat(threads: int | None) -> Callable[[], tuple[float, str]]:
        def run() -> tuple[float, str]:
            doc = llmcli(model, threads, n, home)
            t = doc["threads"]
            return doc["timings"]["decode_tps"], f"t={t['n']} changes={t['changes']}"

        return run

    def bench(threads: int, poll: int | None, **env: str) -> Callable[[], tuple[float, str]]:
        return lambda: (native(binary, model, threads, n, depth, poll, **env), "")

    runs["llmcli (no -t)"] = chat(None)
    for t in sorted({1, n_max}):
        runs[f"llmcli -t {t}"] = chat(t)
    hand_picked = []
    for t in sorted({1, n_max}):
        for poll in (None, 0):
            label = f"native -t {t}" + ("" if poll is None else f" --poll {poll}")
            runs[label] = bench(t, poll)
            hand_picked.append(label)
    runs[f"native -t {n_max} PASSIVE"] = bench(n_max, None, OMP_WAIT_POLICY="PASSIVE")
    for count in filter(None, args.spincount.split(",")):
        runs[f"native -t {n_max} SPIN={count}"] = bench(n_max, None, GOMP_SPINCOUNT=count)
    if args.only:  # a quicker look at a few rows; the goals need "llmcli (no -t)" and the hand-picked rows
        keep = set(args.only.split(","))
        runs = {k: v for k, v in runs.items() if k in keep}
        hand_picked = [k for k in hand_picked if k in keep] or list(runs)

    conditions = ("quiet", "busy")
    results: dict[str, dict[str, list[float]]] = {c: {k: [] for k in runs} for c in conditions}
    loads: dict[str, list[float]] = {c: [] for c in conditions}
    labels = list(runs)
    print(
        f"model {Path(model).name}, tg{n} at depth {depth}, {n_max} usable CPUs, busy = {args.hogs} "
        f"spinning process(es){' pinned' if args.pin else ''}, {args.rounds} rounds",
        file=sys.stderr,
    )
    try:
        for r in range(args.rounds):
            order = conditions if r % 2 == 0 else conditions[::-1]
            for cond in order:
                shift = r % len(labels)
                with Hogs(args.hogs if cond == "busy" else 0, args.pin):
                    loads[cond].append(load1())
                    line = []
                    for label in labels[shift:] + labels[:shift]:
                        tps, note = runs[label]()
                        results[cond][label].append(tps)
                        line.append(f"{label} {tps:.1f}" + (f" ({note})" if note else ""))
                print(
                    f"round {r + 1} {cond} (load {loads[cond][-1]:.2f}): " + " | ".join(line), file=sys.stderr
                )
    except KeyboardInterrupt:
        print("interrupted: the rounds finished so far", file=sys.stderr)

    ok = True
    for cond in conditions:
        done = {k: v for k, v in results[cond].items() if v}
        if not done:
            continue
        med = {k: statistics.median(v) for k, v in done.items()}
        best = max(hand_picked, key=lambda k: med.get(k, 0.0))
        print(
            f"\n{cond}: medians of {min(map(len, done.values()))} rounds, "
            f"1-minute load {statistics.median(loads[cond]):.2f}"
        )
        print(f"{'':<30}{'tok/s':>9}{'/ ' + best:>28}")
        for label in filter(med.__contains__, labels):
            print(f"{label:<30}{med[label]:>9.1f}{med[label] / med[best]:>28.3f}")
        if "llmcli (no -t)" not in med:
            continue
        ours = med["llmcli (no -t)"]
        goal = 0.9 if cond == "busy" else 0.97
        default = f"native -t {n_max}"
        checks = [(best, goal)] + ([(default, goal)] if cond == "quiet" and default in med else [])
        for label, want in checks:
            ratio = ours / med[label]
            ok &= ratio >= want
            verdict = "met" if ratio >= want else "MISSED"
            print(
                f"llmcli (no -t) / {label} ({'best hand-picked' if label == best else 'default'}): "
                f"{ratio:.3f} (goal >= {want}) {verdict}"
            )
        per_round = [a / b for a, b in zip(done["llmcli (no -t)"], done[best], strict=False)]
        print("per-round ratios to " + best + ": " + " ".join(f"{x:.3f}" for x in per_round))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
