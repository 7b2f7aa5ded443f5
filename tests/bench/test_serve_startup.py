"""`bench --endpoint`'s start-up window: a 503 (a server still loading its model) is waited out, its
Retry-After followed within bounds, for at most --wait seconds; and the Retry-After header's parser
(fuzzed in tests/fuzz/test_fuzz_retry_after.py).

The window's clock and sleep are the test's (a list of the pauses asked for, no real waiting); the
servers that answer 503 over HTTP are in tests/engine/openai/test_remote_bench.py.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from llmcli.bench.serve import PAUSE_BOUNDS_S, PAUSE_S, StartupWindow
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.errors import RemoteError, RemoteUnavailable
from llmcli.engine.openai.retry import LONGEST, retry_after_seconds
from tests.support.cli import cli

EP = Endpoint("http://127.0.0.1:9/v1")
NOW = datetime(2026, 12, 4, 14, 0, 0, tzinfo=timezone.utc)


class Clock:
    """Time that passes only when the window sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.pauses: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def answers(*retry_afters: float | None, then: str = "ready"):
    """A call that answers 503 once per Retry-After given (None: without one), then `then`."""
    left = list(retry_afters)

    def call() -> str:
        if left:
            raise RemoteUnavailable("POST /chat/completions failed with 503: Loading model", left.pop(0))
        return then

    return call


def window(seconds: float, clock: Clock) -> StartupWindow:
    return StartupWindow(EP, seconds, clock=lambda: clock.now, sleep=clock.sleep)


def drain(gen):
    """Run a generator to its end: its events, and what it returned."""
    events = []
    while True:
        try:
            events.append(next(gen))
        except StopIteration as stop:
            return events, stop.value


def test_503s_are_waited_out_as_retry_after_says_then_the_answer_is_returned():
    clock = Clock()
    events, value = drain(window(60, clock).until_ready(answers(2, 2, 3), "m"))
    assert value == "ready" and clock.pauses == [2, 2, 3]
    assert [(e.stage, e.model, e.backend, e.rep, e.reps) for e in events] == [
        ("wait", "m", EP.base_url, n, 60) for n in (1, 2, 3)
    ]


def test_retry_after_is_kept_within_bounds_and_its_absence_is_a_default_pause():
    low, high = PAUSE_BOUNDS_S
    clock = Clock()
    drain(window(600, clock).until_ready(answers(0, 3600, None, low / 10, high)))
    assert clock.pauses == [low, high, PAUSE_S, low, high]


def test_past_the_window_the_last_503_is_one_line_naming_the_fix():
    clock = Clock()
    with pytest.raises(RemoteError) as err:
        drain(window(2.5, clock).until_ready(answers(*[1] * 10)))
    # 1 s, 1 s, then the half second left (no pause past the window), then the last try's 503
    assert clock.pauses == [1, 1, 0.5]
    message = str(err.value)
    assert message.startswith(f"the server at {EP.base_url} was not ready after 2.5 s (its last answer: ")
    assert "Loading model" in message and message.endswith("or wait longer with --wait SECONDS")
    assert "\n" not in message and not isinstance(err.value, RemoteUnavailable)


def test_wait_0_tries_once_and_other_errors_are_not_waited_out():
    clock = Clock()
    with pytest.raises(RemoteError, match="was not ready after 0 s"):
        drain(window(0, clock).until_ready(answers(1)))
    assert clock.pauses == []

    def refused() -> str:
        raise RemoteError("POST /chat/completions failed with 500: the engine is on fire")

    with pytest.raises(RemoteError, match="on fire"):
        drain(window(60, clock).until_ready(refused))
    assert clock.pauses == []


HEADERS = {
    "seconds": ("3", 3.0),
    "spaces": (" 7 ", 7.0),
    "zero": ("0", 0.0),
    "a day": (str(int(LONGEST)), LONGEST),
    "past a day": (str(int(LONGEST) + 1), None),
    "huge": ("9" * 400, None),
    "fraction": ("1.5", None),
    "negative": ("-1", None),
    "superscript digit": ("²", None),
    "arabic-indic digit": ("٣", None),
    "empty": ("", None),
    "absent": (None, None),
    "word": ("soon", None),
    "date ahead": (format_datetime(NOW + timedelta(seconds=90), usegmt=True), 90.0),
    "date past": (format_datetime(NOW - timedelta(days=3), usegmt=True), 0.0),
    "date without a zone": ("Fri, 04 Dec 2026 14:01:00 -0000", None),
    "date far ahead": ("Wed, 21 Oct 2099 07:28:00 GMT", None),
    "bad date": ("Mon, 99 Foo 1 99:99:99 GMT", None),
}


@pytest.mark.parametrize("value,seconds", HEADERS.values(), ids=HEADERS.keys())
def test_retry_after_header_reads_seconds_or_a_date_and_nothing_else(value, seconds):
    assert retry_after_seconds(value, NOW) == seconds


BAD_WAITS = {
    "negative": ("-1", "--wait -1: give a number of seconds from 0 to 1e+06"),
    "nan": ("nan", "--wait nan: give a number of seconds from 0 to 1e+06"),
    "infinite": ("inf", "--wait inf: give a number of seconds from 0 to 1e+06"),
    "past the bound": ("2e6", "--wait 2e+06: give a number of seconds from 0 to 1e+06"),
    "not a number": ("soon", "Invalid value for '--wait'"),
}


@pytest.mark.parametrize("value,message", BAD_WAITS.values(), ids=BAD_WAITS.keys())
def test_a_bad_wait_is_refused_before_any_request(value, message):
    r = cli("bench", "--endpoint", "http://127.0.0.1:9/v1", "--wait", value)  # a closed port: nothing asked
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr


def test_wait_without_an_endpoint_is_refused_before_any_model_loads():
    r = cli("bench", "--parallel", "2", "--wait", "5")
    assert r.exit_code == 2 and "--wait cannot go with --parallel" in r.stderr, r.stderr
    r = cli("bench", "-p", "16", "--n-gen", "4", "--wait", "5")
    assert r.exit_code == 2 and r.stdout == ""
    refusal = "--wait is for a serving benchmark: give --endpoint URL (or set LLMCLI_ENDPOINT) too"
    assert r.stderr == f"llmcli: error: {refusal}\n"
