"""Every bad input to `llmcli bench`: one line on stderr, exit 2, nothing on stdout, no model loaded."""

from __future__ import annotations

import pytest

from tests.support.cli import cli

BAD_INPUTS = {
    "unknown model": (["no-such-model"], "no model named 'no-such-model'"),
    "nothing to measure": (["-p", "0", "--n-gen", "0"], "nothing to measure"),
    "context smaller than p+n": (
        ["-p", "512", "--n-gen", "128", "--ctx", "600"],
        "--ctx 600 is smaller than -p + --n-gen",
    ),
    "thread list with a word": (["-t", "2,x"], "bad -t list '2,x'"),
    "thread list with zero": (["-t", "0"], "bad -t list '0'"),
    "thread list with a hole": (["-t", "1,,2"], "bad -t list '1,,2'"),
    "negative prompt": (["-p", "-5"], "bad -p list '-5'"),
    "no repetitions": (["-r", "0"], "-r 0"),
    "two report formats": (["--json", "--csv"], "give one report format, not --json and --csv"),
    "three report formats": (["--csv", "--jsonl", "--json"], "not --json and --jsonl and --csv"),
    "unknown backend": (["--backend", "vllm"], "unknown backend 'vllm'"),
    "missing gguf file": (["/nonexistent/model.gguf"], "no such file"),
    "save into a missing folder": (["--save", "/nonexistent/dir/runs.jsonl"], "does not exist"),
}


@pytest.mark.parametrize("args,message", BAD_INPUTS.values(), ids=BAD_INPUTS.keys())
def test_bad_input_is_one_line_and_exit_2(args, message):
    r = cli("bench", *args)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr


def test_transformers_backend_on_a_gguf_without_hf_source_says_what_to_give():
    r = cli("bench", "--backend", "transformers", "-p", "16", "--n-gen", "0")
    assert r.exit_code == 2
    assert "no Hugging Face checkpoint" in r.stderr and "HF model folder" in r.stderr


def test_not_a_gguf_is_refused_before_llama_cpp_opens_it(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a model at all, just some bytes" * 4)
    r = cli("bench", str(bogus), "-p", "16", "--n-gen", "0")
    assert r.exit_code == 2
    assert "not a GGUF" in r.stderr and r.stdout == ""
