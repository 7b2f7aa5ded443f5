"""Limits and the schedule: 429 with Retry-After per key (requests; tokens: test_token_limit), 503 at
once when the queue is full, the refusals at start, and SIGTERM letting a stream finish before exit 0."""

from __future__ import annotations

import json
import signal
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.serve.server import HANG_GUARD_S, ServeProcess
from tests.support.cli import cli

# One a test: the limits are per key.
KEYS = (
    "sk-rate",
    "sk-spare",
    "sk-busy",
    "sk-big",
    "sk-gone-openai",
    "sk-gone-ollama",
    "sk-bench",
    "sk-gone-anthropic",
    "sk-gone-responses",
)
HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedded_path):
    """This module's own server, in place of the shared one: the limits need flags of their own."""
    home = tmp_path_factory.mktemp("serve-limits")
    key_file = home / "keys.txt"
    key_file.write_text("# one key a line\n" + "\n".join(KEYS) + "\n")
    srv = ServeProcess(
        home,
        embedded_path,
        "--parallel", "1", "--max-queue", "0", "--api-key-file", str(key_file),
        "--rate-limit", "3",
    )  # fmt: skip
    yield srv
    assert srv.stop() == 0


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def refusals(server, status: int, key: str) -> float:
    """llmcli:http_refusals_total for one status, read with `key` (/metrics counts against no limit)."""
    return server.metric(f'llmcli:http_refusals_total{{status="{status}"}}', auth(key))


def chat(server, key: str, **extra) -> httpx.Response:
    body = {"messages": HI, "max_tokens": 4, **extra}
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers=auth(key), timeout=60)


def test_past_the_rate_limit_is_429_with_retry_after(server):
    before = refusals(server, 429, KEYS[0])
    for _ in range(3):
        assert httpx.get(server.url + "/v1/models", headers=auth(KEYS[0])).status_code == 200
    r = httpx.get(server.url + "/v1/models", headers=auth(KEYS[0]))
    assert r.status_code == 429 and 1 <= int(r.headers["retry-after"]) <= 60
    error = r.json()["error"]
    assert error["type"] == "rate_limit_exceeded" and "3 requests a minute" in error["message"]
    assert refusals(server, 429, KEYS[0]) == before + 1
    assert server.metric("llmcli:num_requests_running", auth(KEYS[0])) == 0  # /metrics is not counted


def test_bench_says_why_its_requests_failed(server):
    # Past --rate-limit 3 the rest of the run is 429s: the table counts them, stderr says why.
    result = cli(
        "bench", "--endpoint", server.url + "/v1", "--api-key", KEYS[6],
        "--concurrency", "1", "--num-requests", "6", "--n-gen", "2", "-p", "8",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert "requests failed; the first: " in result.stderr and "429" in result.stderr, result.stderr


def test_a_full_queue_is_503_at_once_and_the_place_comes_back(server):
    # A count goes on for its whole budget (a chat may end early): the one sequence stays taken.
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 300, "stream": True}
    with httpx.stream(
        "POST", server.url + "/v1/completions", json=body, headers=auth(KEYS[2]), timeout=60
    ) as stream:
        lines = stream.iter_lines()  # kept: a dropped iterator closes the response, and the server cancels
        assert next(line for line in lines if line.startswith("data: "))
        before = refusals(server, 503, KEYS[2])
        busy = chat(server, KEYS[2])  # the one sequence is taken and --max-queue is 0
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert refusals(server, 503, KEYS[2]) == before + 1
        assert "queue is full" in busy.json()["error"]["message"]
    assert chat(server, KEYS[2]).status_code == 200


def test_a_request_over_the_whole_pool_is_400_before_any_token(server, embedded_path):
    r = httpx.post(
        server.url + "/v1/completions",
        json={"prompt": "word " * 2000, "max_tokens": 4},
        headers=auth(KEYS[3]),
        timeout=60,
    )
    error = r.json()["error"]
    assert r.status_code == 400 and error["code"] == "context_length_exceeded", error
    assert "maximum context length" in error["message"] and error["param"] == "prompt", error


