"""n choices in one request against n requests sent together, on llmcli serve: the same prompt (a
~1,000-token document and a question), n replies of --n-gen tokens each.

    .venv/bin/python benchmarks/serve_choices.py [--rounds 3] [-t 2] [--n 4] [--doc 1000] [--n-gen 32]

One request with `n` forks its first choice's prefill: the prompt is computed once and the others
take its cells and its first logits row. n requests with the same prompt, released together (a
barrier), share what the first computes too (prefix sharing), all but the last prompt token each.
Every measurement writes a new document, so that neither finds the one before in the pool.

Printed per round: the wall time of each way (request sent -> the last reply done), the prompt
tokens each computed (/metrics' llmcli:prefill_tokens_total), and the ratio of wall times one
request / n requests (goal <= 1.0: n choices are never slower than asking n times). Exit status 1
when it is missed or a request failed.
"""

from __future__ import annotations

import argparse
import random
import re
import statistics
import sys
import threading
import time

from serve_sides import Server, chat_body, embedded_model, llmcli_server, send

GOAL = 1.0
ROW = "{:>5} {:>12} {:>10} {:>13} {:>10} {:>6}"
WORDS = "river stone market winter harbour lamp letter garden clock bridge signal copper".split()


def document(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "\n\nWhich word comes most often?"


def prefilled(server: Server) -> float:
    text = send(server.url, "/metrics", None, headers=server.headers()).body.decode()
    found = re.search(r"^llmcli:prefill_tokens_total (\S+)$", text, re.MULTILINE)
    assert found, "no llmcli:prefill_tokens_total in /metrics"
    return float(found.group(1))


def one_request(server: Server, prompt: str, n: int, n_gen: int) -> float:
    body = {**chat_body(prompt, n_gen, stream=False), "n": n, "temperature": 0.8, "seed": 1}
    t0 = time.perf_counter()
    reply = send(server.url, "/v1/chat/completions", body, headers=server.headers(), timeout=600)
    if reply.status != 200 or len(reply.json()["choices"]) != n:
        sys.exit(f"n={n} failed: {reply.status} {reply.body[:300]!r} {reply.error}")
    return time.perf_counter() - t0


def n_requests(server: Server, prompt: str, n: int, n_gen: int) -> float:
    barrier, failures = threading.Barrier(n), []

    def ask(i: int) -> None:
        body = {**chat_body(prompt, n_gen, stream=False), "temperature": 0.8, "seed": 1 + i}
        barrier.wait()
        reply = send(server.url, "/v1/chat/completions", body, headers=server.headers(), timeout=600)
        if reply.status != 200:
            failures.append(f"{reply.status} {reply.body[:200]!r} {reply.error}")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(n)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        sys.exit(f"a request failed: {failures[0]}")
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--doc", type=int, default=1000, help="words of the document")
    ap.add_argument("--n-gen", type=int, default=32)
    args = ap.parse_args()
    rng = random.Random(20261204)
    ratios = []
    with llmcli_server(embedded_model(), args.n, args.threads, 2048, api_key="sk-bench") as server:
        one_request(server, "Say hi.", 1, 4)  # warm-up: a first request's one-time costs
        print(ROW.format("round", "n choices s", "prefilled", "n requests s", "prefilled", "ratio"))
        for r in range(args.rounds):
            before = prefilled(server)
            one = one_request(server, document(rng, args.doc), args.n, args.n_gen)
            middle = prefilled(server)
            many = n_requests(server, document(rng, args.doc), args.n, args.n_gen)
            after = prefilled(server)
            ratios.append(one / many)
            print(
                ROW.format(
                    r + 1,
                    f"{one:.2f}",
                    int(middle - before),
                    f"{many:.2f}",
                    int(after - middle),
                    f"{one / many:.2f}",
                )
            )
    median = statistics.median(ratios)
    print(f"median ratio, one request with n={args.n} / {args.n} requests: {median:.2f} (goal <= {GOAL})")
    return 0 if median <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
