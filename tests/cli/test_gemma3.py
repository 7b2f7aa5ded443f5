"""A second real GGUF: Gemma 3 270M, which carries no chat template. chat, show, tokenize, render,
bench and piping work on it as on SmolLM2, with Gemma's own turn format (llama.cpp's built-in).

In this process, through the CLI's error boundary, but for the pipe: that nothing else reaches the
stderr file descriptor is a child's to show."""

from __future__ import annotations

import json

from tests.support.cli import cli, cli_process

T1 = ("-t", "1")
GREEDY = ("--temp", "0", "--seed", "1", "-n", "24", *T1)
GEMMA_PROMPT = "<start_of_turn>user\nWhat is the capital of France?<end_of_turn>\n<start_of_turn>model\n"


def test_chat_uses_gemmas_turn_format_not_chatml(gemma3_path):
    r = cli("chat", gemma3_path, *GREEDY, "--json", "What is the capital of France?")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    # On ChatML the model wrote "<|im_end|>\n<|im_start|>admin…"; on its own format it stays in it.
    assert "<|im_" not in doc["text"] and doc["text"].strip()
    assert doc["usage"]["prompt_tokens"] == 16  # <bos> + the 15 tokens of the Gemma turn


def test_render_prints_the_gemma_prompt_and_its_ids(gemma3_path):
    messages = json.dumps([{"role": "user", "content": "What is the capital of France?"}])
    r = cli("render", gemma3_path, input=messages)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == GEMMA_PROMPT and "built-in 'gemma'" in r.stderr
    doc = json.loads(cli("render", gemma3_path, "--json", input=messages).stdout)
    assert doc["ids"][:2] == [2, 105] and doc["pieces"][:2] == ["<bos>", "<start_of_turn>"]
    assert doc["template"]["origin"] == "builtin"


def test_show_says_which_template_and_why(gemma3_path):
    r = cli("show", gemma3_path)
    assert r.exit_code == 0, r.stderr
    assert "gemma3" in r.stdout and "built-in 'gemma' format for gemma3" in r.stdout
    doc = json.loads(cli("show", gemma3_path, "--json").stdout)
    assert doc["chat_template"] is None and doc["template_used"]["origin"] == "builtin"


def test_tokenize_parses_gemma_control_tokens_only_with_special(gemma3_path):
    with_special = json.loads(
        cli("tokenize", gemma3_path, "--special", "--json", "<start_of_turn>user").stdout
    )
    assert with_special["ids"] == [105, 2364]
    plain = json.loads(cli("tokenize", gemma3_path, "--json", "<start_of_turn>user").stdout)
    assert 105 not in plain["ids"]


def test_piped_text_reaches_gemma_and_stdout_holds_only_the_reply(gemma3_path):
    r = cli_process("chat", gemma3_path, *GREEDY, "--no-stats", "Summarize.", input="Paris is in France.\n")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() and "<start_of_turn>" not in r.stdout and r.stderr == ""


def test_bench_runs_on_gemma(gemma3_path):
    r = cli("bench", gemma3_path, "-p", "16", "--n-gen", "4", "-r", "1", *T1, "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {row["n_prompt"] for row in rows} >= {16} and all(row["avg_ts"] > 0 for row in rows)