COUNTING = {"prompt": "1, 2, 3,", "max_tokens": 500, "stream": True, "options": {"num_predict": 500}}
TO_COUNT = [{"role": "user", "content": "Count on: 1, 2, 3,"}]


@pytest.mark.parametrize(
    "route,key,asked",
    [
        ("/v1/completions", KEYS[4], COUNTING),
        ("/api/generate", KEYS[5], COUNTING),
        ("/v1/messages", KEYS[7], {"messages": TO_COUNT, "max_tokens": 500, "stream": True}),
        ("/v1/responses", KEYS[8], {"input": TO_COUNT, "max_output_tokens": 500, "stream": True}),
    ],
)
def test_a_client_that_leaves_right_after_asking_gives_its_place_back(server, route, key, asked):
    """Gone before its stream began: the sequence is cancelled and its place in the queue comes back
    (with --parallel 1 and --max-queue 0 a place that leaked would make every later request a 503).
    Every dialect's stream: the access middleware closes the call its first piece never reached."""
    host, port = server.url.removeprefix("http://").split(":")
    body = json.dumps(asked)
    request = (
        f"POST {route} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}"
    )
    cancelled = 'llmcli:requests_total{finished_reason="cancelled"}'
    before = server.metric(cancelled, auth(key), absent=0)
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(request.encode())  # and gone at once, before any answer
    # The server reads the request, starts the sequence, finds the client gone and counts the cancel.
    after = server.metric_when(cancelled, lambda n: n > before, auth(key), absent=0)
    assert after == before + 1  # it did start, and was cancelled
    assert server.running_after(auth(key)) == 0
    assert chat(server, key).status_code == 200


