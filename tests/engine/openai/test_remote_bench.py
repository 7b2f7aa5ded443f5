"""`llmcli bench --endpoint`: the serving benchmark, on the real server and on the fake one."""

from __future__ import annotations

import csv
import io
import json
import time

import pytest

# Loaded now, not when the llmcli serve test first runs bench: it must ask before the model is loaded.
import llmcli.bench.serve
import llmcli.cli
import llmcli.usecases.bench  # noqa: F401
from tests.engine.openai.conftest import ALIAS, API_KEY, no_key_anywhere
from tests.engine.openai.fake_server import LOADING_S
from tests.serve.server import ServeProcess
from tests.support.cli import cli

SMALL = ["-p", "16", "--n-gen", "8", "--num-requests", "4"]


def test_concurrency_1_and_4_on_a_real_server(llama_server):
    result = cli(
        "bench",
        "--endpoint",
        llama_server,
        *SMALL,
        "--concurrency",
        "1,4",
        "--json",
        vars={"LLMCLI_API_KEY": API_KEY},
    )
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [r["max_concurrency"] for r in rows] == [1, 4] and [r["test"] for r in rows] == ["c1", "c4"]
    for r in rows:
        assert r["backend"] == llama_server and r["model"] == ALIAS
        assert r["completed"] == 4 and r["failed"] == 0 and r["first_error"] == ""
        assert r["request_throughput"] > 0 and r["output_throughput"] > 0 and r["total_output_tokens"] > 0
        assert 0 < r["p50_ttft_ms"] <= r["p90_ttft_ms"] <= r["p99_ttft_ms"] <= r["p99_e2el_ms"]
        assert r["p50_e2el_ms"] <= r["p90_e2el_ms"] <= r["p99_e2el_ms"]
        assert len(r["samples_ttft_ms"]) == 4
        assert r["usage_reported"] is False and r["total_input_tokens"] is None  # this server sends no usage
    # How TTFT grows with the queue is a measurement (benchmarks/), not a test.
    assert "requests" in result.stderr and no_key_anywhere(result.stdout, result.stderr)


def test_markdown_and_csv_on_the_fake_server(fake_server):
    url = fake_server.endpoint()
    md = cli("bench", "--endpoint", url, *SMALL, "--concurrency", "2", "--no-chart")
    assert md.exit_code == 0, md.stderr
    head = md.stdout.splitlines()[0]
    for title in (
        "backend",
        "req/s",
        "out tok/s",
        "decode t/s",
        "TTFT ms p50/p90/p99",
        "ITL ms p50/p90/p99",
        "latency ms p50/p90/p99",
    ):
        assert title in head
    assert "goodput" not in head  # no SLO given
    assert url in md.stdout and "c2" in md.stdout
    rows = list(csv.DictReader(io.StringIO(cli("bench", "--endpoint", url, *SMALL, "--csv").stdout)))
    assert rows[0]["backend"] == url and rows[0]["completed"] == "4"
    # the fake server reports usage: input tokens are the server's count, output too
    assert rows[0]["usage_reported"] == "True" and rows[0]["total_input_tokens"] == "168"


def test_itl_and_goodput_on_the_fake_server(fake_server):
    url = fake_server.endpoint()
    # A TPOT SLO no stream meets (0.001 ms a token) and a TTFT one every request meets (a minute)
    strict = cli("bench", "--endpoint", url, *SMALL, "--json", "--slo-ttft", "60000", "--slo-tpot", "0.001")
    assert strict.exit_code == 0, strict.stderr
    (row,) = json.loads(strict.stdout)
    assert row["completed"] == 4 and row["good_requests"] == 0 and row["request_goodput"] == 0.0
    # 8 text chunks a reply, 2 ms apart (20 ms around the one split inside a character): 7 gaps each.
    # The sleeps bound the gaps from below only; a loaded machine stretches every gap, so the test
    # compares none of them with an upper bound.
    assert row["mean_itl_ms"] > 0 and 0 < row["p50_itl_ms"] <= row["p90_itl_ms"] <= row["p99_itl_ms"]
    assert row["p99_itl_ms"] >= row["mean_itl_ms"]
    md = cli("bench", "--endpoint", url, *SMALL, "--slo-e2el", "60000", "--no-chart")
    assert md.exit_code == 0, md.stderr
    assert "goodput req/s" in md.stdout.splitlines()[0] and "(4/4)" in md.stdout


HANG_GUARD_S = 60  # a hang guard, not a speed test: the run takes a few seconds


def test_a_level_is_bounded_by_its_duration(fake_server):
    start = time.monotonic()
    result = cli(
        "bench",
        "--endpoint",
        fake_server.endpoint("slow"),
        "--n-gen",
        "4",
        "--num-requests",
        "100000",
        "--duration",
        "1",
        "--concurrency",
        "2",
        "--json",
    )
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)[0]
    # The level stopped starting requests at 1 s (100,000 were asked for); in-flight ones finished.
    assert 0 < row["completed"] < 100 and row["duration"] >= 1
    assert elapsed < HANG_GUARD_S


