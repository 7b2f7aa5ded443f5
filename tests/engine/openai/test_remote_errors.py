"""Every way a server can fail: one clear line on stderr and the contract's exit code (2 for a
refusal the user can fix, 1 for a failure), never a traceback, never the key."""

from __future__ import annotations

import json
import time

import pytest

from tests.engine.openai.conftest import API_KEY, no_key_anywhere
from tests.engine.openai.fake_server import REPLY
from tests.support.cli import cli
from tests.support.servers import refused_port

HANG_GUARD_S = 30  # a hang guard, not a speed test: the slowest case (a 1 s stall) ends in about 2 s


def chat(url: str, *args: str, **kw):
    return cli("chat", "--endpoint", url, "--api-key", API_KEY, *args, **kw)


@pytest.mark.parametrize(
    "scenario,args,code,message",
    [
        ("401", [], 2, "failed with 401 Unauthorized: the server rejected the API key; check --api-key"),
        (
            "500",
            [],
            1,
            "POST /chat/completions at {url} failed with 500 Internal Server Error: the engine is on fire",
        ),
        ("midfail", [], 1, "the server at {url} failed mid-reply: CUDA out of memory"),
        ("drop", [], 1, "the server at {url} closed the connection before the reply was complete"),
        ("stall", ["--timeout", "1"], 1, "the server at {url} sent nothing for 1 s"),
        ("two", [], 2, "serves 2 models (fake-model, other-model); pick one with -m MODEL"),
        ("ok", ["-m", "missing"], 2, "has no model 'missing'; it serves: fake-model"),
        ("notjson", [], 1, "did not answer with JSON"),
        ("missing", [], 2, "no OpenAI-compatible API there"),
    ],
)
def test_a_failing_server_gives_one_line_and_the_exit_code(fake_server, scenario, args, code, message):
    url = fake_server.endpoint(scenario)
    start = time.monotonic()
    result = chat(url, *args, "Say hi.")
    assert result.exit_code == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: error: ")
    assert message.format(url=url) in lines[0]
    assert "Traceback" not in result.stderr and no_key_anywhere(result.stdout, result.stderr)
    assert time.monotonic() - start < HANG_GUARD_S  # the stall ends by --timeout, not by the test's


def test_text_before_a_failure_is_already_on_stdout(fake_server):
    result = chat(fake_server.endpoint("drop"), "Say hi.")
    assert result.exit_code == 1 and result.stdout == "".join(REPLY[:3])


def test_connection_refused_and_bad_urls():
    with refused_port() as port:
        refused = cli("chat", "--endpoint", f"http://127.0.0.1:{port}/v1", "hi")
    assert refused.exit_code == 1
    assert "connection refused; is the server running there?" in refused.stderr
    for bad in ("localhost:8000", "ftp://host/v1", "http://host:port/v1"):
        result = cli("chat", "--endpoint", bad, "hi")
        assert result.exit_code == 2 and "--endpoint" in result.stderr, bad


def test_local_only_options_are_refused_with_an_endpoint(fake_server):
    result = chat(fake_server.endpoint(), "--ctx", "512", "-t", "2", "hi")
    assert result.exit_code == 2 and "--ctx and --threads set the local engine" in result.stderr
    keyless = cli("chat", "--api-key", API_KEY, "hi")
    assert keyless.exit_code == 2 and "--api-key is for a server" in keyless.stderr
    assert no_key_anywhere(keyless.stderr)


def test_server_usage_and_timings_reach_json_and_the_panel(fake_server):
    doc = json.loads(chat(fake_server.endpoint(), "--json", "Say hi.").stdout)
    assert doc["text"] == "".join(REPLY)  # a character split across TCP reads arrives whole
    assert doc["usage"] == {
        "prompt_tokens": 42,
        "cached_tokens": 10,
        "cache_source": None,
        "completion_tokens": len(REPLY),
        "reasoning_tokens": 0,
    }
    assert doc["server"]["timings"]["prompt_ms"] == 12.5
    assert doc["timings"]["prefill_ms"] == 12.5 and doc["timings"]["prefill_tps"] == 2560.0
    assert doc["timings"]["tokenize_ms"] is None  # ran on the server: not invented
    panel = chat(fake_server.endpoint(), "--stats", "Say hi.").stderr
    assert "42 tok (32 new, 10 cached)" in panel and "(server)" in panel and "(here)" in panel


def test_the_request_carries_the_bearer_header_and_the_sampling_fields(fake_server):
    fake_server.requests.clear()
    result = chat(
        fake_server.endpoint(),
        "--temp",
        "0.3",
        "--top-k",
        "5",
        "--seed",
        "7",
        "-n",
        "4",
        "--stop",
        "END",
        "Say hi.",
    )
    assert result.exit_code == 0
    post = [r for r in fake_server.requests if r["method"] == "POST"][-1]
    assert all(r["authorization"] == f"Bearer {API_KEY}" for r in fake_server.requests)
    body = post["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["seed"], body["top_k"], body["stop"]) == (
        0.3,
        4,
        7,
        5,
        ["END"],
    )
    assert "min_p" not in body and "repeat_penalty" not in body  # left at llmcli's defaults: not sent
    assert result.stdout == "".join(REPLY[:4]) + "\n"


def test_a_server_that_refuses_stream_options_is_asked_again_without(fake_server):
    fake_server.requests.clear()
    result = chat(fake_server.endpoint("strict"), "Say hi.")
    assert result.exit_code == 0 and result.stdout == "".join(REPLY) + "\n"
    posts = [r["body"] for r in fake_server.requests if r["method"] == "POST"]
    assert len(posts) == 2 and "stream_options" in posts[0] and "stream_options" not in posts[1]


def test_bench_stops_on_a_failing_warmup_with_its_message(fake_server):
    result = cli("bench", "--endpoint", fake_server.endpoint("500"), "--n-gen", "4", "--num-requests", "2")
    assert result.exit_code == 1 and "the engine is on fire" in result.stderr and result.stdout == ""


def test_the_remote_client_is_not_imported_for_help():
    import subprocess
    import sys

    code = (
        "import sys, llmcli.cli\n"
        "print([m for m in ('http.client', 'ssl', 'llmcli.engine.openai.client', 'llmcli.bench.serve') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
