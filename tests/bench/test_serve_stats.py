"""The serving benchmark's statistics, against numpy's (which vLLM's benchmark uses)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from llmcli.bench.serve import RequestResult, ServeRow, percentile, random_prompt


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
