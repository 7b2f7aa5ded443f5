"""The disk prefix cache on a piped document: a second, different question against a cold first one.

Each round, in a fresh store (its own cache), through `python -m llmcli chat --json` as a script runs it:

  1. cold:     cat doc | llmcli chat "Q1"             (empty cache: prefills everything, saves the tip)
  2. cached:   cat doc | llmcli chat "Q2"             (loads the document's KV state from disk)
  3. uncached: cat doc | llmcli chat --no-cache "Q2"  (the reference the cached reply must equal)

Steps 2 and 3 alternate their order between rounds (3 first on odd rounds), so load on a shared
machine hurts both alike; TTFT is the engine's own (request start -> first token, disk load included).

The goals: the cached call prefills <= 64 tokens, its TTFT is <= 0.10 of the cold call's,
and its temperature-0 reply is byte-identical to --no-cache.

Then a conversation continued with `chat -c`, one process per turn, to --turns turns: each
continuation should prefill only its new turn, that is, everything after the previous reply
(its end-of-turn markup, the new question, the generation prompt); the rest comes from the tip
the previous call saved. The new turn's size is measured, not assumed: the prompt's length minus
the previous prompt and reply.

    python benchmarks/prefix_cache.py [--rounds 2] [--tokens 3000] [--threads 2] [--max-tokens 64]
                                      [--turns 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOPICS = ["the harbour", "the budget", "the schedule", "the suppliers", "the risks", "the staff", "the audit"]


def document(n_tokens: int) -> str:
    """A report of about n_tokens on the embedded model's vocabulary."""
    sys.path.insert(0, str(ROOT / "src"))
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.store import embedded_model_path

    rt = Runtime(embedded_model_path(), RuntimeConfig(n_ctx=256))
    lines, i = ["# Quarterly report", ""], 0
    while len(rt.tokenize("\n".join(lines))) < n_tokens:
        topic = TOPICS[i % len(TOPICS)]
        lines.append(
            f"Item {i}: the review of {topic} found {i * 7 % 13} open issues and {i * 3 % 11} "
            f"closed ones, costing {1000 + i * 37} euros in week {i % 52 + 1}."
        )
        i += 1
    rt.close()
    return "\n".join(lines) + "\n"


QUESTIONS = [
    "Name a fruit.",
    "Why is it healthy?",
    "What colour is it?",
    "Where does it grow?",
    "Name another one.",
    "Which of the two is sweeter?",
    "How do I store them?",
    "Can I freeze them?",
    "Give me a recipe with both.",
    "How long does it take?",
    "Summarize our conversation.",
    "Thank you!",
]


def chat(doc: str | None, question: str, home: str, threads: int, max_tokens: int, *extra: str) -> dict:
    env = {**os.environ, "LLMCLI_HOME": home, "PYTHONPATH": str(ROOT / "src")}
    env.pop("LLMCLI_CACHE_MAX", None)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmcli",
            "chat",
            "--temp",
            "0",
            "-n",
            str(max_tokens),
            "-t",
            str(threads),
            "--json",
            *extra,
            question,
        ],
        input=doc or "",
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    if r.returncode != 0:
        sys.exit(f"llmcli failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument(
        "--turns", type=int, default=10, help="continuations of a `chat -c` conversation (0: none)"
    )
    args = ap.parse_args()
    if args.rounds:
        piped_document(args)
    if args.turns:
        continued(args)


def piped_document(args) -> None:
    """A second question on the same piped document, against the cold first one and --no-cache."""
    doc = document(args.tokens)
    ratios, identical, prefill = [], [], []
    for rnd in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="llmcli-bench-cache-") as home:
            run = lambda q, *extra: chat(doc, q, home, args.threads, args.max_tokens, *extra)  # noqa: E731
            cold = run("Summarize this report in two sentences.")
            if rnd % 2:
                uncached = run("Which item cost the most?", "--no-cache")
                cached = run("Which item cost the most?")
            else:
                cached = run("Which item cost the most?")
                uncached = run("Which item cost the most?", "--no-cache")
            cache_files = list(Path(home, "cache").glob("*.kv"))
            size = sum(p.stat().st_size for p in cache_files)
        usage = cached["usage"]
        new = usage["prompt_tokens"] - usage["cached_tokens"]
        ratio = cached["timings"]["ttft_ms"] / cold["timings"]["ttft_ms"]
        same = cached["text"] == uncached["text"]
        ratios.append(ratio)
        identical.append(same)
        prefill.append(new)
        print(
            f"round {rnd + 1}: document {cold['usage']['prompt_tokens']} prompt tokens; cold TTFT "
            f"{cold['timings']['ttft_ms']:.0f} ms; cached: {usage['cached_tokens']} from "
            f"{usage['cache_source']}, {new} prefilled, TTFT {cached['timings']['ttft_ms']:.0f} ms (ratio "
            f"{ratio:.3f}); --no-cache TTFT {uncached['timings']['ttft_ms']:.0f} ms; "
            f"replies identical: {same}; {len(cache_files)} entries, {size / 1e6:.1f} MB",
            flush=True,
        )
    print(f"\nsecond question prefill tokens: {max(prefill)} (goal <= 64)")
    print(
        f"TTFT cached / cold: median {statistics.median(ratios):.3f}, rounds "
        f"{', '.join(f'{r:.3f}' for r in ratios)} (goal <= 0.10)"
    )
    print(f"reply byte-identical to --no-cache: {all(identical)} ({sum(identical)}/{len(identical)})")


def continued(args) -> None:
    """`chat -c` turn after turn: what each continuation prefills, against the size of its new turn."""
    print(f"\nchat -c, {args.turns} turns, one process each (first turn: a plain one-shot):")
    only_new = []
    with tempfile.TemporaryDirectory(prefix="llmcli-bench-continue-") as home:
        previous = None
        for turn in range(args.turns + 1):
            question = QUESTIONS[turn % len(QUESTIONS)]
            reply = chat(None, question, home, args.threads, 32, *(["-c"] if turn else []))
            usage = reply["usage"]
            prefilled = usage["prompt_tokens"] - usage["cached_tokens"]
            if previous is not None:
                new_turn = usage["prompt_tokens"] - previous["prompt_tokens"] - previous["completion_tokens"]
                only_new.append(prefilled <= new_turn)
                print(
                    f"turn {turn + 1:2}: prompt {usage['prompt_tokens']:4} tokens, "
                    f"{usage['cached_tokens']:4} from {usage['cache_source']}, {prefilled:3} "
                    f"prefilled; new turn {new_turn} tokens; TTFT {reply['timings']['ttft_ms']:.0f} ms",
                    flush=True,
                )
            previous = usage
    print(
        f"every continuation prefilled only its new turn: {all(only_new)} ({sum(only_new)}/{len(only_new)})"
    )


if __name__ == "__main__":
    main()