# -- refused at start: one line, exit 2 ---------------------------------------------------------
# In this process, each under HANG_GUARD_S: a refusal that did not happen would serve until killed.
def test_listening_beyond_loopback_without_a_key_is_refused():
    result = cli("serve", "--host", "0.0.0.0", time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--api-key" in result.stderr


@pytest.mark.parametrize(
    ("origin", "words"),
    [
        ("https://*.example.com", "holds a wildcard, which matches no Origin"),
        ("*.example.com", "holds a wildcard, which matches no Origin"),
        ("https://App.Example.com", "has capitals, which match no Origin"),
        ("HTTPS://app.example.com:8080", "has capitals, which match no Origin"),
        ("https://app.example.com/", "is not an origin"),
        ("app.example.com", "is not an origin"),
    ],
)
def test_a_cors_origin_no_browser_sends_is_refused_naming_the_rule(origin, words):
    """The CORS middleware compares the Origin header as a string: these never matched any browser."""
    result = cli("serve", "--cors-origin", origin, time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert words in result.stderr and "scheme://host[:port], in lower case" in result.stderr
    if "capitals" in words:  # the value it gives is one that is accepted
        given = result.stderr.rstrip().rsplit("give ", 1)[1]
        assert given == origin.lower()
        from llmcli.serve.config import origin_refusal

        assert origin_refusal(given) is None


@pytest.mark.parametrize("key", ["", "  "])
def test_an_empty_api_key_is_refused(key):
    result = cli("serve", "--host", "0.0.0.0", "--api-key", key, time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith("llmcli: error: --api-key is empty; give a key")
    assert result.stderr.count("\n") == 1


UNSENDABLE = [
    ("sk-caf\u00e9", "holds a character that is not ASCII; use ASCII only"),
    (" sk-pad", "begins or ends with a space; remove the spaces around it"),
    ("sk-pad ", "begins or ends with a space; remove the spaces around it"),
    ("sk-\x00nul", "holds a control character"),
    ("sk-\ttab", "holds a control character"),
    ("sk-\x1besc", "holds a control character"),
    ("sk-\x7fdel", "holds a control character"),
]


@pytest.mark.parametrize("key,words", UNSENDABLE)
def test_a_key_no_client_could_send_is_refused_without_showing_it(key, words):
    result = cli("serve", "--api-key", "sk-fine", "--api-key", key, time_limit=30)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"llmcli: error: --api-key #2 {words}")
    assert result.stderr.count("\n") == 1 and key.strip() not in result.stderr


@pytest.mark.parametrize("key,words", UNSENDABLE)
def test_a_key_file_line_no_client_could_send_is_refused_naming_the_line(tmp_path, key, words):
    keys = tmp_path / "keys.txt"
    keys.write_bytes(f"# keys\nsk-fine\n\n{key}\nsk-other\n".encode())
    result = cli("serve", "--api-key-file", str(keys), time_limit=30)
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"llmcli: error: --api-key-file {keys} line 4: the key {words}")
    assert result.stderr.count("\n") == 1 and key.strip() not in result.stderr


@pytest.mark.parametrize("line", [b"sk-\xff\xfe", b"sk-\x0bvt"])
def test_a_key_file_line_that_is_not_text_or_has_a_vertical_tab_is_one_refused_key(tmp_path, line):
    # Bytes that are not UTF-8, and a \v (which str.splitlines would take for a line break).
    keys = tmp_path / "keys.txt"
    keys.write_bytes(b"sk-fine\r\n" + line + b"\r\n")
    result = cli("serve", "--api-key-file", str(keys), time_limit=30)
    assert result.exit_code == 2 and f"{keys} line 2: the key holds a" in result.stderr


def test_an_empty_key_file_is_refused(tmp_path):
    empty = tmp_path / "keys.txt"
    empty.write_text("# no keys yet\n\n")
    result = cli("serve", "--api-key-file", str(empty), time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and "holds no key" in result.stderr


@pytest.mark.parametrize(
    "args,words",
    [
        (["--ctx", "99999999"], "give a smaller --ctx"),
        (["-t", "100000"], "give a smaller -t"),
        (["--parallel", "0"], "--parallel"),
        (["--max-queue", "-1"], "--max-queue"),
        (["--temp", "11"], "0..10"),
        (["--port", "70000"], "--port"),
        (["--header-timeout", "0"], "--header-timeout"),
        (["--max-connections", "0"], "--max-connections"),
        (["--parallel", "300"], "--parallel must be in 1..256 (llama.cpp's limit), not 300"),
        (["--timeout", "0"], "--timeout must be more than 0 s, not 0 s"),
        (["--grace", "-1"], "--grace must be at least 0 s, not -1 s"),
        (["--rate-limit", "0"], "--rate-limit must be at least 1, not 0"),
    ],
)
def test_bad_options_are_refused_before_anything_loads(args, words):
    result = cli("serve", *args, time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and result.stdout == "" and words in result.stderr


def test_a_file_that_is_not_a_model_is_refused_before_listening(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model at all" * 100)
    result = cli("serve", str(bad), "--port", "0", time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and "not a GGUF file" in result.stderr and "serving" not in result.stderr


def test_a_taken_port_is_refused_naming_the_flag():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = cli("serve", "--port", str(port), time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and "choose another --port" in result.stderr


# -- SIGTERM -----------------------------------------------------------------------------------
def test_sigterm_lets_the_stream_in_flight_finish_then_exits_0(tmp_path, embedded_path):
    srv = ServeProcess(tmp_path, embedded_path, "--parallel", "1", "--grace", "30", "--json")
    try:
        body = {"messages": HI, "max_tokens": 12, "stream": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))
            srv.proc.send_signal(signal.SIGTERM)
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        finish = [json.loads(line[6:]) for line in rest[:-1]][-1]["choices"][0]["finish_reason"]
        assert finish in ("stop", "length")
        assert srv.proc.wait(60) == 0
        assert srv.stderr_lines[-1] == "llmcli: stopped"
        assert srv.proc.stdout is not None
        (line,) = srv.proc.stdout.read().decode().splitlines()  # --json: where it listened, on stdout
        assert json.loads(line) == {"url": srv.url, "model": Path(embedded_path).name, "path": embedded_path}
    finally:
        srv.stop()


def test_past_the_grace_period_a_stream_ends_with_an_error_event_and_a_whole_answer_is_503(
    tmp_path, embedded_path
):
    srv = ServeProcess(tmp_path, embedded_path, "--parallel", "3", "--grace", "1")
    # Three replies that fit the pool together (3 x 300 cells of 1024) and outlast the grace period.
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 300}
    ollama = {"model": "m", "prompt": body["prompt"], "options": {"num_predict": 300}}
    try:
        with ThreadPoolExecutor(2) as pool:
            whole = pool.submit(httpx.post, srv.url + "/v1/completions", json=body, timeout=60)
            lines_of = pool.submit(httpx.post, srv.url + "/api/generate", json=ollama, timeout=60)
            streamed = {**body, "stream": True}
            with httpx.stream("POST", srv.url + "/v1/completions", json=streamed, timeout=60) as s:
                lines = s.iter_lines()
                assert next(line for line in lines if line.startswith("data: "))
                srv.proc.send_signal(signal.SIGTERM)
                rest = [line for line in lines if line.startswith("data: ")]
            whole_r, ollama_r = whole.result(), lines_of.result()
        assert "data: [DONE]" not in rest and len(rest) < 299
        error = json.loads(rest[-1][6:])["error"]
        assert error["code"] == 503 and "--grace" in error["message"], error
        assert whole_r.status_code == 503 and "--grace" in whole_r.json()["error"]["message"], whole_r.text
        last = json.loads(ollama_r.text.strip().splitlines()[-1])
        assert "--grace" in last["error"], ollama_r.text[-300:]
        assert srv.proc.wait(60) == 0
        srv.stop()
        # One line when it started, one when it stopped: no traceback, no uvicorn log lines.
        assert len(srv.stderr_lines) == 2 and srv.stderr_lines[-1] == "llmcli: stopped", srv.stderr_lines
    finally:
        srv.stop()


def test_ctrl_c_stops_it_with_130(tmp_path, embedded_path):
    srv = ServeProcess(tmp_path, embedded_path, "--parallel", "1")
    try:
        srv.proc.send_signal(signal.SIGINT)
        assert srv.proc.wait(60) == 130
        srv.stop()
        assert srv.stderr_lines[-1].startswith("llmcli: stopped;"), srv.stderr_lines
    finally:
        srv.stop()


# -- --timeout -----------------------------------------------------------------------------------
def test_a_request_past_timeout_is_504_whole_or_an_error_event_streamed(tmp_path, embedded_path):
    srv = ServeProcess(tmp_path, embedded_path, "--parallel", "2", "--timeout", "1", "--token-limit", "5000")
    try:
        body = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8,", "max_tokens": 900}
        refused = 'llmcli:http_refusals_total{status="504"}'
        before = srv.metric(refused)
        whole = httpx.post(srv.url + "/v1/completions", json=body, timeout=60)
        assert whole.status_code == 504 and "--timeout" in whole.json()["error"]["message"]
        assert srv.metric(refused) == before + 1
        streamed = httpx.post(srv.url + "/v1/completions", json={**body, "stream": True}, timeout=60)
        last = streamed.text.strip().split("\n\n")[-1]
        assert last.startswith("data: ") and json.loads(last[6:])["error"]["code"] == 504
        assert srv.running_after() == 0
        # Both pay for what they generated until they were cut (against --token-limit), no more.
        assert srv.metric_when("llmcli:token_limit_settled_total", lambda n: n >= 2, absent=0) == 2
        generated = srv.metric("llmcli:generation_tokens_total")
        prompt = srv.metric("llmcli:prompt_tokens_total")
        assert 0 < generated < 2 * 900
        assert srv.metric("llmcli:token_limit_charged_tokens_total") == prompt + generated
    finally:
        assert srv.stop() == 0


# -- the terminal ---------------------------------------------------------------------------------
def test_on_a_terminal_a_live_status_line_shows_sequences_queue_and_requests(embedded_path):
    import re

    from tests.support.cli import cli_pty

    child = cli_pty("serve", embedded_path, "--port", "0", "-t", "1", "--ctx", "512", "--parallel", "1")
    try:
        child.expect(r"on (http://127\.0\.0\.1:\d+) ")
        url = child.match.group(1)
        child.expect(r"0 running · 0 waiting · [\d.,]+ tok/s · 0 done · KV 0%", timeout=60)
        httpx.post(url + "/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=60)
        child.expect(r"1 done", timeout=30)
        child.kill(signal.SIGTERM)
        child.expect("llmcli: stopped")
        child.wait()
        assert child.exitstatus == 0
        assert not re.search(r"Traceback|error", child.before or "")
    finally:
        child.terminate(force=True)
