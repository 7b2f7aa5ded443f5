"""Seeded slow, broken and half-closed connections against `llmcli serve`: it keeps serving.

Each case opens a connection to the deadline server (tests/serve/conftest.py: --header-timeout 2,
--timeout 5) and does one hostile thing: a head trickled in and never finished (or finished in
time), a head of garbage, a body trickled in (chunked or under a Content-Length) and never
finished, a socket shut for writing half-way, a connection that sends nothing. A round's cases run
at once, fewer than --max-connections. An answer must be a 200 to a whole request or a well-formed
4xx in the route's shape (OpenAI's object, Ollama's string; OpenAI's for a head that is not HTTP);
the server may close a connection unanswered only where that is the case's fate (a head never
finished, a half-closed socket). Afterwards /health answers, no request runs and no connection is
left open but the one asking. The run checks it reached a 200, a 400, a 408 and a close.

12 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 120 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.serve.raw import HANG_GUARD_S, chunk, connect, exchange, head
from tests.serve.server import AUTH, KEY, MAX_BODY, MAX_CONNECTIONS

CASES = cases(default=12, long=120)  # per seed
AT_ONCE = 12  # connections a round holds; the server's cap is MAX_CONNECTIONS
FIXED_SEED = 20261204
POSTS = ["/v1/chat/completions", "/v1/completions", "/api/chat", "/api/generate", "/api/show"]
GETS = ["/health", "/v1/models", "/api/tags", "/api/version", "/"]
KINDS = ["slow-head", "idle", "head-in-time", "garbage", "trickled-body", "half-closed"]
# The first cases of every seed, in their plain form: each outcome the run must reach.
FIRST = ["trickled-body", "garbage", "slow-head", "head-in-time"]


@dataclass
class Case:
    kind: str
    path: str
    pieces: list[bytes] | itertools.chain
    every: float
    half_close: bool
    fates: tuple[str, ...]  # the outcomes allowed: a status, or "closed" (no answer)
    openai_shape: bool  # a 4xx in OpenAI's shape (else Ollama's)


def split(rng: random.Random, data: bytes, parts: int) -> list[bytes]:
    cuts = sorted(rng.sample(range(1, len(data)), parts - 1))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def keyed(rng: random.Random, plain: bool) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEY}"} if plain or rng.random() < 0.8 else {}


def make_case(rng: random.Random, kind: str, plain: bool) -> Case:
    post, get = rng.choice(POSTS), rng.choice(GETS)
    every = rng.uniform(0.2, 0.6)
    if kind == "slow-head":  # never finished, a byte at a time
        start = head("POST", post, keyed(rng, plain))[: -2 - rng.randrange(3)]
        return Case(
            kind, post, itertools.chain([start], itertools.repeat(b"a")), every, False, ("closed",), True
        )
    if kind == "idle":
        return Case(kind, get, [], 0.0, False, ("closed",), True)
    if kind == "head-in-time":  # a few pieces, well within --header-timeout
        headers = keyed(rng, plain)
        data = head("GET", get, headers)
        fates = ("200",) if headers or get in ("/", "/health") else ("401",)
        return Case(kind, get, split(rng, data, rng.randint(2, 5)), 0.1, False, fates, not is_ollama(get))
    if kind == "garbage":
        variant = "bytes" if plain else rng.choice(["bytes", "header-line", "version", "huge"])
        data = {
            "bytes": bytes(rng.choice(b"\x00\x16\x03\x01 abcXYZ/%\xff") for _ in range(rng.randint(1, 200))),
            "header-line": b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here",
            "version": b"GET /health HTTP/1.1 extra",
            "huge": b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 20_000,
        }[variant] + b"\r\n\r\n"
        fates = ("400", "closed") if variant == "huge" else ("400",)  # a reset may beat the 400 there
        return Case(kind, "/", [data], 0.0, False, fates, True)
    if kind == "trickled-body":  # never finished: 408 at --timeout
        headers = {**keyed(rng, plain), "Content-Type": "application/json"}
        if plain or rng.random() < 0.5:
            headers["Transfer-Encoding"] = "chunked"
            body = itertools.chain([chunk(b'{"model": "m", ')], itertools.repeat(chunk(b" ")))
        else:
            size = MAX_BODY + 1 if not plain and rng.random() < 0.2 else rng.randint(100, MAX_BODY)
            headers["Content-Length"] = str(size)
            body = itertools.chain([b'{"model": "m", '], itertools.repeat(b" "))
        fates = (
            ("401",)
            if "Authorization" not in headers
            else ("413",)
            if int(headers.get("Content-Length", 0)) > MAX_BODY
            else ("408",)
        )
        pieces = itertools.chain([head("POST", post, headers)], body)
        return Case(kind, post, pieces, every, False, fates, not is_ollama(post))
    # half-closed: shut for writing within the head, within the body, or after a whole GET
    where = rng.choice(["head", "body", "whole"])
    if where == "head":
        data = head("POST", post, keyed(rng, plain))
        return Case(kind, post, [data[: rng.randrange(1, len(data) - 2)]], 0.0, True, ("closed",), True)
    if where == "body":
        headers = {"Authorization": f"Bearer {KEY}", "Content-Length": "200"}
        return Case(kind, post, [head("POST", post, headers), b'{"mod'], 0.1, True, ("closed",), True)
    data = head("GET", get, {"Authorization": f"Bearer {KEY}"})
    return Case(kind, get, [data], 0.0, True, ("200", "closed"), not is_ollama(get))


def is_ollama(path: str) -> bool:
    return path.startswith("/api/")


def run_case(url: str, case: Case, where: str) -> str:
    with connect(url) as sock:
        answer = exchange(sock, case.pieces, case.every, case.half_close)
    fate = "closed" if answer is None else str(answer.status)
    where += f" {case.kind} {case.path}: {fate}" + (f" {answer.body[:200]!r}" if answer else "")
    assert fate in case.fates, where
    if answer is not None and answer.status >= 400:
        error = json.loads(answer.body)["error"]
        if case.openai_shape:
            assert isinstance(error, dict) and error["code"] == answer.status and error["message"], where
        else:
            assert isinstance(error, str) and error, where
    return fate


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_slow_and_broken_connections_get_a_well_formed_answer_or_are_closed(deadline_server, seed):
    assert AT_ONCE < MAX_CONNECTIONS - 2  # no case is closed to make room for another
    rng = random.Random(seed)
    chosen = [
        make_case(rng, FIRST[i], plain=True) if i < len(FIRST) else make_case(rng, rng.choice(KINDS), False)
        for i in range(CASES)
    ]
    with ThreadPoolExecutor(AT_ONCE) as pool:
        futures = [
            pool.submit(run_case, deadline_server.url, c, f"seed {seed} case {i}:")
            for i, c in enumerate(chosen)
        ]
        counts = Counter(future.result() for future in futures)
    assert_reached(counts, "200", "400", "408", "closed", seed=seed)
    assert httpx.get(deadline_server.url + "/health").status_code == 200
    assert deadline_server.running_after(AUTH) == 0
    end = time.monotonic() + HANG_GUARD_S  # the server notices the last closes within a moment
    while (left := deadline_server.metric("llmcli:http_connections", AUTH)) > 1 and time.monotonic() < end:
        time.sleep(0.1)
    assert left == 1, f"seed {seed}: {left:g} connections still open (1: the one asking)"
