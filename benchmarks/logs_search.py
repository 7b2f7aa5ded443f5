"""`llmcli logs --query` on a log of 10,000 exchanges: the goal is an answer in under 100 ms.

    .venv/bin/python benchmarks/logs_search.py [--exchanges 10000] [--rounds 15]

Builds a synthetic log (conversations of 5 exchanges; prompts of ~30 and replies of ~150 words
drawn from a 5,000-word vocabulary with a Zipf-like skew) in a temp dir, then times, alternating
in each round:
  - in-process: `find_exchanges(--query WORD)` as `llmcli logs --query` calls it (opening the log included),
    with FTS5 and, side by side, the LIKE fallback a SQLite without FTS5 would use;
  - the CLI: `python -m llmcli logs --query WORD` as a fresh process, next to `python -m llmcli --help`
    (the floor any invocation pays), so the ratio shows what the search adds.
Queries: a common word, a rare word, two words, and a word that is in no exchange. Medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmcli.chatlog import ChatLog, new_id
from llmcli.chatlog.schema import utc_now
from llmcli.usecases.conversation import find_exchanges

QUERIES = {"common": "w3", "rare": "w4321", "two words": "w10 w200", "absent": "nowhere"}


def build(path: Path, exchanges: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(5000)]
    weights = [1 / (i + 1) for i in range(5000)]
    log = ChatLog(path)
    db = log.db
    db.execute("BEGIN IMMEDIATE")
    cid = ""
    for i in range(exchanges):
        if i % 5 == 0:
            cid, now = new_id(), utc_now()
            db.execute("INSERT INTO conversations VALUES (?, 'm', NULL, ?, ?)", (cid, now, now))
        prompt = " ".join(rng.choices(vocab, weights, k=30))
        reply = " ".join(rng.choices(vocab, weights, k=150))
        db.execute(
            "INSERT INTO exchanges (id, conversation_id, model, system, messages, prompt, reply, options, "
            "usage, timings, finish_reason, datetime_utc) VALUES (?,?,'m',NULL,'[]',?,?,'{}','{}','{}',"
            "'stop',?)",
            (new_id(), cid, prompt, reply, utc_now()),
        )
    db.execute("COMMIT")
    log.close()


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t = time.perf_counter()
        build(root / "logs.db", args.exchanges)
        size = (root / "logs.db").stat().st_size
        print(
            f"log: {args.exchanges:,} exchanges, {size / 1e6:.1f} "
            f"MB, built in {time.perf_counter() - t:.1f} s"
        )

        import llmcli.chatlog.log as chatlog

        fts_ms: dict[str, list[float]] = {q: [] for q in QUERIES}
        like_ms: dict[str, list[float]] = {q: [] for q in QUERIES}
        for _ in range(args.rounds):
            for name, text in QUERIES.items():
                fts_ms[name].append(timed(lambda t=text: find_exchanges(root, count=3, query=t, cid=None)))
                saved = chatlog.fts5_available
                chatlog.fts5_available = lambda: False  # the fallback, on the same file
                try:
                    like_ms[name].append(
                        timed(lambda t=text: find_exchanges(root, count=3, query=t, cid=None))
                    )
                finally:
                    chatlog.fts5_available = saved
        print("\nin-process find_exchanges(--query, --count 3), median ms (goal < 100 ms):")
        print(f"  {'query':<10} {'FTS5':>8} {'LIKE':>9} {'LIKE/FTS5':>10}")
        for name in QUERIES:
            f, k = statistics.median(fts_ms[name]), statistics.median(like_ms[name])
            print(f"  {name:<10} {f:>8.2f} {k:>9.2f} {k / f:>10.1f}")

        env = {**os.environ, "LLMCLI_HOME": str(root)}
        cli_ms, help_ms = [], []
        for _ in range(max(3, args.rounds // 3)):
            cmd = [sys.executable, "-m", "llmcli"]
            cli_ms.append(
                timed(
                    lambda cmd=cmd: subprocess.run(
                        [*cmd, "logs", "--query", "w4321"], env=env, check=True, stdout=subprocess.DEVNULL
                    )
                )
            )
            help_ms.append(
                timed(
                    lambda cmd=cmd: subprocess.run(
                        [*cmd, "--help"], env=env, check=True, stdout=subprocess.DEVNULL
                    )
                )
            )
        out = subprocess.run(
            [sys.executable, "-m", "llmcli", "logs", "--query", "w4321", "--json"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert len(json.loads(out)) == 3
        c, h = statistics.median(cli_ms), statistics.median(help_ms)
        print(f"\nCLI process, median ms: logs --query {c:.0f}, --help {h:.0f}, ratio {c / h:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
