"""`llmcli chat/list --endpoint` against llama-cpp-python's real OpenAI-compatible server."""

from __future__ import annotations

import json
import re

from tests.engine.openai.conftest import ALIAS, API_KEY, no_key_anywhere
from tests.support.cli import cli

ANSI = re.compile(r"\x1b\[")
GREEDY = ["--temp", "0", "-n", "16"]


def remote(url: str, *args: str) -> list[str]:
    return ["chat", "--endpoint", url, *GREEDY, *args]


def test_pipe_gives_only_the_reply_and_json_the_same_text(llama_server):
    env = {"LLMCLI_API_KEY": API_KEY}
    piped = cli(*remote(llama_server), input="What is the capital of France?\n", vars=env)
    as_json = cli(*remote(llama_server, "--json"), input="What is the capital of France?\n", vars=env)
    assert piped.exit_code == 0, piped.stderr
    assert as_json.exit_code == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["text"] and piped.stdout == doc["text"] + "\n"
    assert not ANSI.search(piped.stdout) and piped.stderr == ""
    assert doc["model"] == ALIAS and doc["endpoint"] == llama_server
    assert doc["finish_reason"] in ("stop", "length")
    # llama-cpp-python's server sends neither usage nor timings: counted chunks, nothing invented.
    assert doc["server"] == {"usage": None, "timings": None}
    assert doc["usage"]["prompt_tokens"] is None and doc["usage"]["completion_tokens"] > 0
    t = doc["timings"]
    assert t["load_ms"] is None and t["tokenize_ms"] is None and t["prefill_ms"] is None
    assert 0 < t["ttft_ms"] <= t["total_ms"] and t["decode_tps"] > 0


def test_the_key_is_sent_as_a_bearer_token_and_never_shown(llama_server, tmp_path):
    without = cli(*remote(llama_server, "Say hi."))
    assert without.exit_code == 2
    assert "wants an API key" in without.stderr and "--api-key" in without.stderr
    wrong = cli(*remote(llama_server, "Say hi."), vars={"LLMCLI_API_KEY": "sk-wrong"})
    assert wrong.exit_code == 2 and "rejected the API key" in wrong.stderr
    by_option = cli(*remote(llama_server, "--api-key", API_KEY, "--stats", "Say hi."))
    assert by_option.exit_code == 0 and by_option.stdout.strip()
    assert "TTFT" in by_option.stderr
    debug = cli(
        *remote(llama_server, "-m", "nope", "Say hi."), vars={"LLMCLI_API_KEY": API_KEY, "LLMCLI_DEBUG": "1"}
    )
    helped = cli("chat", "--help", vars={"LLMCLI_API_KEY": API_KEY})
    assert no_key_anywhere(
        without.stderr,
        wrong.stderr,
        by_option.stdout,
        by_option.stderr,
        debug.stdout,
        debug.stderr,
        helped.stdout,
    )


def test_list_shows_the_servers_models(llama_server):
    env = {"LLMCLI_API_KEY": API_KEY}
    table = cli("list", "--endpoint", llama_server, vars=env)
    as_json = cli("list", "--endpoint", llama_server, "--json", vars=env)
    assert table.exit_code == 0 and ALIAS in table.stdout
    assert [m["id"] for m in json.loads(as_json.stdout)] == [ALIAS]
    # LLMCLI_ENDPOINT does the same as --endpoint
    from_env = cli("list", "--json", vars={**env, "LLMCLI_ENDPOINT": llama_server})
    assert json.loads(from_env.stdout) == json.loads(as_json.stdout)


def test_model_is_picked_among_the_servers(llama_server):
    env = {"LLMCLI_API_KEY": API_KEY}
    unknown = cli(*remote(llama_server, "-m", "nope", "Say hi."), vars=env)
    assert unknown.exit_code == 2
    assert f"has no model 'nope'; it serves: {ALIAS}" in unknown.stderr
    by_name = cli(*remote(llama_server, ALIAS, "Say hi."), vars=env)  # MODEL PROMPT, as locally
    by_default = cli(*remote(llama_server, "Say hi."), vars=env)
    assert by_name.exit_code == by_default.exit_code == 0
    assert by_name.stdout == by_default.stdout != ""


def test_stop_and_filter_work_on_remote_replies(llama_server, tmp_path):
    env = {"LLMCLI_API_KEY": API_KEY}
    prompt = "Count from 1 to 10 with commas."
    full = json.loads(cli(*remote(llama_server, "--json", prompt), vars=env).stdout)["text"]
    stop = full.split()[2]  # a string the greedy reply is known to hold
    cut = json.loads(cli(*remote(llama_server, "--json", "--stop", stop, prompt), vars=env).stdout)
    assert cut["text"] == full[: full.index(stop)] and cut["finish_reason"] == "stop"
    word = max(re.findall(r"[A-Za-z]{3,}|\d+", full), key=len)
    words = tmp_path / "words.txt"
    words.write_text(f"{word}\n")
    masked = cli(*remote(llama_server, "--filter", str(words), prompt), vars=env)
    assert masked.exit_code == 0 and "***" in masked.stdout and word not in masked.stdout
