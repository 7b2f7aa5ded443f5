"""A server that never stops, never finishes a line, pings forever or sends chunks of the wrong
shape: the client ends each in bounded time with one line (exit 1: the server misbehaved), and
cuts a server that ignores max_tokens at max_tokens."""

from __future__ import annotations

import json
import time

import pytest

from tests.engine.openai.hostile_server import SHAPES
from tests.support.cli import cli

# A hang guard, not a speed test: each case ends in a few seconds; the message proves which bound
# ended it. An endless stream that no bound stopped would run into the child's 60 s timeout.
HANG_GUARD_S = 30


def chat(url: str, *args: str):
    return cli("chat", "--endpoint", url, *args, time_limit=60)


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: error: "), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "scenario,args,words",
    [
        # Keep-alive comments are not a reply: silence is timed from the last event.
        ("pings", ["--timeout", "1"], "sent no complete event for 1 s, only keep-alive comments"),
        # Events, but never an end: --timeout 1 with -n 2 allows 1 x (1 + 2/100) s in all.
        ("trickle", ["--timeout", "1", "-n", "2"], "took longer than 1.02 s in all"),
        # A 100 MiB line is refused at its first MiB, not parsed for minutes.
        ("hugeline", [], "sent a line over 1 MiB in its stream"),
    ],
)
def test_an_endless_stream_ends_in_bounded_time(hostile_server, scenario, args, words):
    start = time.monotonic()
    result = chat(hostile_server.endpoint(scenario), *args, "hi")
    assert result.exit_code == 1, result.stderr
    assert words in one_error_line(result)
    assert time.monotonic() - start < HANG_GUARD_S


def test_a_model_list_that_never_ends_is_cut_at_twice_the_timeout(hostile_server):
    start = time.monotonic()
    result = cli("list", "--endpoint", hostile_server.endpoint("slowlist"), "--timeout", "1", time_limit=60)
    assert result.exit_code == 1
    assert "GET /models at" in one_error_line(result) and "took longer than 2 s in all" in result.stderr
    assert time.monotonic() - start < HANG_GUARD_S


def test_a_server_that_ignores_max_tokens_is_cut_at_max_tokens(hostile_server):
    start = time.monotonic()
    result = chat(hostile_server.endpoint("nostop"), "-n", "5", "--json", "hi")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["text"] == "w " * 5 and doc["finish_reason"] == "length"
    assert doc["usage"]["completion_tokens"] == 5
    plain = chat(hostile_server.endpoint("nostop"), "-n", "3", "hi")
    assert plain.exit_code == 0 and plain.stdout == "w w w \n"
    assert time.monotonic() - start < HANG_GUARD_S


def test_bench_cuts_off_a_server_that_ignores_max_tokens_and_fails_the_request(hostile_server):
    url = hostile_server.endpoint("nostop")
    start = time.monotonic()
    result = cli("bench", "--endpoint", url, "--n-gen", "4", "--num-requests", "2", "--json", time_limit=60)
    assert time.monotonic() - start < HANG_GUARD_S  # each endless stream was cut at max_tokens
    assert result.exit_code == 0, result.stderr
    row = json.loads(result.stdout)[0]
    assert (row["completed"], row["failed"], row["total_output_tokens"]) == (0, 2, 0)
    assert row["first_error"] == f"the server at {url} went past max_tokens 4: its stream was cut off here"


@pytest.mark.parametrize(
    "scenario,words",
    [
        ("shape-choices", "'choices' is a string, not a list"),
        ("shape-choice", "'choices[0]' is a number, not an object"),
        ("shape-delta", "'choices[0].delta' is a list, not an object"),
        ("shape-content", "'choices[0].delta.content' is an object, not a string"),
        ("shape-finish", "'choices[0].finish_reason' is a number, not a string"),
        ("shape-usage", "'usage.completion_tokens' is a string, not a whole number"),
        ("shape-usage-nan", "'usage.completion_tokens' is the number nan, not a whole number"),
        ("shape-usage-list", "'usage' is a list, not an object"),
        ("shape-timings", "'timings.prompt_ms' is the number inf, not a number"),
        ("shape-details", "'usage.prompt_tokens_details.cached_tokens' is the number -1, not a whole number"),
        ("shape-list", "a stream event is a list, not a JSON object"),
        ("shape-nested", "sent a stream event that is not JSON"),
        ("shape-bigint", "'usage.completion_tokens' is a number past 2^53, not a whole number"),
    ],
)
def test_a_chunk_of_the_wrong_shape_is_one_line_naming_the_field(hostile_server, scenario, words):
    assert scenario in SHAPES
    url = hostile_server.endpoint(scenario)
    result = chat(url, "hi")
    assert result.exit_code == 1, result.stderr
    line = one_error_line(result)
    assert f"the server at {url} sent" in line and words in line, line
    assert result.stdout == "Hi"  # the text before the bad chunk was already shown


def test_model_ids_with_escapes_are_printable_in_messages(hostile_server):
    result = cli("chat", "--endpoint", hostile_server.endpoint("echo-models"), "hi")
    line = one_error_line(result)
    # Without a key to echo, the first id is nothing but escapes: it is left out.
    assert result.exit_code == 2 and "serves 3 models (evil model, plain, xxx" in line
    assert "\x1b" not in line and "\x07" not in line and "\u202e" not in line
    assert len(line) < 1200  # each id is cut to a bounded length
