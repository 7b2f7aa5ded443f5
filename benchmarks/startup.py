"""Start-up time of `llmcli --help`, `llmcli chat --help` and `llmcli list`, as a ratio to
`python -c "import typer"`; the goal is at most 2x (GOAL), and a command over it is marked.

    .venv/bin/python benchmarks/startup.py [--rounds 15] [--against OTHER_CHECKOUT]

Each round runs the three commands once, in a rotated order, so that a noisy neighbour on a shared
machine hurts all of them alike. The figure per command is the median wall time over rounds (a fresh
interpreter each time, stdout to /dev/null); the ratio is command / `import typer`, the floor any
Typer CLI pays. `list` runs against an empty store in a temp dir (the embedded model is still listed),
so the numbers do not depend on what the user has pulled.

--against runs the llmcli commands of another checkout too (its src/ on PYTHONPATH), in the same
rounds, so that a change is measured before and after on one machine under one load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMMANDS: dict[str, list[str]] = {
    "import typer": [sys.executable, "-c", "import typer"],
    "llmcli --help": [sys.executable, "-m", "llmcli", "--help"],
    "llmcli chat --help": [sys.executable, "-m", "llmcli", "chat", "--help"],
    "llmcli list": [sys.executable, "-m", "llmcli", "list"],
}
BASELINE = "import typer"
GOAL = 2.0  # a command's start-up at most this many times `import typer`'s


def wall_time(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--against", type=Path, help="another checkout, measured in the same rounds")
    args = ap.parse_args()

    trees = {"": HERE.parent / "src"}
    if args.against:
        trees[f" [{args.against.name}]"] = args.against.resolve() / "src"
    with tempfile.TemporaryDirectory() as home:
        runs: dict[str, tuple[list[str], dict[str, str]]] = {}
        for suffix, src in trees.items():
            env = {
                **os.environ,
                "LLMCLI_HOME": home,
                "COLUMNS": "100",
                "PYTHONPATH": os.pathsep.join(filter(None, [str(src), os.environ.get("PYTHONPATH")])),
            }
            for name, cmd in COMMANDS.items():
                if name == BASELINE and suffix:
                    continue  # one baseline: Typer is the same for both trees
                runs[name + suffix] = (cmd, env)
        names = list(runs)
        for name in names:  # warm the page cache and the bytecode caches once; not counted
            wall_time(*runs[name])
        times: dict[str, list[float]] = {name: [] for name in names}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                times[name].append(wall_time(*runs[name]))
            print(
                f"round {r + 1:>2}: " + "  ".join(f"{n} {times[n][-1] * 1000:6.0f} ms" for n in names),
                flush=True,
            )

    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[BASELINE]
    width = max(map(len, names))
    print(f"\nmedian of {args.rounds} rounds (load {os.getloadavg()[0]:.2f}):")
    for name in names:
        ratio = medians[name] / base
        over = f"   over the {GOAL:g}x goal" if ratio > GOAL else ""
        print(f"  {name:<{width}} {medians[name] * 1000:6.0f} ms   {ratio:5.2f}x {BASELINE}{over}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
