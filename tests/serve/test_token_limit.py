"""--token-limit: a request reserves its prompt and its max_tokens against its key's minute before it
runs (429 with Retry-After when that does not fit), and pays what it used however it ends: finished,
closed by its client mid-stream, or cut by --timeout. The keys come from a file that starts with a
byte order mark, as some editors write it."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from llmcli.serve.gate import CHARS_PER_TOKEN
from tests.serve.server import ServeProcess

LIMIT = 50  # prompt + reply tokens a minute, per key
# One a test: each key has its own minute. The first is the one a byte order mark would hide.
KEYS = (
    "sk-first", "sk-crowd", "sk-stream", "sk-over", "sk-never", "sk-default", "sk-bystander", "sk-choices",
    "sk-hint", "sk-hint3", "sk-hint-ollama", "sk-hint-responses",
)  # fmt: skip
COUNT = "1, 2, 3,"  # a completion prompt the model goes on counting from, for as long as it is let
SETTLED = "llmcli:token_limit_settled_total"
CHARGED = "llmcli:token_limit_charged_tokens_total"
PROMPT_TOKENS = "llmcli:prompt_tokens_total"
GENERATED = "llmcli:generation_tokens_total"


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-tokens")
    key_file = home / "keys.txt"
    key_file.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(KEYS).encode() + b"\r\n")  # a BOM and CRLF
    srv = ServeProcess(
        home,
        embedded_path,
        "--parallel", "4", "--max-queue", "8", "--api-key-file", str(key_file),
        "--token-limit", str(LIMIT),
    )  # fmt: skip
    yield srv
    assert srv.stop() == 0


def auth(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def complete(server, key: str, prompt: str = COUNT, **extra) -> httpx.Response:
    body = {"prompt": prompt, "max_tokens": 4, **extra}
    return httpx.post(server.url + "/v1/completions", json=body, headers=auth(key), timeout=60)


def counters(server) -> dict[str, float]:
    return {name: server.metric(name, auth(KEYS[0])) for name in (SETTLED, CHARGED, PROMPT_TOKENS, GENERATED)}


def test_the_first_key_of_a_file_with_a_byte_order_mark_is_accepted(server):
    assert httpx.get(server.url + "/v1/models", headers=auth(KEYS[0])).status_code == 200


def test_concurrent_requests_spend_at_most_the_limit(server):
    # Each reserves ~4 prompt tokens and 8 reply tokens: four fit in 50, eight at once would not.
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _: complete(server, KEYS[1], "Say hello.", max_tokens=8), range(8)))
    ok = [r for r in answers if r.status_code == 200]
    over = [r for r in answers if r.status_code == 429]
    assert len(ok) + len(over) == 8, [r.text for r in answers]
    assert ok and over
    assert sum(r.json()["usage"]["total_tokens"] for r in ok) <= LIMIT
    for r in over:
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert f"over {LIMIT} tokens a minute for this key" in r.json()["error"]["message"]
    # the same request from another key, which has spent nothing: its own minute is untouched
    assert complete(server, KEYS[6], "Say hello.", max_tokens=8).status_code == 200


def test_a_stream_its_client_closes_pays_what_it_generated(server):
    before = counters(server)
    body = {"prompt": COUNT, "max_tokens": 30, "stream": True}
    with httpx.stream(
        "POST", server.url + "/v1/completions", json=body, headers=auth(KEYS[2]), timeout=60
    ) as stream:
        lines = stream.iter_lines()
        for _ in range(2):  # two tokens, then the client leaves
            assert json.loads(next(line for line in lines if line.startswith("data: "))[6:])["choices"]
    after = server.metric_when(SETTLED, lambda n: n >= before[SETTLED] + 1, auth(KEYS[0]), absent=0)
    assert after == before[SETTLED] + 1
    now = counters(server)
    prompt, generated = now[PROMPT_TOKENS] - before[PROMPT_TOKENS], now[GENERATED] - before[GENERATED]
    assert generated >= 2 and now[CHARGED] - before[CHARGED] == prompt + generated
    # What is left of the minute is LIMIT - prompt - generated: a request of the same prompt whose
    # max_tokens is one more than fits is refused, and one that fits exactly is answered.
    fits = int(LIMIT - 2 * prompt - generated)
    assert fits >= 1, (prompt, generated)
    refused = complete(server, KEYS[2], max_tokens=fits + 1)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert f"{int(LIMIT - prompt - generated)} are left" in refused.json()["error"]["message"]
    assert complete(server, KEYS[2], max_tokens=fits).status_code == 200


def test_a_request_its_exact_prompt_puts_over_is_refused_and_costs_nothing(server):
    first = complete(server, KEYS[3], max_tokens=20)
    assert first.status_code == 200, first.text
    prompt, spent = first.json()["usage"]["prompt_tokens"], first.json()["usage"]["total_tokens"]
    estimate = len(COUNT) // CHARS_PER_TOKEN
    assert prompt > estimate  # so the estimate admits what the exact count does not
    left = LIMIT - spent
    r = complete(server, KEYS[3], max_tokens=left - estimate)
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert f"its prompt ({prompt}) and its max_tokens ({left - estimate})" in r.json()["error"]["message"]
    # It took nothing from the minute: a request of exactly what is left is answered.
    assert complete(server, KEYS[3], max_tokens=left - prompt).status_code == 200


@pytest.mark.parametrize(
    "extra,words",
    [
        (
            {"max_tokens": LIMIT},
            "its max_tokens (50), over this key's 50 tokens a minute; send max_tokens of at most",
        ),
        ({"prompt": "word " * 300}, "send a shorter prompt"),
    ],
)
def test_a_request_that_could_never_fit_is_429_without_retry_after(server, extra, words):
    r = complete(server, KEYS[4], **extra)
    assert r.status_code == 429 and "retry-after" not in r.headers
    assert words in r.json()["error"]["message"]


def test_a_chat_without_max_tokens_reserves_the_server_cap_and_is_told_to_send_one(server):
    body = {"messages": [{"role": "user", "content": "Say hello."}]}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, headers=auth(KEYS[5]), timeout=60)
    assert r.status_code == 429 and "retry-after" not in r.headers
    message = r.json()["error"]["message"]
    assert "the server's --max-tokens (" in message and "send max_tokens of at most" in message
    body["max_tokens"] = 4
    r = httpx.post(server.url + "/v1/chat/completions", json=body, headers=auth(KEYS[5]), timeout=60)
    assert r.status_code == 200, r.text


def test_n_choices_reserve_n_times_max_tokens_and_pay_the_prompt_once(server):
    key = KEYS[7]
    # ~2 prompt tokens (estimated) + 3 x 20 = 62: over the whole minute, however long one waits
    r = complete(server, key, max_tokens=20, n=3)
    assert r.status_code == 429 and "retry-after" not in r.headers, r.text
    error = r.json()["error"]
    assert "x 3 choices" in error["message"] and error["param"] == "max_tokens"
    assert re.search(r"send max_tokens of at most \d+$", error["message"]), error
    before = counters(server)
    r = complete(server, key, max_tokens=6, n=2)
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    # the call settles as it closes, which may come just after its client has the answer
    server.metric_when(SETTLED, lambda n: n >= before[SETTLED] + 1, auth(KEYS[0]), absent=0)
    after = counters(server)
    assert after[CHARGED] - before[CHARGED] == usage["total_tokens"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert after[PROMPT_TOKENS] - before[PROMPT_TOKENS] == usage["prompt_tokens"]


@pytest.mark.parametrize(("n", "key"), [(1, KEYS[8]), (3, KEYS[9])])
def test_the_max_tokens_a_429_hints_at_is_accepted(server, n, key):
    """The hint comes from the tokenized prompt: one from the estimate (chars / 4) was refused again
    once the template's tokens were counted."""
    body = {"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": LIMIT, "n": n}
    post = lambda: httpx.post(  # noqa: E731
        server.url + "/v1/chat/completions", json=body, headers=auth(key), timeout=60
    )
    r = post()
    assert r.status_code == 429 and "retry-after" not in r.headers, r.text
    hint = int(re.search(r"send max_tokens of at most (\d+)$", r.json()["error"]["message"])[1])
    body["max_tokens"] = hint
    r = post()
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["total_tokens"] <= LIMIT


