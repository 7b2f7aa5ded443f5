"""The renderers and statistics on hand-made rows: no model needed."""

from __future__ import annotations

import json

from llmcli.bench import report
from llmcli.bench.records import BenchRow, BenchTest, stdev


def row(test: str, avg_ts: float, backend: str = "llama.cpp", threads: int = 2, model: str = "m") -> BenchRow:
    return BenchRow(
        model_filename="/m.gguf",
        model_type="llama 135M Q4_1",
        model_size=96_576_768,
        model_n_params=134_515_008,
        n_batch=512,
        n_ubatch=512,
        n_threads=threads,
        flash_attn=-1,
        type_k="f16",
        type_v="f16",
        n_prompt=512 if test.startswith("pp") else 0,
        n_gen=128 if test.startswith("tg") else 0,
        avg_ts=avg_ts,
        stddev_ts=1.5,
        test=test,
        backend=backend,
        model=model,
        n_ctx=640,
        kv_cache_bytes=14_745_600,
        peak_rss_bytes=200 << 20,
    )


def test_measured_row_follows_llama_bench_statistics():
    r = BenchRow.measured(
        [1_000_000_000, 2_000_000_000],
        128,
        **{
            k: v
            for k, v in row("tg128", 0).to_dict().items()
            if k
            not in {"avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "samples_ns", "samples_ts", "test_time"}
        },
    )
    assert r.samples_ts == [128.0, 64.0]
    assert r.avg_ts == 96.0 and r.avg_ns == 1_500_000_000
    assert abs(r.stddev_ts - stdev([128.0, 64.0])) < 1e-12 and abs(r.stddev_ts - 45.254834) < 1e-6
    assert r.test_time.endswith("Z")


def test_stdev_counts_degrees_of_freedom_like_numpy():
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    assert stdev(values, ddof=0) == 2.0  # population: numpy.std's default, vLLM's std_*_ms
    assert abs(stdev(values) - 2.138089935) < 1e-9  # sample: llama-bench's stddev
    assert stdev([3.0]) == 0.0 and stdev([], ddof=0) == 0.0


def test_markdown_looks_like_llama_bench():
    text = report.to_markdown([row("pp512", 1234.5), row("tg128", 150.25)])
    lines = text.splitlines()
    assert lines[0].startswith("| model ") and "|   t/s |" not in lines[0]
    assert lines[1].replace(" ", "").startswith("|-----")  # left-aligned text column
    assert "---: |" in lines[1]  # right-aligned numbers
    assert "| 1234.50 ± 1.50 |" in lines[2] and "96.6 MB" in lines[2] and "   135M |" in lines[2]
    assert "14.7 MB @ 640" in lines[2] and "209.7 MB" in lines[2]  # the sizes `llmcli list` shows
    assert len({len(line) for line in lines}) == 1  # columns line up
    assert "speedup" not in lines[0]  # only when a transformers twin exists


def test_speedup_column_and_csv_and_json():
    from llmcli.bench.runner import pair_speedups

    rows = [row("tg128", 150.0), row("tg128", 25.0, backend="transformers"), row("tg128", 140.0, threads=1)]
    pair_speedups(rows)
    assert [r.speedup for r in rows] == [6.0, 1.0, None]  # threads=1 has no twin
    assert "6.00x" in report.to_markdown(rows)
    assert json.loads(report.to_json(rows))[0]["speedup"] == 6.0
    header, first, *_ = report.to_csv(rows).splitlines()
    assert header.startswith("model_filename,model_type,model_size,model_n_params")
    assert first.count(",") == header.count(",")


def test_bar_chart_scales_each_test_on_its_own():
    chart = report.bar_chart(
        [
            row("pp512", 1000.0),
            row("pp512", 500.0, threads=1),
            row("tg128", 100.0),
            row("tg128", 100.0, threads=1),
        ]
    )
    lines = chart.splitlines()
    assert lines[0] == "pp512 (tokens/s)" and lines[3] == "tg128 (tokens/s)"
    assert lines[1].count("█") == 40 and lines[2].count("█") == 20
    assert lines[4].count("█") == 40 and lines[5].count("█") == 40


def test_tests_are_named_like_llama_bench():
    assert [BenchTest(512, 0).name, BenchTest(0, 128).name, BenchTest(512, 128).name] == [
        "pp512",
        "tg128",
        "pp512+tg128",
    ]
