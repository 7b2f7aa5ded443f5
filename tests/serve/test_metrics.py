"""/metrics: every family docs/serve.md lists is served, and each moves by what a request did.

On the shared server (tests/serve/conftest.py: --parallel 2, CTX cells). Each test drives requests and
reads the families before and after; the values are checked against the replies' own usage and
timings, or against what the scheduler must hold (cells, sequences), never against a time.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.serve.server import AUTH, CTX, HANG_GUARD_S, MAX_BODY

DOCS = Path(__file__).resolve().parents[2] / "docs" / "serve.md"
P = "llmcli:"
# Counts a small model goes on with for its whole budget: a sequence that stays taken.
COUNTS = ("1, 2, 3, 4, 5, 6, 7, 8,", "10, 11, 12, 13, 14, 15,")
HOLD_TOKENS = 400  # two of them and a short request fit the CTX cells (each reserves its budget)
DAYS = "Monday, Tuesday, Wednesday,"  # shares no prefix with COUNTS


def complete(server, prompt: str, max_tokens: int) -> dict:
    r = httpx.post(
        server.url + "/v1/completions",
        json={"prompt": prompt, "max_tokens": max_tokens},
        headers=AUTH,
        timeout=HANG_GUARD_S,
    )
    assert r.status_code == 200, r.text
    return r.json()


def values(server, *names: str) -> dict[str, float]:
    return {name: server.metric(P + name, AUTH, absent=0) for name in names}


def documented_families() -> dict[str, str]:
    """name -> type, from the table under `## /metrics` in docs/serve.md (a row may name two)."""
    section = DOCS.read_text().split("## `/metrics`", 1)[1].split("\n## ", 1)[0]
    found = {}
    for row in section.splitlines():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`llmcli:"):
            for name in re.findall(r"`(llmcli:[a-z_]+)", cells[0]):
                found[name] = cells[1]
    return found


def test_the_families_served_are_the_ones_documented_with_their_types(server):
    text = httpx.get(server.url + "/metrics", headers=AUTH, timeout=10).text
    served = dict(re.findall(r"^# TYPE (llmcli:\S+) (\S+)$", text, re.MULTILINE))
    # prometheus-client adds a `_created` gauge (a start time) beside each counter and histogram.
    families = {name: kind for name, kind in served.items() if not name.endswith("_created")}
    documented = documented_families()
    assert len(documented) >= 11 and families == documented  # >= 11: the table was found and read


def test_a_finished_request_counts_its_tokens_and_its_finish_reason(server):
    names = ("prompt_tokens_total", "generation_tokens_total", 'requests_total{finished_reason="length"}')
    before = values(server, *names)
    reply = complete(server, COUNTS[0], 5)
    after = values(server, *names)
    usage = reply["usage"]
    assert reply["choices"][0]["finish_reason"] == "length" and usage["completion_tokens"] == 5
    assert after[names[0]] - before[names[0]] == usage["prompt_tokens"]
    assert after[names[1]] - before[names[1]] == 5
    assert after[names[2]] - before[names[2]] == 1


def test_latency_histograms_count_each_token_and_sum_the_replys_own_timings(server):
    families = ("time_to_first_token_seconds", "inter_token_latency_seconds", "request_queue_time_seconds")
    names = [f"{family}_{part}" for family in families for part in ("count", "sum")]
    before = values(server, *names)
    sent = time.perf_counter()
    reply = complete(server, COUNTS[1], 5)
    took = time.perf_counter() - sent
    grew = {name: value - before[name] for name, value in values(server, *names).items()}
    n, timings = reply["usage"]["completion_tokens"], reply["timings"]
    assert n >= 2
    assert grew["time_to_first_token_seconds_count"] == 1
    assert grew["time_to_first_token_seconds_sum"] == pytest.approx(timings["ttft_ms"] / 1000, abs=1e-6)
    assert grew["request_queue_time_seconds_count"] == 1
    assert grew["request_queue_time_seconds_sum"] == pytest.approx(timings["queue_ms"] / 1000, abs=1e-6)
    assert grew["inter_token_latency_seconds_count"] == n - 1  # a gap between each two tokens
    assert 0 < grew["inter_token_latency_seconds_sum"] < took  # the gaps are within the request's time


@pytest.mark.parametrize(
    "status,path,body",
    [
        (400, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}),
        (401, "/v1/models", None),
        (413, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * MAX_BODY}]}),
    ],
)
def test_a_refusal_is_counted_under_its_status_alone(server, status, path, body):
    # 429, 503 and 504 need a server's limits: tests/serve/test_limits.py counts them there.
    series = [f'http_refusals_total{{status="{code}"}}' for code in (400, 401, 413, 429, 503, 504)]
    before = values(server, *series)
    headers = {} if status == 401 else AUTH
    r = httpx.post(server.url + path, json=body, headers=headers, timeout=HANG_GUARD_S)
    assert r.status_code == status, r.text
    grew = {name: value - before[name] for name, value in values(server, *series).items()}
    assert grew == {name: float(name.endswith(f'"{status}"}}')) for name in series}


def test_a_request_past_the_sequences_waits_and_the_gauges_show_it(server):
    """Two streams hold both sequences; a third request waits for one. The gauges count them, the
    cells they hold, the wait, and the prefix the third leaves behind."""
    assert server.running_after(AUTH) == 0
    prompt_tokens = [complete(server, count, 1)["usage"]["prompt_tokens"] for count in COUNTS]
    ttft = P + "time_to_first_token_seconds_count"
    first_tokens = server.metric(ttft, AUTH)
    with ThreadPoolExecutor(1) as pool, ExitStack() as held:
        streams = []  # kept: a dropped iterator closes its response, and the server cancels
        for count in COUNTS:
            body = {"prompt": count, "max_tokens": HOLD_TOKENS, "stream": True}
            response = held.enter_context(
                httpx.stream("POST", server.url + "/v1/completions", json=body, headers=AUTH, timeout=60)
            )
            streams.append(response.iter_lines())
            assert next(line for line in streams[-1] if line.startswith("data: "))
        # Both have their first token (and so their queue time) counted.
        assert server.metric_when(ttft, lambda n: n >= first_tokens + 2, AUTH) == first_tokens + 2
        assert server.metric(P + "num_requests_running", AUTH) == 2
        cells = server.metric(P + "kv_cache_usage_perc", AUTH) * CTX
        assert cells == pytest.approx(round(cells), abs=1e-6)  # a share of whole cells
        assert sum(prompt_tokens) <= round(cells) <= sum(prompt_tokens) + 2 * HOLD_TOKENS
        queued_before = values(server, "request_queue_time_seconds_count", "request_queue_time_seconds_sum")

        third = pool.submit(complete, server, DAYS, 3)
        waiting = server.metric_when(P + "num_requests_waiting", lambda n: n == 1, AUTH)
        assert waiting == 1 and server.metric(P + "num_requests_running", AUTH) == 2
        held.close()  # both streams end: the server cancels them and admits the third
        reply = third.result(timeout=HANG_GUARD_S)

    assert server.metric(P + "num_requests_waiting", AUTH) == 0
    assert server.running_after(AUTH) == 0 and server.metric(P + "kv_cache_usage_perc", AUTH) == 0
    queue_ms = reply["timings"]["queue_ms"]
    queued = values(server, "request_queue_time_seconds_count", "request_queue_time_seconds_sum")
    assert queued["request_queue_time_seconds_count"] - queued_before["request_queue_time_seconds_count"] == 1
    grew = queued["request_queue_time_seconds_sum"] - queued_before["request_queue_time_seconds_sum"]
    assert grew == pytest.approx(queue_ms / 1000, abs=1e-6)
    # The cancelled streams kept nothing; the third keeps its prompt and reply as a prefix (all but
    # the last token, which is sampled and never decoded).
    usage = reply["usage"]
    assert reply["choices"][0]["finish_reason"] == "length"
    kept = usage["prompt_tokens"] + usage["completion_tokens"] - 1
    assert server.metric(P + "kv_cache_cached_perc", AUTH) * CTX == pytest.approx(kept, abs=1e-6)