def test_the_hint_on_ollamas_route_names_its_field_and_is_accepted(server):
    body = {"model": "m", "prompt": "Say hello.", "stream": False, "options": {"num_predict": LIMIT}}
    post = lambda: httpx.post(server.url + "/api/generate", json=body, headers=auth(KEYS[10]), timeout=60)  # noqa: E731
    r = post()
    assert r.status_code == 429, r.text
    error = r.json()["error"]
    assert f"its options.num_predict ({LIMIT})" in error, error
    hint = int(re.search(r"send options.num_predict of at most (\d+)$", error)[1])
    body["options"]["num_predict"] = hint
    assert post().status_code == 200


def test_the_hint_on_the_responses_route_names_max_output_tokens_and_is_accepted(server):
    body = {"model": "m", "input": "Say hello.", "max_output_tokens": LIMIT}
    post = lambda: httpx.post(server.url + "/v1/responses", json=body, headers=auth(KEYS[11]), timeout=60)  # noqa: E731
    r = post()
    assert r.status_code == 429, r.text
    error = r.json()["error"]["message"]
    assert f"its max_output_tokens ({LIMIT})" in error, error
    hint = int(re.search(r"send max_output_tokens of at most (\d+)$", error)[1])
    body["max_output_tokens"] = hint
    assert post().status_code == 200
