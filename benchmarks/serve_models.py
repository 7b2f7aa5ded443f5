"""Several models behind one `llmcli serve`: the cost of a switch, memory over many, and fairness.

    .venv/bin/python benchmarks/serve_models.py [--switches 50] [--rounds 5] [-t 2]

Two models in a private store: the embedded SmolLM2 (A) and the Gemma 3 270M test GGUF (B).

1. Switches: `--max-models 1`, a load-only request (`/api/generate` with no prompt) for A, then B,
   then A..., each evicting the other: the time of each switch, and the server's RSS before the
   first load, after the first two, after every switch, and once both are unloaded.
2. Fairness: both loaded; B's time to first token alone, then while A streams a 512-token reply,
   alternating the two conditions each round; the goal is a ratio <= 2.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.assets import gemma3_270m  # noqa: E402
from tests.serve.server import ServeProcess  # noqa: E402

from llmcli.model_ref import EMBEDDED_NAME  # noqa: E402
from llmcli.store import ModelEntry, Store  # noqa: E402

A, B = EMBEDDED_NAME, "gemma3-270m"
LONG = 512


def rss(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:"))


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def switches(home: Path, n: int, threads: str) -> None:
    with ServeProcess(home, "-t", threads, "--max-models", "1", model=None) as srv:
        client = httpx.Client(base_url=srv.url, timeout=600)
        start = rss(srv.pid)
        times, levels = [], []
        for i in range(n + 2):
            model = (A, B)[i % 2]
            t0 = time.perf_counter()
            r = client.post("/api/generate", json={"model": model})
            assert r.status_code == 200 and r.json()["done_reason"] == "load", r.text
            if i >= 2:  # the first two are each model's first load ever
                times.append(time.perf_counter() - t0)
            levels.append(rss(srv.pid))
        client.post("/api/generate", json={"model": (A, B)[(n + 1) % 2], "keep_alive": 0})
        end = rss(srv.pid)
    print(f"switches ({n}, --max-models 1, load-only requests):")
    print(
        f"  time per switch: median {statistics.median(times) * 1000:,.0f} ms, "
        f"min {min(times) * 1000:,.0f}, max {max(times) * 1000:,.0f}"
    )
    a_levels, b_levels = levels[2::2], levels[3::2]
    print(
        f"  RSS before any load {mb(start)}; with A loaded: first {mb(levels[0])}, after the switches "
        f"{mb(a_levels[-1])} (range {mb(max(a_levels) - min(a_levels))}); with B: first {mb(levels[1])}, "
        f"last {mb(b_levels[-1])} (range {mb(max(b_levels) - min(b_levels))})"
    )
    print(f"  RSS once both are unloaded {mb(end)}: {mb(end - start)} over the level before any load")


def ttft(client: httpx.Client, model: str) -> float:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": "Name a colour."}],
        "max_tokens": 4,
        "stream": True,
    }
    t0 = time.perf_counter()
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                delta = json.loads(line[6:])["choices"][0]["delta"]
                if delta.get("content"):
                    return time.perf_counter() - t0
    raise AssertionError("no token")


def fairness(home: Path, rounds: int, threads: str) -> None:
    with ServeProcess(home, "-t", threads, "--keep-alive", "-1", model=None) as srv:
        client = httpx.Client(base_url=srv.url, timeout=600)
        for model in (A, B):
            client.post("/api/generate", json={"model": model})
        ttft(client, B)  # warm
        alone, beside, produced = [], [], []
        for _ in range(rounds):
            alone.append(ttft(client, B))
            started = threading.Event()

            def long_reply(started: threading.Event = started) -> None:
                body = {"model": A, "prompt": "1, 2, 3, 4, 5,", "max_tokens": LONG, "stream": True}
                n = 0
                with httpx.stream("POST", srv.url + "/v1/completions", json=body, timeout=600) as r:
                    for line in r.iter_lines():
                        if line.startswith("data: {"):
                            n += 1
                            if n == 8:  # A is decoding
                                started.set()
                produced.append(n)
                started.set()

            worker = threading.Thread(target=long_reply)
            worker.start()
            started.wait()
            beside.append(ttft(client, B))
            worker.join()
    ratio = statistics.median(beside) / statistics.median(alone)
    print(
        f"fairness ({rounds} rounds, alternating; A streams up to {LONG} tokens, "
        f"{min(produced)}-{max(produced)} chunks):"
    )
    for i, (x, y) in enumerate(zip(alone, beside, strict=True), 1):
        print(f"  round {i}: B's TTFT alone {x * 1000:7.1f} ms, beside A {y * 1000:7.1f} ms ({y / x:.2f}x)")
    print(f"  median ratio {ratio:.2f} (goal <= 2): {'met' if ratio <= 2 else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--switches", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-t", "--threads", default="2")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # each figure as it comes
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        gemma = str(gemma3_270m())
        Store(home).register(ModelEntry(name=B, path=gemma, files=[gemma], source="benchmark"))
        switches(home, args.switches, args.threads)
        fairness(home, args.rounds, args.threads)


if __name__ == "__main__":
    main()
