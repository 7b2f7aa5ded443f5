"""The serving benchmark's statistics, against numpy's (which vLLM's benchmark uses)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmcli.bench.serve import random_prompt
from llmcli.bench.serve_stats import RequestResult, ServeRow, Slo, inter_token_latencies, percentile
from tests.support.cli import cli

LEVEL = {"backend": "b", "model": "m", "test": "c2", "max_concurrency": 2, "n_prompt": 16, "n_gen": 32}


@pytest.mark.parametrize("n", [1, 2, 5, 17, 100])
def test_percentiles_match_numpy(n):
    values = [random.Random(i).uniform(1, 500) for i in range(n)]
    for p in (50, 90, 99):
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_row_from_results_follows_vllms_definitions():
    results = [
        RequestResult(
            True, ttft_ms=100, latency_ms=1100, output_tokens=11, prompt_tokens=20, usage_reported=True
        ),
        RequestResult(
            True, ttft_ms=300, latency_ms=2300, output_tokens=21, prompt_tokens=30, usage_reported=True
        ),
        RequestResult(False, error="boom"),
    ]
    row = ServeRow.from_results(
        results, 4.0, backend="http://h/v1", model="m", test="c2", max_concurrency=2, n_prompt=16, n_gen=32
    )
    assert (row.num_requests, row.completed, row.failed, row.first_error) == (3, 2, 1, "boom")
    assert row.request_throughput == 0.5 and row.output_throughput == 32 / 4
    assert row.total_input_tokens == 50 and row.total_token_throughput == 82 / 4
    assert row.mean_tpot_ms == pytest.approx(100.0)  # (1100-100)/10 and (2300-300)/20
    assert row.decode_tps == pytest.approx(10.0)
    assert row.mean_ttft_ms == 200 and row.std_ttft_ms == pytest.approx(float(np.std([100, 300])))
    assert row.p50_e2el_ms == pytest.approx(1700.0)


def test_without_usage_input_tokens_are_unknown_not_zero():
    row = ServeRow.from_results(
        [RequestResult(True, ttft_ms=1, latency_ms=2, output_tokens=3)],
        1.0,
        backend="b",
        model="m",
        test="c1",
        max_concurrency=1,
        n_prompt=1,
        n_gen=3,
    )
    assert row.total_input_tokens is None and row.total_token_throughput is None and not row.usage_reported


def test_prompts_are_reproducible_and_differ_between_requests_and_levels():
    assert random_prompt(1, 4, 0, 50) == random_prompt(1, 4, 0, 50)
    assert len({random_prompt(1, 4, i, 50) for i in range(20)} | {random_prompt(1, 1, 0, 50)}) == 21
    assert len(random_prompt(1, 1, 0, 50).split()) == 50 + len(
        "Write a short story that uses these words:".split()
    )


def test_serve_rows_render_in_every_format_and_chart():
    from llmcli.bench import report

    rows = [
        ServeRow.from_results(
            [RequestResult(True, ttft_ms=10 * c, latency_ms=100 * c, output_tokens=9)],
            1.0 * c,
            backend="http://h/v1",
            model="m",
            test=f"c{c}",
            max_concurrency=c,
            n_prompt=8,
            n_gen=9,
        )
        for c in (1, 4)
    ]
    md = report.render(rows, "md")
    assert md.splitlines()[0].startswith("| model") and "| c4 |" in md.replace("  ", " ").replace("  ", " ")
    assert report.render(rows, "jsonl").count("\n") == 2
    assert report.render(rows, "csv").splitlines()[0].startswith("backend,model,test,max_concurrency")
    chart = report.bar_chart(rows)
    assert chart.startswith("output tokens/s by concurrency") and "m c1" in chart and "m c4" in chart


def test_itl_is_the_gaps_between_text_chunks_in_ms():
    assert inter_token_latencies([10.0, 10.25, 10.5, 11.5]) == pytest.approx([250.0, 250.0, 1000.0])
    assert inter_token_latencies([3.0]) == [] and inter_token_latencies([]) == []


def test_a_levels_itl_pools_the_gaps_of_every_completed_request():
    gaps = ([10.0, 20.0], [30.0, 40.0, 50.0, 60.0], [1000.0])  # the failed request's gap is left out
    results = [
        RequestResult(True, ttft_ms=5, latency_ms=40, output_tokens=3, itl_ms=list(gaps[0])),
        RequestResult(True, ttft_ms=5, latency_ms=190, output_tokens=5, itl_ms=list(gaps[1])),
        RequestResult(False, error="boom", itl_ms=list(gaps[2])),
    ]
    row = ServeRow.from_results(results, 1.0, **LEVEL)
    pooled = gaps[0] + gaps[1]
    assert row.mean_itl_ms == pytest.approx(float(np.mean(pooled)))  # 35, not the mean of means
    assert row.std_itl_ms == pytest.approx(float(np.std(pooled)))
    assert row.samples_itl_ms == pooled  # what the statistics are over, in the row
    for p in (50, 90, 99):
        assert getattr(row, f"p{p}_itl_ms") == pytest.approx(float(np.percentile(pooled, p)))
    assert row.to_dict()["p99_itl_ms"] == row.p99_itl_ms
    assert row.request_goodput is None and row.good_requests is None  # no SLO given


def test_goodput_counts_the_requests_that_meet_every_slo_given():
    results = [
        RequestResult(True, ttft_ms=100, latency_ms=1000, output_tokens=10),  # TPOT 100: good
        RequestResult(True, ttft_ms=400, latency_ms=1300, output_tokens=10),  # TTFT 400 > 300: bad
        RequestResult(True, ttft_ms=100, latency_ms=2800, output_tokens=10),  # TPOT 300 > 200: bad
        RequestResult(True, ttft_ms=300, latency_ms=300, output_tokens=1),  # no TPOT: counts as 0, good
        RequestResult(False, error="boom"),  # failed: never good
    ]
    row = ServeRow.from_results(results, 2.0, Slo(ttft_ms=300, tpot_ms=200), **LEVEL)
    assert (row.good_requests, row.request_goodput, row.completed) == (2, 1.0, 4)
    assert (row.slo_ttft_ms, row.slo_tpot_ms, row.slo_e2el_ms) == (300, 200, None)
    # A limit is met when equal, as vLLM compares (slo >= value); the E2EL SLO alone
    assert ServeRow.from_results(results, 2.0, Slo(e2el_ms=1300), **LEVEL).good_requests == 3


def test_goodput_shows_in_the_table_only_when_an_slo_was_given():
    from llmcli.bench import report

    results = [RequestResult(True, ttft_ms=10, latency_ms=100, output_tokens=9, itl_ms=[11.0, 12.0])]
    plain = report.render([ServeRow.from_results(results, 1.0, **LEVEL)], "md")
    assert "ITL ms p50/p90/p99" in plain and "goodput" not in plain
    with_slo = report.render([ServeRow.from_results(results, 1.0, Slo(ttft_ms=5), **LEVEL)], "md")
    assert "goodput req/s" in with_slo.splitlines()[0] and "0.00 (0/1)" in with_slo


BAD_SLOS = {
    "zero": (["--slo-ttft", "0"], "--slo-ttft 0: give a number of milliseconds above 0"),
    "negative": (["--slo-tpot", "-5"], "--slo-tpot -5: give a number of milliseconds above 0"),
    "nan": (["--slo-e2el", "nan"], "--slo-e2el nan: give a number of milliseconds above 0"),
    "infinite": (["--slo-ttft", "inf"], "--slo-ttft inf: give a number of milliseconds above 0"),
}


@pytest.mark.parametrize("args,message", BAD_SLOS.values(), ids=BAD_SLOS.keys())
def test_a_bad_slo_is_one_line_and_exit_2(args, message):
    # refused before any request: the address is a closed port
    r = cli("bench", "--endpoint", "http://127.0.0.1:9/v1", *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr


def test_a_slo_that_is_not_a_number_is_refused():
    r = cli("bench", "--endpoint", "http://127.0.0.1:9/v1", "--slo-ttft", "fast")
    assert r.exit_code == 2 and "--slo-ttft" in r.stderr and r.stdout == ""


SLOS_WITHOUT_ENDPOINT = {
    "one": (["--slo-ttft", "500"], "--slo-ttft is for a serving benchmark: give --endpoint URL"),
    "two": (
        ["--slo-tpot", "50", "--slo-e2el", "9000"],
        "--slo-tpot and --slo-e2el are for a serving benchmark: give --endpoint URL",
    ),
    "even a bad one": (["--slo-ttft", "0"], "--slo-ttft is for a serving benchmark"),
    "with --parallel": (["--parallel", "2", "--slo-e2el", "9000"], "--slo-e2el cannot go with --parallel"),
}


@pytest.mark.parametrize("args,message", SLOS_WITHOUT_ENDPOINT.values(), ids=SLOS_WITHOUT_ENDPOINT.keys())
def test_slos_without_an_endpoint_are_refused_before_any_model_loads(args, message):
    r = cli("bench", "-p", "16", "--n-gen", "4", *args)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr
