"""`--backend transformers`: AutoModelForCausalLM + generate() measured like llama.cpp, side by side."""

from __future__ import annotations

import json

from llmcli.store import ModelEntry
from tests.support.cli import cli, cli_store


def test_hf_folder_measured_with_transformers(tiny_hf_dir):
    r = cli(
        "bench",
        str(tiny_hf_dir),
        "--backend",
        "transformers",
        "-p",
        "32",
        "--n-gen",
        "8",
        "-r",
        "2",
        "-t",
        "1",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [(row["backend"], row["test"]) for row in rows] == [
        ("transformers", "pp32"),
        ("transformers", "tg8"),
    ]
    pp, tg = rows
    assert pp["model_type"].startswith("llama") and pp["model_type"].endswith("F32")
    assert pp["model_filename"] == str(tiny_hf_dir.resolve())
    # 2 layers x 2 KV heads x head dim 16 x float32, K and V, for -p + --n-gen tokens
    assert pp["kv_cache_bytes"] == 2 * 2 * 2 * 16 * 4 * 40 and pp["n_ctx"] == 40
    assert pp["ttft_ms"] > 0 and pp["avg_ts"] > 0 and tg["avg_ts"] > 0
    assert pp["speedup"] is None  # nothing to compare with
    assert "bench: loading tiny-llama-hf" in r.stderr


def test_store_gguf_with_its_hf_source_sits_beside_transformers_with_a_speedup(tiny_hf_dir):
    # A converted model remembers its HF folder. Here the "converted" GGUF is the embedded model and
    # the folder a tiny random Llama: not the same weights, but the same bookkeeping `convert` sets up.
    store = cli_store()
    store.register(ModelEntry(name="paired", path=store.embedded().path, hf_dir=str(tiny_hf_dir)))
    r = cli(
        "bench",
        "paired",
        "--backend",
        "llama,transformers",
        "-p",
        "16",
        "--n-gen",
        "4",
        "-r",
        "1",
        "-t",
        "1",
        "--json",
    )
    assert r.exit_code == 0, r.stderr
    rows = {(row["backend"], row["test"]): row for row in json.loads(r.stdout)}
    assert set(rows) == {(b, t) for b in ("llama.cpp", "transformers") for t in ("pp16", "tg4")}
    for test in ("pp16", "tg4"):
        llama, hf = rows["llama.cpp", test], rows["transformers", test]
        assert hf["speedup"] == 1.0
        assert abs(llama["speedup"] - llama["avg_ts"] / hf["avg_ts"]) < 1e-9
    r = cli(
        "bench", "paired", "--backend", "llama,transformers", "-p", "16", "--n-gen", "0", "-r", "1", "-t", "1"
    )
    assert "speedup" in r.stdout.splitlines()[0]


def test_hf_folder_on_llama_backend_asks_for_a_conversion(tiny_hf_dir):
    r = cli("bench", str(tiny_hf_dir), "-p", "16", "--n-gen", "0")
    assert r.exit_code == 2
    assert "llmcli convert" in r.stderr and "--backend transformers" in r.stderr
