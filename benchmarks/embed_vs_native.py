"""Embedding throughput: llmcli serve against native llama-server --embedding, on the same GGUF.

    .venv/bin/python benchmarks/embed_vs_native.py --model all-MiniLM-L6-v2-f32.gguf [-t 2] [--rounds 3]
        [--native PATH | --no-native]

The GGUF is a converted all-MiniLM-L6-v2 (`llmcli convert`; tests/assets.py fetches the checkpoint).
Two measures, each side started alone with the same threads (the order rotating round to round):

- throughput: 4 clients at once, each sending requests of 32 inputs (sentences of 8 to 40 words),
  for `--requests` requests in all; inputs embedded per second. Goal: llmcli / llama-server >= 1.0.
- batching: one request of 32 inputs against 32 requests of one input sent one after another, on
  llmcli. Goal: the one request >= 3x faster. The server's CPU time for each is printed too (Linux):
  the wall-clock ratio grows when other processes keep the cores busy, the CPU-time ratio does not.

llama-server runs with --embedding --pooling mean -ub 512 -b 2048 -np 4 (its inputs must fit one
ubatch, as llmcli's). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
from serve_sides import SRC, Server, free_port, llama_server_binary, llmcli_command, with_pythonpath

GOAL_NATIVE = 1.0
GOAL_BATCH = 3.0
WORDS = "the a model vector search query document retrieval index cosine token batch server client".split()


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 40))) + "." for _ in range(n)]


def llmcli_side(model: str, threads: int) -> Server:
    port = free_port()
    cmd = [*llmcli_command(), "serve", model, "-t", str(threads), "--host", "127.0.0.1", "--port", str(port)]
    return Server("llmcli", cmd, port, "/health", with_pythonpath(SRC))


def native_side(model: str, threads: int, binary: str) -> Server:
    port = free_port()
    cmd = [binary, "-m", model, "--embedding", "--pooling", "mean", "-t", str(threads), "-tb", str(threads)]
    cmd += ["-np", "4", "-c", "2048", "-b", "2048", "-ub", "512", "--host", "127.0.0.1", "--port", str(port)]
    return Server("llama-server", cmd, port, "/health")


def post(client: httpx.Client, url: str, inputs: list[str]) -> None:
    got = client.post(url + "/v1/embeddings", json={"input": inputs, "encoding_format": "float"}, timeout=300)
    got.raise_for_status()
    assert len(got.json()["data"]) == len(inputs)


def throughput(url: str, requests: int, clients: int = 4, per_request: int = 32) -> float:
    batches = [sentences(per_request, seed) for seed in range(requests)]
    with httpx.Client() as client:
        post(client, url, batches[0])  # warm-up
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(lambda b: post(client, url, b), batches))
        return requests * per_request / (time.perf_counter() - t0)


def cpu_s(pid: int) -> float:
    """The server's CPU time so far (utime + stime, every thread): the work a request cost, which a
    busy machine does not stretch as it stretches the wall clock. 10 ms resolution (USER_HZ 100)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Batching:
    one: float  # wall seconds of one request of n inputs
    many: float  # of n requests of one, one after another
    one_cpu: float  # the server's CPU seconds for each
    many_cpu: float


def batching(url: str, pid: int, n: int = 32) -> Batching:
    texts = sentences(n, 99)
    with httpx.Client() as client:
        post(client, url, texts[:1])
        c0, t0 = cpu_s(pid), time.perf_counter()
        post(client, url, texts)
        c1, t1 = cpu_s(pid), time.perf_counter()
        for text in texts:
            post(client, url, [text])
        return Batching(t1 - t0, time.perf_counter() - t1, c1 - c0, cpu_s(pid) - c1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="a converted BERT embedding GGUF")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--requests", type=int, default=16, help="requests of 32 inputs per throughput run")
    ap.add_argument("--native", default=None, help="llama-server binary (default: build_native.sh --server)")
    ap.add_argument("--no-native", action="store_true", help="measure llmcli alone")
    args = ap.parse_args()
    native = None if args.no_native else (args.native or llama_server_binary())
    sides = {"llmcli": lambda: llmcli_side(args.model, args.threads)}
    if native:
        sides["llama-server"] = lambda: native_side(args.model, args.threads, native)
    rates: dict[str, list[float]] = {name: [] for name in sides}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    names = list(sides)
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            server = sides[name]().start()
            try:
                rates[name].append(throughput(server.url, args.requests))
                batch = ""
                if name == "llmcli":
                    b = batching(server.url, server.pid)
                    ratios.append(b.many / b.one)
                    cpu_ratios.append(b.many_cpu / max(b.one_cpu, 0.01))
                    batch = (
                        f"  (one request of 32 {b.one * 1000:.0f} ms, 32 of one {b.many * 1000:.0f} ms;"
                        f" server CPU {b.one_cpu * 1000:.0f} / {b.many_cpu * 1000:.0f} ms)"
                    )
            finally:
                server.stop()
            print(f"round {r + 1} {name:13s} {rates[name][-1]:8.1f} inputs/s{batch}", flush=True)
    med = {name: statistics.median(v) for name, v in rates.items()}
    batch = statistics.median(ratios)
    print(f"\nmedian inputs/s: {', '.join(f'{n} {v:.1f}' for n, v in med.items())}")
    print(f"one request of 32 vs 32 requests of one, llmcli: {batch:.2f}x faster (goal >= {GOAL_BATCH})")
    print(f"  in the server's CPU time: {statistics.median(cpu_ratios):.2f}x less")
    failed = batch < GOAL_BATCH
    if "llama-server" in med:
        ratio = med["llmcli"] / med["llama-server"]
        print(f"llmcli / llama-server at 4 clients x 32 inputs: {ratio:.2f} (goal >= {GOAL_NATIVE})")
        failed |= ratio < GOAL_NATIVE
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
