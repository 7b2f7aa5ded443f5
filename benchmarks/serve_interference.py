"""A 6,000-token prompt arrives while 3 streams run: how long do the streams wait between tokens?

    .venv/bin/python benchmarks/serve_interference.py [--rounds 3] [-t 2] [--prompt 6000]
        [--before-src DIR]   # a second llmcli tree (its src/), measured in alternation with this one

Three streamed completions count on (temperature 0, up to 600 tokens each); once each has sent 20
tokens, one chat brings a ~6,000-token message and asks for 1 token. The client stamps every streamed
token. While the long prompt is prefilled, each step of the scheduler carries the streams' tokens
and one prefill chunk, so a stream's gap between two tokens is one such step; anything the engine
thread does besides (rendering and tokenizing the long prompt, before llmcli moved them off that
thread) shows as one longer gap.

A step's time grows as the prefill goes deeper (attention over more cells: 0.4 s at the start to
about 2 s at 6,000 tokens on 2 cores), so each gap is judged against the median of its neighbours,
3 on each side: one step with a prefill chunk at that depth. Printed per round and side: the worst
such ratio and its gap, the longest gap, and the gap before the long prompt arrived. Goal: no gap
over one prefill chunk's step plus 50%, i.e. a ratio <= 1.5. Exit status 1 when it is missed (for
this tree).
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from serve_sides import SRC, Server, embedded_model, free_port, llmcli_command, with_pythonpath

GOAL = 1.5
STREAMS = 3
WARM_TOKENS = 20  # tokens each stream sends before the long prompt goes
NEIGHBOURS = 3  # gaps on each side a gap is compared with


def stream_times(url: str, body: dict, stamps: list[float], started: threading.Event) -> None:
    """POST a streamed completion; append the arrival time of each content event to `stamps`."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    conn.request(
        "POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: {"):
            continue
        event = json.loads(line[6:])
        if any(c.get("text") for c in event.get("choices") or []):
            stamps.append(time.perf_counter())
            if len(stamps) == WARM_TOKENS:
                started.set()
    conn.close()


def long_request(url: str, words: int) -> tuple[float, float, int]:
    """(sent, answered, prompt tokens) of one chat with a long message and a 1-token reply."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=600)
    text = " ".join(f"item{i % 97} is number {i}." for i in range(round(words / 9.4)))  # 9.4 tokens each
    body = {"messages": [{"role": "user", "content": text}], "max_tokens": 1, "temperature": 0}
    t0 = time.perf_counter()
    conn.request(
        "POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"}
    )
    reply = json.loads(conn.getresponse().read())
    t1 = time.perf_counter()
    conn.close()
    return t0, t1, reply["usage"]["prompt_tokens"]


def one_round(src: Path, model: str, threads: int, prompt_tokens: int) -> dict:
    port = free_port()
    cmd = [*llmcli_command(), "serve", model, "--parallel", "4", "-t", str(threads), "--ctx", "16384"]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    with Server("llmcli", cmd, port, "/health", with_pythonpath(src)) as server:
        stamps: list[list[float]] = [[] for _ in range(STREAMS)]
        started = [threading.Event() for _ in range(STREAMS)]
        threads_ = []
        for i in range(STREAMS):
            # counting goes on at temperature 0 (a chat reply would end within the window)
            start = ", ".join(str(n) for n in range(i * 100, i * 100 + 8))
            body = {"prompt": start + ",", "max_tokens": 600, "temperature": 0, "stream": True}
            th = threading.Thread(target=stream_times, args=(server.url, body, stamps[i], started[i]))
            th.start()
            threads_.append(th)
        for event in started:
            event.wait(120)
        sent, answered, n_prompt = long_request(server.url, prompt_tokens)
        for th in threads_:
            th.join(600)
    # A step's time grows with the depth the long prompt has reached (attention over more cells), so
    # a gap is judged against its neighbours: the median of the 3 gaps on each side, each stream apart.
    spikes, during, before = [], [], []
    for times in stamps:
        gaps = [(b - a, b) for a, b in zip(times, times[1:], strict=False)]
        before += [gap for gap, end in gaps if end < sent]
        inside = [gap for gap, end in gaps if sent <= end <= answered + 0.05]
        during += inside
        for i, gap in enumerate(inside):  # neighbours inside the window too: steps with a chunk each
            around = inside[max(0, i - NEIGHBOURS) : i] + inside[i + 1 : i + 1 + NEIGHBOURS]
            if around:
                spikes.append((gap / statistics.median(around), gap))
    if not during:
        sys.exit("no stream token arrived while the long prompt was in flight: raise the streams' max_tokens")
    ratio, spike_gap = max(spikes)
    return {
        "prompt_tokens": n_prompt,
        "prefill_s": answered - sent,
        "max_gap_ms": max(during) * 1000,
        "spike_gap_ms": spike_gap * 1000,
        "before_gap_ms": statistics.median(before) * 1000 if before else float("nan"),
        "ratio": ratio,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-t", "--threads", type=int, default=2)
    parser.add_argument("--prompt", type=int, default=6000, help="about this many prompt tokens")
    parser.add_argument("--before-src", type=Path, help="another llmcli tree's src/, run in alternation")
    args = parser.parse_args()
    model = embedded_model()
    sides = {"this tree": SRC, **({"before": args.before_src} if args.before_src else {})}
    results: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds):
        for name, src in sides.items():
            row = one_round(src, model, args.threads, args.prompt)
            results[name].append(row)
            print(
                f"round {r + 1} {name:>9}: prompt {row['prompt_tokens']} tokens prefilled in "
                f"{row['prefill_s']:.1f} s; worst gap {row['spike_gap_ms']:.0f} ms = {row['ratio']:.2f}x its "
                f"neighbours (longest {row['max_gap_ms']:.0f} ms, at the deepest chunks); "
                f"median gap before it {row['before_gap_ms']:.0f} ms",
                flush=True,
            )
    verdict = 0
    for name, rows in results.items():
        ratio = statistics.median(row["ratio"] for row in rows)
        print(f"{name}: worst gap / its neighbours' median, median of rounds {ratio:.2f} (goal <= {GOAL})")
        if name == "this tree" and ratio > GOAL:
            verdict = 1
    return verdict


if __name__ == "__main__":
    sys.exit(main())
