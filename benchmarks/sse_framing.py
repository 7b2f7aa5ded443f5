"""SSE framing cost per byte: one long line read in 1 KiB pieces, at growing lengths.

A linear framer spends the same time per byte at every length (ratios near 1); one that rescans its
buffer on every read grows with the length (a ratio near 16 at 16x the bytes). The tests keep only a
hang guard on the 1 MiB line (tests/engine/openai/test_openai_http.py); this prints the ratio.

    .venv/bin/python benchmarks/sse_framing.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import io
import time

from llmcli.engine.openai.sse import sse_events


class Body(io.BytesIO):
    """Hands the parser fixed-size reads, as a socket would."""

    def __init__(self, data: bytes, size: int) -> None:
        super().__init__(data)
        self.size = size

    def read1(self, n: int = -1) -> bytes:
        return self.read(self.size)


def seconds_per_byte(length: int) -> float:
    data = b"data: " + b"a" * length + b"\n\n"
    start = time.perf_counter()
    (_event,) = list(sse_events(Body(data, 1024).read1))
    return (time.perf_counter() - start) / len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    lengths = [(1 << 16) - 100, (1 << 18) - 100, (1 << 20) - 100]
    for round_ in range(1, args.rounds + 1):
        costs = [seconds_per_byte(n) for n in lengths]
        ratios = "  ".join(f"{n >> 10} KiB: {c / costs[0]:.2f}x" for n, c in zip(lengths, costs, strict=True))
        print(f"round {round_}: ns/byte at 64 KiB {costs[0] * 1e9:.1f}; per-byte cost vs 64 KiB: {ratios}")


if __name__ == "__main__":
    main()
