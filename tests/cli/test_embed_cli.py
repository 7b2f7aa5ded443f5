"""`llmcli embed` and `llmcli rerank` as a person runs them: vectors on stdout (JSON lines, or one --json
document), stdin's lines when piped, every bad input one line on stderr and exit 2."""

from __future__ import annotations

import json
import math

import pytest

from llmcli.errors import ExitStatus
from llmcli.model_ref import EMBEDDED_NAME
from tests.support.cli import cli


@pytest.fixture(scope="module")
def minilm(minilm_gguf) -> str:
    return str(minilm_gguf)


def norm(vec: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vec))


def test_embed_prints_one_json_line_per_text(minilm, private_store):
    got = cli("embed", minilm, "a cat on a mat", "stock prices fell", "-t", "1")
    assert got.exit_code == 0, got.stderr
    lines = [json.loads(line) for line in got.stdout.splitlines()]
    assert len(lines) == 2 and all(len(v) == 384 for v in lines)
    assert all(math.isclose(norm(v), 1.0, rel_tol=1e-5) for v in lines)


def test_embed_reads_stdin_lines_and_json_with_dimensions(minilm, private_store):
    got = cli("embed", minilm, "--json", "--dimensions", "64", "-t", "1", input="first line\n\nsecond line\n")
    assert got.exit_code == 0, got.stderr
    doc = json.loads(got.stdout)
    assert doc["dimensions"] == 64 and doc["pooling"] == "mean"
    assert [d["index"] for d in doc["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 64 and d["n_tokens"] == 4 for d in doc["data"])


def test_a_decoder_embeds_with_pooling_it_is_told(embedded_path, private_store):
    got = cli("embed", EMBEDDED_NAME, "hello there", "--pooling", "mean", "-t", "1")
    assert got.exit_code == 0, got.stderr
    assert math.isclose(norm(json.loads(got.stdout)), 1.0, rel_tol=1e-5)


@pytest.mark.parametrize(
    ("args", "input", "words"),
    [
        (("--dimensions", "0", "x"), "", "dimensions 0"),
        (("--dimensions", "100000", "x"), "", "dimensions 100000"),
        (("",), "", "input 0 is empty"),
        ((), "", "no input"),
        (("--pooling", "max", "x"), "", "--pooling max"),
        (("x",) * 1, "", None),  # the good one, for contrast
    ],
)
def test_bad_embed_input_is_exit_2_naming_it(minilm, private_store, args, input, words):
    got = cli("embed", minilm, *args, "-t", "1", input=input)
    if words is None:
        assert got.exit_code == 0, got.stderr
        return
    assert got.exit_code == ExitStatus.USAGE, got.stderr
    assert words in got.stderr and got.stdout == ""
    assert "Traceback" not in got.stderr


def test_many_inputs_are_refused(minilm, private_store):
    got = cli("embed", minilm, "-t", "1", input="x\n" * 10_000)
    assert got.exit_code == ExitStatus.USAGE
    assert "10,000 inputs" in got.stderr


def test_a_chat_model_without_pooling_cannot_embed(embedded_path, private_store):
    got = cli("embed", EMBEDDED_NAME, "hi", "-t", "1")
    assert got.exit_code == ExitStatus.USAGE
    assert EMBEDDED_NAME in got.stderr and "--pooling" in got.stderr


def test_rerank_sorts_stdin_documents_by_a_chat_model_judge(embedded_path, private_store):
    docs = "The capital of France is Paris.\nBananas are yellow fruit.\nParis is in France.\n"
    got = cli("rerank", EMBEDDED_NAME, "What is the capital of France?", "--json", "-t", "1", input=docs)
    assert got.exit_code == 0, got.stderr
    doc = json.loads(got.stdout)
    scores = [r["relevance_score"] for r in doc["results"]]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in doc["results"]) == [0, 1, 2]
    assert doc["scorer"] == "judge" and all(0.0 < s < 1.0 for s in scores)
    table = cli("rerank", EMBEDDED_NAME, "capital of France", "--top-n", "1", "-t", "1", input=docs)
    assert table.exit_code == 0 and table.stdout.splitlines()[0].split()[:3] == ["RANK", "SCORE", "INDEX"]
    assert len(table.stdout.splitlines()) == 2


@pytest.mark.parametrize(
    ("model", "query", "input", "words"),
    [
        ("chat", "q", "", "no document"),
        ("chat", "   ", "doc\n", "query is empty"),
        ("chat", "q", "d\n" * 1000, "1,000 documents"),
        ("minilm", "q", "doc\n", "embedding model"),
    ],
)
def test_bad_rerank_input_is_exit_2(minilm, embedded_path, private_store, model, query, input, words):
    name = minilm if model == "minilm" else EMBEDDED_NAME
    got = cli("rerank", name, query, "-t", "1", input=input)
    assert got.exit_code == ExitStatus.USAGE, got.stderr
    assert words in got.stderr and got.stdout == ""


def test_chat_with_an_embedding_model_is_exit_2_naming_it(minilm, private_store):
    got = cli("chat", minilm, "hi", "-t", "1", "-n", "4")
    assert got.exit_code == ExitStatus.USAGE and got.stdout == ""
    assert "embedding model" in got.stderr and "llmcli embed" in got.stderr
