"""`llmcli bench` on llama.cpp: what reaches stdout (only results) and stderr (only progress)."""

from __future__ import annotations

import csv
import io
import json

from tests.support.cli import cli, cli_process, cli_store

# Small enough that a whole run stays well under a second on 2 shared cores.
FAST = ["-p", "32", "--n-gen", "8", "-r", "2", "-t", "1"]  # 1 thread: robust to busy neighbours

# llama-bench -o json's names, which tools reading llama-bench output rely on.
LLAMA_BENCH_FIELDS = {
    "model_filename",
    "model_type",
    "model_size",
    "model_n_params",
    "n_threads",
    "n_batch",
    "n_prompt",
    "n_gen",
    "avg_ts",
    "stddev_ts",
    "samples_ts",
    "avg_ns",
    "stddev_ns",
}

# SmolLM2-135M: 30 layers, 3 KV heads, head dim 64, f16 cache -> 2 * 30 * 3 * 64 * 2 bytes per token.
SMOLLM2_KV_BYTES_PER_TOKEN = 2 * 30 * 3 * 64 * 2


def test_markdown_table_goes_to_stdout_and_progress_to_stderr():
    r = cli("bench", *FAST)
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert all(line.startswith("|") and line.endswith("|") for line in lines)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:7] == ["model", "size", "params", "backend", "threads", "test", "t/s"]
    assert {"KV cache", "peak RSS"} <= set(header)
    tests = [[c.strip() for c in line.strip("|").split("|")][header.index("test")] for line in lines[2:]]
    assert tests == ["pp32", "tg8"]
    assert "bench: loading smollm2-135m-instruct" in r.stderr
    assert "bench:" not in r.stdout
    assert "█" not in r.stdout  # no chart unless stdout is a terminal or --chart


def test_json_has_llama_bench_fields_and_no_library_log_reaches_any_stream():
    r = cli_process("bench", *FAST, "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)  # stdout is one JSON document and nothing else
    assert [row["test"] for row in rows] == ["pp32", "tg8"]
    for row in rows:
        assert LLAMA_BENCH_FIELDS <= row.keys()
        assert row["backend"] == "llama.cpp"
        assert row["model_type"].startswith("llama") and "Q4_1" in row["model_type"]
        assert row["n_threads"] == 1 and row["n_batch"] == 512 and row["flash_attn"] == -1
        assert len(row["samples_ts"]) == 2 and row["avg_ts"] > 0
        assert row["avg_ts"] == sum(row["samples_ts"]) / 2
    assert (rows[0]["n_prompt"], rows[0]["n_gen"]) == (32, 0)
    assert (rows[1]["n_prompt"], rows[1]["n_gen"]) == (0, 8)
    # stderr: our progress lines only, none of llama.cpp's loader chatter
    assert r.stderr.strip()
    assert all(line.startswith("bench: ") for line in r.stderr.strip().splitlines()), r.stderr


def test_memory_columns_use_the_kv_formula_and_a_real_peak_rss():
    r = cli("bench", *FAST, "--ctx", "512", "--json")
    rows = json.loads(r.stdout)
    for row in rows:
        assert row["n_ctx"] == 512
        assert row["kv_cache_bytes"] == SMOLLM2_KV_BYTES_PER_TOKEN * 512
        assert row["peak_rss_bytes"] > row["model_size"] * 0.5  # the weights are mapped and touched
    assert rows[0]["ttft_ms"] > 0 and rows[1]["ttft_ms"] is None


def test_csv_and_jsonl_are_machine_readable():
    r = cli("bench", *FAST, "--csv")
    records = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [rec["test"] for rec in records] == ["pp32", "tg8"]
    assert float(records[0]["avg_ts"]) > 0
    r = cli("bench", *FAST, "--jsonl")
    assert [json.loads(line)["test"] for line in r.stdout.splitlines()] == ["pp32", "tg8"]


def test_several_thread_counts_in_one_run_and_save_appends_jsonl(tmp_path):
    saved = tmp_path / "runs.jsonl"
    r = cli("bench", "-p", "16", "--n-gen", "4", "-r", "1", "-t", "1,2", "--json", "--save", str(saved))
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["n_threads"], row["test"]) for row in rows] == [
        (1, "pp16"),
        (1, "tg4"),
        (2, "pp16"),
        (2, "tg4"),
    ]
    cli("bench", "-p", "16", "--n-gen", "0", "-r", "1", "--save", str(saved))
    lines = saved.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["avg_ts"] > 0 for line in lines)


def test_repetitions_start_from_an_empty_kv_cache():
    # 3 x 96 prompt tokens cannot fit a 96-token context (256 cells once llama.cpp pads it) unless
    # the cache is cleared before each repetition.
    r = cli("bench", "-p", "96", "--n-gen", "0", "-r", "3", "--ctx", "96", "-t", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert len(json.loads(r.stdout)[0]["samples_ns"]) == 3


def test_chart_on_request_goes_to_stderr_when_stdout_is_data():
    r = cli("bench", "-p", "32", "--n-gen", "8", "-r", "1", "-t", "1,2", "--json", "--chart")
    assert len(json.loads(r.stdout)) == 4
    assert "pp32 (tokens/s)" in r.stderr and "█" in r.stderr


def test_a_gguf_path_works_as_model():
    path = cli_store().embedded().path
    r = cli("bench", path, "-p", "16", "--n-gen", "0", "-r", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)[0]["model_filename"] == path
