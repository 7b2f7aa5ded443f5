"""Four clients at once, each a different question about the same ~1,500-token document: the time
to the first token on llmcli serve against native llama-server.

    .venv/bin/python benchmarks/serve_shared_prefix.py [--rounds 3] [-t 2] [--doc 1500] [--n-gen 16]

The four streamed requests are released together (a barrier) and TTFT is measured by the client:
request sent -> the first chunk with content. llmcli prefills the document once and gives the other
sequences its cells; the question is what llama-server does with four slots that share a prefix.
Both serve with 4 sequences in one unified pool (serve_sides.py), 2 threads, temperature 0.

Neither side may find the round before in a cache: every round starts a fresh server for each side
(llmcli keeps finished prefixes in its pool, llama-server keeps its slots' prompts and a RAM prompt
cache), and every round writes a new document too (the same one for both sides of that round). A
short warm-up request, unrelated to the document, goes first on each fresh server, so the measured
requests do not pay a first request's one-time costs.

Printed per round and side: the mean and max TTFT, the prompt tokens, the tokens each server says
it took from its cache (timings.cache_n) and computed (timings.prompt_n); then the medians and the
ratio of mean TTFT llmcli / llama-server (goal <= 0.6). Exit status 1 when it is missed or a
request failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading

from serve_sides import (
    SRC,
    Reply,
    Server,
    chat_body,
    embedded_model,
    llama_server,
    llama_server_binary,
    llmcli_command,
    llmcli_server,
    send,
    with_pythonpath,
)

GOAL = 0.6
SIDES = ("llmcli", "llama-server")
QUESTIONS = [
    "Which city is mentioned most often?",
    "Summarise the report in one sentence.",
    "What happened in the last paragraph?",
    "Give the report a title.",
    "Who is the report written for?",
    "Which year comes first in the report?",
    "Is the tone of the report hopeful or worried?",
    "List three materials the report names.",
]
CITIES = "Lisbon Oslo Quito Nairobi Hanoi Perth Tallinn Cusco Dakar Porto Lyon Kyoto".split()
THINGS = "copper timber wool glass grain salt cotton iron clay silk paper tin".split()
VERBS = "shipped stored repaired counted traded weighed painted measured sorted carried".split()
PEOPLE = "the harbour master,the guild,a young clerk,the mayor,two engineers,the council".split(",")


def document_text(seed: int, sentences: int) -> str:
    """Plain report prose, deterministic per seed, varied enough to be read as text."""
    rng = random.Random(seed)
    out = []
    for i in range(sentences):
        year = rng.randint(1820, 1990)
        out.append(
            f"In {year} {rng.choice(PEOPLE)} of {rng.choice(CITIES)} {rng.choice(VERBS)} "
            f"{rng.randint(2, 900)} crates of {rng.choice(THINGS)} and {rng.choice(THINGS)}, "
            f"and the record of it was kept in {rng.choice(CITIES)}."
        )
        if i % 6 == 5:
            out.append("\n\n")
    return " ".join(out).replace(" \n\n ", "\n\n")


def tokenize(model: str, text: str) -> list[str]:
    """The model's tokens of TEXT as pieces, through `llmcli tokenize --json`."""
    proc = subprocess.run(
        [*llmcli_command(), "tokenize", model, "-", "--json"],
        input=text,
        capture_output=True,
        text=True,
        env=with_pythonpath(SRC),
    )
    if proc.returncode != 0:
        sys.exit(f"llmcli tokenize failed: {proc.stderr[-1000:]}")
    return json.loads(proc.stdout)["pieces"]