def test_failures_inside_a_level_are_counted_not_fatal(fake_server):
    fake_server.posts = 0
    url = fake_server.endpoint("flaky")  # every other request fails with 500, the warm-up works
    result = cli("bench", "--endpoint", url, "--n-gen", "4", "--num-requests", "6", "--json")
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)[0]
    assert row["num_requests"] == 6 and row["failed"] == 3 and row["completed"] == 3
    assert "the engine is on fire" in row["first_error"]
    assert len(row["samples_e2el_ms"]) == 3  # statistics over the completed requests only
    fake_server.posts = 0
    md = cli("bench", "--endpoint", url, "--n-gen", "4", "--num-requests", "4", "--no-chart")
    assert "(2 failed)" in md.stdout


def test_model_arguments_pick_among_the_servers(fake_server):
    result = cli("bench", "--endpoint", fake_server.endpoint("two"), "other-model", *SMALL, "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)[0]["model"] == "other-model"
    unpicked = cli("bench", "--endpoint", fake_server.endpoint("two"), *SMALL)
    assert unpicked.exit_code == 2 and "pick one with -m MODEL" in unpicked.stderr


def test_bench_refuses_local_only_options_and_bad_lists(fake_server):
    url = fake_server.endpoint()
    for args, message in (
        (["-t", "2"], "-t set the local engine"),
        (["--chat"], "--chat set the local engine"),
        (["--concurrency", "0"], "bad --concurrency list"),
        (["--concurrency", "1,x"], "bad --concurrency list"),
        (["-p", "16,32"], "give one -p"),
        (["--num-requests", "0"], "--num-requests 0"),
        (["--duration", "0"], "--duration 0"),
        (["--slo-ttft", "-1"], "--slo-ttft -1: give a number of milliseconds above 0"),
    ):
        result = cli("bench", "--endpoint", url, *args)
        assert result.exit_code == 2 and message in result.stderr, (args, result.stderr)


def test_a_server_still_loading_is_waited_for_and_the_wait_is_not_counted(fake_server):
    fake_server.loading_since.pop("loading", None)
    refused = fake_server.unavailable
    start = time.monotonic()
    result = cli("bench", "--endpoint", fake_server.endpoint("loading"), *SMALL, "--json")
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["num_requests"], row["completed"], row["failed"]) == (4, 4, 0)
    # 503s with "Retry-After: 1" for 1.5 s (the model list, as llama-server answers while loading):
    # two of them, a second apart, then the run; a client that ignored Retry-After would ask more often
    assert 1 <= fake_server.unavailable - refused <= 3
    assert elapsed >= LOADING_S  # it waited (a lower bound: no speed in tests)
    assert "is still loading its model; waiting up to 60 s (1 x 503)" in result.stderr


def test_a_server_that_never_gets_ready_fails_after_wait_with_one_line(fake_server):
    url = fake_server.endpoint("neverready")
    start = time.monotonic()
    result = cli("bench", "--endpoint", url, *SMALL, "--wait", "1.5")
    assert time.monotonic() - start < HANG_GUARD_S
    assert result.exit_code == 1 and result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("llmcli:")]
    assert errors == [result.stderr.splitlines()[-1]], result.stderr  # one line, after the progress
    assert errors[0].startswith(f"llmcli: error: the server at {url} was not ready after 1.5 s ")
    assert "503" in errors[0] and "Loading model" in errors[0]
    assert errors[0].endswith("or wait longer with --wait SECONDS")


PAST_MAX_TOKENS = {
    "usage says more": ("overcount", "9 completion tokens"),  # 4 pieces of text, usage 4 + 5
    "text goes on": ("runon", "its stream was cut off here"),  # 10 pieces for max_tokens 4
}


@pytest.mark.parametrize("scenario,why", PAST_MAX_TOKENS.values(), ids=PAST_MAX_TOKENS.keys())
def test_a_reply_past_max_tokens_is_a_failed_request(fake_server, scenario, why):
    url = fake_server.endpoint(scenario)
    result = cli("bench", "--endpoint", url, "--n-gen", "4", "--num-requests", "3", "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert (row["num_requests"], row["completed"], row["failed"]) == (3, 0, 3)
    reason = f"the server at {url} went past max_tokens 4: {why}"
    assert row["first_error"] == reason and row["total_output_tokens"] == 0
    assert f"llmcli: 3 requests failed; the first: {reason}\n" in result.stderr


def test_llmcli_serve_loading_its_model_is_waited_for(tmp_path, embedded_path):
    """The real server's 503 + Retry-After while it loads: bench starts at once, in this process (the
    modules it runs are loaded above), so its warm-up comes while the model is still loading."""
    serve = ServeProcess(tmp_path, wait=False)
    try:
        result = cli("bench", "--endpoint", serve.url, *SMALL, "--concurrency", "2", "--json")
        assert result.exit_code == 0, result.stderr
        (row,) = json.loads(result.stdout)
        assert (row["num_requests"], row["completed"], row["failed"]) == (4, 4, 0)
        assert row["usage_reported"] is True and 0 < row["total_output_tokens"] <= 4 * 8
        assert serve.metric('llmcli:http_refusals_total{status="503"}') >= 1  # it did answer 503
        assert "is still loading its model" in result.stderr
    finally:
        assert serve.stop() == 0
