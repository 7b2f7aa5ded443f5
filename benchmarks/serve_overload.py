"""llmcli serve under overload and abuse: every request answered, nothing hangs, nothing leaks.

    .venv/bin/python benchmarks/serve_overload.py [--requests 200] [--concurrency 32] [-t 2]

One llmcli serve --parallel 4 --max-queue 8, with API keys, a rate limit (requests a minute per key)
and a small --max-body, gets 200 requests from 32 clients at once, a fixed shuffled mix of:

    valid          streamed chat requests (16 tokens), read to data: [DONE]
    valid-whole    the same without stream: one JSON answer
    hang-up        a streamed request whose client closes the connection after the first token
    malformed      bodies that are not JSON (cut short, a trailing comma, plain text, empty)
    bad-param      JSON with a parameter out of range or refused (temperature 12, n 2, tools...)
    wrong-key      a wrong key, or none, in either header
    oversize       a body past --max-body: declared by Content-Length (its body never sent, as a
                   client waiting for the verdict does), or chunked and cut off by the server
    over-rate      whole chat requests that all use one key, more of them than --rate-limit

The three generation kinds do what a client should with a 503 (the queue is full): wait the
Retry-After and try again, up to --retries times; without that, 32 clients against 12 places
would spend the run on instant 503s and few streams would ever start, let alone be cut. Each
request but the over-rate ones has a key of its own, so retries never reach a rate limit; the
over-rate requests share one key, come early in the run (inside the first one-minute window) and outnumber
--rate-limit, so the last of them get 429.

Checks: every answer (each attempt) was a complete 200 or a JSON error in OpenAI's shape
({"error": {"message", "type", "code"}}, code = the status) with a status its kind allows (400,
401, 413, 429 or 503; Retry-After on 429 and 503); no attempt took longer than --timeout; the
refusals the mix aims at (400, 401, 413, 429) and a hang-up mid-stream all occurred; the server's
RSS after the storm is within 50 MB of before it (after a warm-up); and /metrics at the end shows
llmcli:num_requests_running 0, nothing waiting and llmcli:kv_cache_usage_perc 0 (no KV cell held by
a sequence; prefixes kept for reuse are kv_cache_cached_perc, printed). Exit status 1 when a check
fails.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import re
import secrets
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait

from serve_sides import Reply, Server, chat_body, embedded_model, llmcli_server, rss_mb, send

MIX = {  # kind -> share of the requests
    "valid": 0.25,
    "valid-whole": 0.10,
    "hang-up": 0.15,
    "malformed": 0.10,
    "bad-param": 0.10,
    "wrong-key": 0.10,
    "oversize": 0.10,
    "over-rate": 0.10,
}
RETRIED = {"valid", "valid-whole", "hang-up"}  # a 503 is waited out and tried again
# Statuses a kind may get: its own, and 503 for a generation when the queue is full (the answer
# after the last retry). 429 only for the shared key: the others never reach the rate limit.
ALLOWED = {
    "valid": {200, 503},
    "valid-whole": {200, 503},
    "hang-up": {200, 503},
    "malformed": {400},
    "bad-param": {400},
    "wrong-key": {401},
    "oversize": {413},
    "over-rate": {200, 429, 503},
}
MALFORMED = [
    b'{"messages": [{"role": "user", "content": "cut',
    b'{"messages": [{"role": "user", "content": "hi"}],}',
    b"say hello",
    b"",
]
BAD_PARAMS = [
    {"temperature": 12},
    {"max_tokens": -5},
    {"top_p": 2},
    {"n": 2},
    {"messages": "hello"},
    {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
]
ROUTE = "/v1/chat/completions"
CHAT = "Tell me something about the sea."


def plan(n: int, seed: int) -> list[tuple[int, str]]:
    """n (number, kind) pairs in the shares of MIX, shuffled the same way every run; the over-rate
    requests among the first quarter, so that they all fall in the rate limit's first minute."""
    rng = random.Random(seed)
    counts = {kind: round(share * n) for kind, share in MIX.items()}
    counts["valid"] += n - sum(counts.values())
    kinds = [kind for kind, count in counts.items() if kind != "over-rate" for _ in range(count)]
    rng.shuffle(kinds)
    early = max(n // 4, counts["over-rate"])
    for _ in range(counts["over-rate"]):
        kinds.insert(rng.randrange(early), "over-rate")
    return list(enumerate(kinds))


def oversize_declared(server: Server, headers: dict[str, str], size: int, timeout: float) -> Reply:
    """Content-Length past the cap, headers only: the server answers before any body byte is sent."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    reply = Reply()
    t0 = time.perf_counter()
    try:
        conn.putrequest("POST", ROUTE)
        for name, value in {**headers, "Content-Type": "application/json"}.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(size))
        conn.endheaders()
        resp = conn.getresponse()
        reply.status, reply.body = resp.status, resp.read()
        reply.headers = {k.lower(): v for k, v in resp.getheaders()}
    except (OSError, http.client.HTTPException) as exc:
        reply.error = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
        reply.elapsed_ms = (time.perf_counter() - t0) * 1000
    return reply


def attempt(server: Server, kind: str, i: int, args: argparse.Namespace, key: str) -> Reply:
    keyed = {"Authorization": f"Bearer {key}"}
    go = lambda body, **kw: send(server.url, ROUTE, body, timeout=args.timeout, **kw)  # noqa: E731
    if kind == "valid":
        return go(chat_body(CHAT, args.n_gen), headers=keyed)
    if kind in ("valid-whole", "over-rate"):
        return go(chat_body(CHAT, args.n_gen, stream=False), headers=keyed)
    if kind == "hang-up":
        return go(chat_body(CHAT, args.n_gen), headers=keyed, hang_up_after_first=True)
    if kind == "malformed":
        return go(MALFORMED[i % len(MALFORMED)], headers=keyed)
    if kind == "bad-param":
        bad = {**chat_body(CHAT, args.n_gen, stream=False), **BAD_PARAMS[i % len(BAD_PARAMS)]}
        return go(bad, headers=keyed)
    if kind == "wrong-key":
        wrong = [{"Authorization": "Bearer sk-wrong"}, {"x-api-key": "sk-wrong"}, {}][i % 3]
        return go(chat_body(CHAT, args.n_gen), headers=wrong)
    assert kind == "oversize", kind
    if i % 2:
        return oversize_declared(server, keyed, args.max_body * 4, args.timeout)
    return go(chat_body("x" * (args.max_body + 1024), args.n_gen), headers=keyed, chunked=True)


def run_one(server: Server, kind: str, i: int, args: argparse.Namespace, key: str) -> list[Reply]:
    """Every attempt of one request: more than one when a generation was told 503 and retried."""
    replies = [attempt(server, kind, i, args, key)]
    while kind in RETRIED and replies[-1].status == 503 and len(replies) < args.retries:
        wait_s = replies[-1].headers.get("retry-after", "1")
        time.sleep(min(float(wait_s) if wait_s.isdigit() else 1.0, 5.0))
        replies.append(attempt(server, kind, i, args, key))
    return replies


def problem(kind: str, r: Reply, timeout: float) -> str:
    """What is wrong with the answer a request of this kind got; '' when nothing is."""
    if r.elapsed_ms > timeout * 1000 or "timed out" in r.error or "timeout" in r.error:
        return f"no answer within {timeout:.0f} s"
    if r.status == 0:
        return f"no answer: {r.error}"
    if r.status not in ALLOWED[kind]:
        return f"status {r.status} for a {kind} request"
    if r.status == 200:
        return complete(r)
    try:
        doc = json.loads(r.body)
    except ValueError:
        return f"{r.status} with a body that is not JSON: {r.body[:80]!r}"
    err = doc.get("error") if isinstance(doc, dict) else None
    if not (isinstance(err, dict) and isinstance(err.get("message"), str) and err["message"]):
        return f"{r.status} without error.message: {r.body[:120]!r}"
    if not isinstance(err.get("type"), str) or err.get("code") != r.status:
        return f"{r.status} with error.type {err.get('type')!r}, error.code {err.get('code')!r}"
    if r.status in (429, 503) and not r.headers.get("retry-after", "").isdigit():
        return f"{r.status} without a Retry-After"
    return ""


def complete(r: Reply) -> str:
    if r.error:
        return f"200 cut short: {r.error}"
    if "text/event-stream" in r.headers.get("content-type", ""):
        if any(isinstance(e, dict) and "error" in e for e in r.events):
            return f"an error event in a 200 stream: {next(e for e in r.events if 'error' in e)}"
        if r.hung_up:  # we left after the first token, on purpose
            return ""
        reasons = [c.get("finish_reason") for e in r.events for c in e.get("choices") or []]
        if not r.done or not any(reasons):
            return f"a stream without finish_reason or [DONE] ({len(r.events)} events)"
        return ""
    try:
        choice = json.loads(r.body)["choices"][0]
        if isinstance(choice["message"]["content"], str) and choice["finish_reason"]:
            return ""
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    return f"a 200 that is not a whole chat completion: {r.body[:120]!r}"


def scrape(server: Server, key: str) -> dict[str, float]:
    r = send(server.url, "/metrics", None, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    if r.status != 200:
        sys.exit(f"/metrics answered {r.status}: {r.body[:200]!r}")
    found = {}
    for line in r.body.decode().splitlines():
        m = re.match(r"^(llmcli:[a-z_]+(?:\{[^}]*\})?) ([0-9.eE+-]+)$", line)
        if m:
            found[m.group(1)] = float(m.group(2))
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--max-queue", type=int, default=8)
    ap.add_argument("--retries", type=int, default=10, help="attempts of a generation told 503")
    ap.add_argument(
        "--rate-limit", type=int, default=None, help="requests a minute a key (default: --retries + 1)"
    )
    ap.add_argument("--max-body", type=int, default=16384, help="bytes")
    ap.add_argument("-n", "--n-gen", type=int, default=16, help="max_tokens of the valid requests")
    ap.add_argument("--ctx", type=int, default=1024, help="KV cells per sequence")
    ap.add_argument("--timeout", type=float, default=120, help="seconds one attempt may take")
    ap.add_argument("--rss-limit", type=float, default=50, help="MB the server may grow by")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--model", default=None, help="a GGUF path (default: the embedded model)")
    args = ap.parse_args()

    model = args.model or embedded_model()
    jobs = plan(args.requests, args.seed)
    n_over = sum(kind == "over-rate" for _, kind in jobs)
    # Above any one request's attempts (each has its own key), below the over-rate requests' count
    # (they share one), so exactly those see 429, and at least one of them does.
    rate = args.rate_limit or args.retries + 1
    if n_over <= rate:
        sys.exit(f"{n_over} over-rate requests cannot pass --rate-limit {rate}; send more requests")
    admin = "sk-admin-" + secrets.token_hex(8)  # the warm-up (and /metrics, which is not counted)
    shared = "sk-shared-" + secrets.token_hex(8)
    keys = {i: ("sk-" + secrets.token_hex(8) if kind != "over-rate" else shared) for i, kind in jobs}
    fd, key_file = tempfile.mkstemp(prefix="serve-overload-keys-")
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join({shared, *keys.values()}) + "\n")
    extra = ("--max-queue", str(args.max_queue), "--rate-limit", str(rate), "--max-body", str(args.max_body))
    server = llmcli_server(
        model, args.parallel, args.threads, args.ctx, (*extra, "--api-key-file", key_file), admin
    )
    print(f"model    {model}")
    print(
        f"server   llmcli serve --parallel {args.parallel} --max-queue {args.max_queue} --rate-limit {rate} "
        f"--max-body {args.max_body} -t {args.threads}, {len(set(keys.values())) + 1} keys"
    )
    print(
        f"clients  {args.requests} requests ({n_over} of them on one key), {args.concurrency} at once, "
        f"up to {args.retries} attempts of a generation told 503, timeout {args.timeout:.0f} s\n",
        flush=True,
    )
    try:
        with server:
            warm = [
                send(server.url, ROUTE, chat_body(CHAT, args.n_gen), headers=server.headers())
                for _ in range(2)
            ]
            if any(w.status != 200 for w in warm):
                sys.exit(f"the warm-up failed: {[(w.status, w.body[:200]) for w in warm]}")
            rss_before = rss_mb(server.pid)
            t0 = time.perf_counter()
            pool = ThreadPoolExecutor(args.concurrency)
            futures = {pool.submit(run_one, server, kind, i, args, keys[i]): (kind, i) for i, kind in jobs}
            # Every attempt bounds itself (--timeout); this bound is for a client thread that does not.
            bound = args.timeout * args.retries + 60
            finished, _ = wait(futures, timeout=bound)
            pool.shutdown(wait=False, cancel_futures=True)
            wall = time.perf_counter() - t0
            # The engine publishes its gauges after each step: give the last release a moment.
            deadline = time.monotonic() + 15
            while True:
                metrics = scrape(server, admin)
                idle = all(
                    metrics.get(name, -1) == 0
                    for name in (
                        "llmcli:num_requests_running",
                        "llmcli:num_requests_waiting",
                        "llmcli:kv_cache_usage_perc",
                    )
                )
                if idle or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            time.sleep(1)
            rss_after = rss_mb(server.pid)
    finally:
        os.unlink(key_file)

    counts: dict[str, Counter] = {kind: Counter() for kind in MIX}
    seen: Counter = Counter()  # every answer's status, retried 503s included
    problems: list[str] = []
    for future, (kind, i) in futures.items():
        if future not in finished:
            counts[kind]["hung"] += 1
            problems.append(f"request {i} ({kind}) still running after {bound:.0f} s")
            continue
        replies = future.result()
        for n, reply in enumerate(replies):
            seen[reply.status] += 1
            what = problem(kind, reply, args.timeout)
            if what:
                counts[kind]["bad"] += 1
                problems.append(f"request {i} ({kind}), attempt {n + 1}: {what}")
        last = replies[-1]
        label = str(last.status) if last.status else "no answer"
        counts[kind]["200 hung up" if last.status == 200 and last.hung_up else label] += 1
        counts[kind]["503 retried"] += len(replies) - 1
    columns = ["200", "200 hung up", "400", "401", "413", "429", "503", "no answer", "hung"]
    columns += sorted({c for row in counts.values() for c in row} - {*columns, "503 retried", "bad"})
    columns += ["503 retried", "bad"]
    print(f"{len(finished)} of {len(jobs)} requests finished in {wall:.1f} s; the last answer of each:\n")
    print("| kind | requests | " + " | ".join(columns) + " |")
    print("| ---- | -------: | " + " | ".join("--:" for _ in columns) + " |")
    outcomes = set(columns) - {"503 retried", "bad"}
    for kind, row in counts.items():
        print(
            f"| {kind} | {sum(row[c] for c in outcomes)} | " + " | ".join(str(row[c]) for c in columns) + " |"
        )
    total: Counter = sum(counts.values(), Counter())
    print("| all | " + str(len(jobs)) + " | " + " | ".join(str(total[c]) for c in columns) + " |")

    refusals = {
        s: int(metrics.get(f'llmcli:http_refusals_total{{status="{s}"}}', 0))
        for s in (400, 401, 413, 429, 503)
    }
    print(
        f"\nserver-side refusals (http_refusals_total): {', '.join(f'{s}: {n}' for s, n in refusals.items())}"
    )
    same = all(seen[s] == n for s, n in refusals.items())
    print(f"the same as the clients were answered: {'yes' if same else 'no: ' + str(dict(seen))}")
    kept = metrics.get("llmcli:kv_cache_cached_perc", 0)
    print(f"KV cells kept as shared prefixes at the end: {kept:.1%} of the pool")
    growth = rss_after - rss_before
    aimed = ("400", "401", "413", "429", "200 hung up")
    checks = [
        (
            "every answer a complete 200 or a well-formed error its kind allows",
            f"{total['bad']} bad",
            not total["bad"],
        ),
        ("nothing hung (per-attempt timeout)", f"{total['hung']} hung", not total["hung"]),
        (
            "the mix drew every refusal it aims at (400, 401, 413, 429) and a hang-up mid-stream",
            ", ".join(f"{s}: {total[s]}" for s in aimed),
            all(total[s] for s in aimed),
        ),
        (
            f"RSS before vs after within {args.rss_limit:.0f} MB",
            f"{rss_before:.1f} -> {rss_after:.1f} MB ({growth:+.1f})",
            growth <= args.rss_limit,
        ),
        (
            "/metrics: llmcli:num_requests_running 0 (and nothing waiting)",
            f"{metrics.get('llmcli:num_requests_running')}, "
            f"waiting {metrics.get('llmcli:num_requests_waiting')}",
            metrics.get("llmcli:num_requests_running") == 0
            and metrics.get("llmcli:num_requests_waiting") == 0,
        ),
        (
            "/metrics: 0 KV cells in use (llmcli:kv_cache_usage_perc)",
            f"{metrics.get('llmcli:kv_cache_usage_perc')}",
            metrics.get("llmcli:kv_cache_usage_perc") == 0,
        ),
    ]
    print("\n| check | measured | verdict |\n| ----- | -------- | :-----: |")
    for what, measured, ok in checks:
        print(f"| {what} | {measured} | {'ok' if ok else 'FAILED'} |")
    for line in problems[:30]:
        print(f"  {line}")
    if len(problems) > 30:
        print(f"  ... and {len(problems) - 30} more")
    sys.exit(0 if all(ok for _, _, ok in checks) else 1)


if __name__ == "__main__":
    main()