def make_document(model: str, seed: int, n_tokens: int) -> tuple[str, int]:
    """A document of about n_tokens tokens (cut at a token boundary) and its token count."""
    pieces = tokenize(model, document_text(seed, n_tokens // 20 + 20))
    if len(pieces) < n_tokens:
        sys.exit(f"the generated text has only {len(pieces)} tokens; raise its sentence count")
    text = "".join(pieces[:n_tokens])
    return text, len(tokenize(model, text))


def prompt(doc: str, question: str) -> str:
    return f"Read the report below, then answer the question after it.\n\n{doc}\n\nQuestion: {question}"


def ask_together(server: Server, doc: str, n: int, n_gen: int, timeout: float) -> list[Reply]:
    """n streamed requests, one a question, released at the same instant."""
    barrier = threading.Barrier(n)
    replies: list[Reply | None] = [None] * n

    def client(i: int) -> None:
        body = chat_body(prompt(doc, QUESTIONS[i % len(QUESTIONS)]), n_gen)
        barrier.wait()
        replies[i] = send(server.url, "/v1/chat/completions", body, headers=server.headers(), timeout=timeout)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in replies if r is not None]


def summary(replies: list[Reply]) -> dict:
    """Mean/max client TTFT and what each server says about the prompt (usage, timings)."""
    row: dict = {"ok": 0, "ttft": [], "prompt_tokens": 0, "cache_n": 0, "prompt_n": 0, "errors": []}
    for r in replies:
        usage = next((e["usage"] for e in reversed(r.events) if isinstance(e.get("usage"), dict)), {})
        timings = next((e["timings"] for e in reversed(r.events) if isinstance(e.get("timings"), dict)), {})
        if r.status != 200 or not r.done or r.error or r.ttft_ms is None:
            row["errors"].append(f"status {r.status} done {r.done} {r.error or r.body[:200]!r}")
            continue
        row["ok"] += 1
        row["ttft"].append(r.ttft_ms)
        row["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        cached = timings.get("cache_n")
        if cached is None:
            cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        row["cache_n"] += int(cached or 0)
        row["prompt_n"] += int(timings.get("prompt_n") or 0)
    row["ttft_mean"] = statistics.mean(row["ttft"]) if row["ttft"] else float("nan")
    row["ttft_max"] = max(row["ttft"]) if row["ttft"] else float("nan")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=4, help="questions at once (and sequences a server)")
    ap.add_argument("--doc", type=int, default=1500, help="document tokens")
    ap.add_argument("-n", "--n-gen", type=int, default=16, help="max_tokens of each answer")
    ap.add_argument("--ctx", type=int, default=2048, help="KV cells per sequence (serve_sides.py)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a request may take")
    ap.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = ap.parse_args()

    model = args.model or embedded_model()
    native = llama_server_binary()
    n = args.clients
    print(f"model    {model}\nnative   {native}")
    print(
        f"settings {n} clients at once, a {args.doc}-token document, {args.n_gen} output tokens, "
        f"-t {args.threads}, {args.ctx} cells a sequence, {args.rounds} rounds, a fresh server and "
        "a new document each round, the order alternating\n",
        flush=True,
    )
    results: dict[str, list[dict]] = {side: [] for side in SIDES}
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        for rnd in range(args.rounds):
            doc, doc_tokens = make_document(model, 1000 + rnd, args.doc)
            for side in SIDES if rnd % 2 == 0 else SIDES[::-1]:
                if side == "llmcli":
                    server = llmcli_server(model, n, args.threads, args.ctx)
                else:
                    server = llama_server(model, n, args.threads, args.ctx, native)
                with server:
                    send(
                        server.url, "/v1/chat/completions", chat_body("Say hi.", 4), headers=server.headers()
                    )
                    row = summary(ask_together(server, doc, n, args.n_gen, args.timeout))
                row["doc_tokens"] = doc_tokens
                results[side].append(row)
            cells = "  ".join(
                f"{side}: TTFT mean {r[-1]['ttft_mean']:.0f} max {r[-1]['ttft_max']:.0f} ms, "
                f"prompt {r[-1]['prompt_tokens']} cached {r[-1]['cache_n']} computed {r[-1]['prompt_n']}"
                for side, r in results.items()
            )
            ratio = results["llmcli"][-1]["ttft_mean"] / results["llama-server"][-1]["ttft_mean"]
            print(
                f"round {rnd + 1} (document {doc_tokens} tokens): {cells}; ratio {ratio:.3f}  "
                f"(load {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    except KeyboardInterrupt:
        print("stopped early; summarising the finished rounds", flush=True)
    done = min(len(v) for v in results.values())
    if not done:
        sys.exit(1)

    def med(side: str, key: str) -> float:
        return statistics.median(r[key] for r in results[side][:done])

    print(f"\nmedians over {done} round(s), {n} requests a round and side\n")
    print("| side | mean TTFT ms | max TTFT ms | prompt tokens | cached (cache_n) | computed (prompt_n) |")
    print("| ---- | -----------: | ----------: | ------------: | ---------------: | ------------------: |")
    for side in SIDES:
        print(
            f"| {side} | {med(side, 'ttft_mean'):.0f} | {med(side, 'ttft_max'):.0f} | "
            f"{med(side, 'prompt_tokens'):.0f} | {med(side, 'cache_n'):.0f} | {med(side, 'prompt_n'):.0f} |"
        )
    ratio = med("llmcli", "ttft_mean") / med("llama-server", "ttft_mean")
    per_round = ", ".join(
        f"{a['ttft_mean'] / b['ttft_mean']:.3f}"
        for a, b in zip(results["llmcli"][:done], results["llama-server"][:done], strict=True)
    )
    ok = ratio <= GOAL
    print(
        f"\nmean TTFT llmcli / llama-server: {ratio:.3f} (rounds {per_round}; goal <= {GOAL}: "
        f"{'met' if ok else 'MISSED'})"
    )
    for side in SIDES:
        for rnd, row in enumerate(results[side][:done]):
            for error in row["errors"]:
                ok = False
                print(f"FAILED REQUEST: round {rnd + 1} {side}: {error}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
