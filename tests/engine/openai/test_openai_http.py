"""The OpenAI-compatible client's pieces: endpoint URLs, SSE framing, error lines, the key's safety."""

from __future__ import annotations

import io

import pytest

from llmcli.engine.openai.client import Endpoint, http_error, server_message
from llmcli.engine.openai.models import RemoteModel, pick_model
from llmcli.engine.openai.session import request_body
from llmcli.engine.openai.sse import sse_events
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import ExitStatus, UsageError

KEY = "sk-unit-secret"


@pytest.mark.parametrize(
    "given,base",
    [
        ("http://localhost:8000", "http://localhost:8000/v1"),
        ("http://localhost:8000/", "http://localhost:8000/v1"),
        ("http://localhost:8000/v1/", "http://localhost:8000/v1"),
        ("http://localhost:8000/v1/chat/completions", "http://localhost:8000/v1"),
        ("https://api.example.com/openai/v1/models", "https://api.example.com/openai/v1"),
        (" http://[::1]:9000/v1 ", "http://[::1]:9000/v1"),
    ],
)
def test_endpoint_urls_are_normalised_to_the_api_base(given, base):
    assert Endpoint.parse(given).base_url == base


@pytest.mark.parametrize(
    "bad", ["localhost:8000", "ftp://h/v1", "http://", "http://h:x/v1", "http://u:pw@h/v1"]
)
def test_bad_endpoint_urls_are_usage_errors(bad):
    with pytest.raises(UsageError, match="--endpoint"):
        Endpoint.parse(bad)


def test_endpoint_and_key_come_from_the_environment():
    from llmcli.environment import Environment

    env = Environment(vars={"LLMCLI_ENDPOINT": "http://h:1", "LLMCLI_API_KEY": KEY})
    ep = Endpoint.from_options(env.endpoint, None, default_api_key=env.api_key)
    assert ep.base_url == "http://h:1/v1" and ep.api_key == KEY
    assert (
        Endpoint.from_options(env.endpoint, "sk-option", default_api_key=env.api_key).api_key == "sk-option"
    )
    env = Environment(vars={"LLMCLI_API_KEY": KEY})
    # no server: the local engine, key or not in the env
    assert Endpoint.from_options(env.endpoint, None, default_api_key=env.api_key) is None


def test_the_key_stays_out_of_reprs_and_messages():
    ep = Endpoint.parse("http://h:1/v1", KEY)
    assert KEY not in repr(ep) and KEY not in str(ep)
    assert ep.headers()["Authorization"] == f"Bearer {KEY}"
    echoed = f'{{"error": {{"message": "bad key {KEY}"}}}}'.encode()
    for status in (400, 401, 404, 500):
        assert KEY not in str(http_error(ep, status, "X", echoed, what="POST /chat/completions"))


@pytest.mark.parametrize(
    "status,code,words",
    [
        (401, ExitStatus.USAGE, "rejected the API key"),
        (403, ExitStatus.USAGE, "rejected the API key"),
        (400, ExitStatus.USAGE, "context too long"),
        (429, ExitStatus.ERROR, "busy"),
        (500, ExitStatus.ERROR, "context too long"),
        (503, ExitStatus.ERROR, "context too long"),
    ],
)
def test_http_statuses_map_to_exit_codes(status, code, words):
    err = http_error(
        Endpoint.parse("http://h/v1", KEY),
        status,
        "Reason",
        b'{"error": {"message": "context too long"}}',
        what="POST /chat/completions",
    )
    assert err.exit_status == code and words in str(err) and "\n" not in str(err)


def test_server_messages_from_the_usual_shapes():
    assert server_message(b'{"error": {"message": "m1"}}') == "m1"
    assert server_message(b'{"detail": "m2"}') == "m2"
    assert server_message(b'{"error": "m3"}') == "m3"
    assert server_message(b"plain\ntext ") == "plain text"
    assert server_message(b"x" * 1000).endswith("…")


class _Body(io.BytesIO):
    """Feeds the SSE parser in fixed-size reads, as a socket would."""

    def __init__(self, data: bytes, size: int) -> None:
        super().__init__(data)
        self.size = size

    def read1(self, n: int = -1) -> bytes:
        return self.read(self.size)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 4096])
def test_sse_framing_survives_any_read_boundary(size):
    text = (
        'data: {"a": "中文"}\r\n\r\n: ping\n\ndata: x\rdata: y\r\r'
        'event: error\ndata: {"error": 1}\n\ndata: [DONE]\n\n'
    )
    body = _Body(text.encode("utf-8"), size)
    events = list(sse_events(body.read1))
    assert events == [
        ("message", '{"a": "中文"}'),
        ("message", "x\ny"),
        ("error", '{"error": 1}'),
        ("message", "[DONE]"),
    ]


def test_pick_model():
    ep = Endpoint.parse("http://h/v1")
    models = [RemoteModel("meta-llama/Llama-3.1-8B-Instruct"), RemoteModel("meta-llama/Llama-3.1-70B")]
    assert pick_model(ep, models[:1], None) == models[0].id
    assert pick_model(ep, models, "meta-llama/Llama-3.1-7") == models[1].id  # an unambiguous prefix
    for spec, words in ((None, "pick one with -m"), ("meta", "matches 2"), ("qwen", "has no model 'qwen'")):
        with pytest.raises(UsageError, match=words):
            pick_model(ep, models, spec)


def test_request_body_sends_extensions_only_when_changed():
    plain = request_body("m", [], SamplingParams(seed=None), [])
    assert set(plain) == {
        "model",
        "messages",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "max_tokens",
    }
    tuned = request_body("m", [], SamplingParams(repeat_penalty=1.1, min_p=0.0), ["a", "b", "c", "d", "e"])
    assert tuned["repeat_penalty"] == tuned["repetition_penalty"] == 1.1 and tuned["min_p"] == 0.0
    assert tuned["stop"] == ["a", "b", "c", "d"]  # the API's limit; the fifth is applied client-side


SSE_HANG_GUARD_S = 20  # a hang guard, not a speed test: this takes well under 2 s (benchmarks/sse_framing.py)


def test_sse_framing_reads_a_line_up_to_the_bound_and_refuses_one_past_it():
    import time

    from llmcli.engine.openai.sse import EventTooLong

    line = b"data: " + b"a" * ((1 << 20) - 100) + b"\n\n"  # just under the bound, in 1 KiB reads
    start = time.monotonic()
    events = list(sse_events(_Body(line, 1024).read1))
    assert events == [("message", "a" * ((1 << 20) - 100))] and time.monotonic() - start < SSE_HANG_GUARD_S
    with pytest.raises(EventTooLong, match="a line over 1 MiB"):
        list(sse_events(_Body(b"data: " + b"a" * (2 << 20), 65536).read1))
    many = b"".join(b"data: " + b"b" * 1000 + b"\n" for _ in range(2000)) + b"\n"  # 2 MB in one event
    with pytest.raises(EventTooLong, match="an event over 1 MiB"):
        list(sse_events(_Body(many, 65536).read1))


def test_a_cr_lf_split_across_reads_is_one_line_end():
    body = _Body(b"data: a\r\ndata: b\r\n\r\n", 8)  # the first \r ends a read, its \n opens the next
    assert list(sse_events(body.read1)) == [("message", "a\nb")]


def test_the_key_is_masked_before_a_message_is_cut():
    ep = Endpoint.parse("http://h/v1", KEY)
    for at in range(280, 310):
        shown = ep.shown("x" * at + KEY + " tail")
        assert KEY[:4] not in shown and len(shown) <= 301
    assert ep.shown(f"a\x1b[31m{KEY}\x1b[0m\nb\u202ec\x07") == "a*** bc"
    # control characters cannot split the key past the mask either
    assert KEY[:4] not in ep.shown(KEY[:5] + "\x00\u200b" + KEY[5:])


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), 1e10])
def test_a_timeout_out_of_range_is_a_usage_error(timeout):
    with pytest.raises(UsageError, match="--timeout"):
        Endpoint.parse("http://h/v1", timeout=timeout)


def test_the_reply_deadline_grows_with_timeout_and_max_tokens():
    ep = Endpoint.parse("http://h/v1", timeout=10)
    assert ep.reply_deadline(100) == 20 and ep.reply_deadline(1000) == 110
    assert ep.reply_deadline(None) == 10 * (1 + 4096 / 100)


def test_chunks_are_checked_and_reports_keep_only_numbers():
    from llmcli.engine.openai.chunks import BadChunk, check_chunk

    chunk = check_chunk(
        {
            "id": "x",
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "hi\ud800"}, "finish_reason": None}
            ],
            "usage": {
                "completion_tokens": 3.0,
                "prompt_tokens": None,
                "note": KEY,
                "prompt_tokens_details": {"cached_tokens": 2},
                "extra": {"n": 1, "s": KEY},
            },
            "timings": {"prompt_ms": 1.5, "who": KEY},
        }
    )
    assert chunk == {
        "choices": [{"delta": {"content": "hi\ufffd"}, "finish_reason": None}],
        "usage": {"completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 2}, "extra": {"n": 1}},
        "timings": {"prompt_ms": 1.5},
    }
    assert check_chunk({"choices": None, "usage": None}) == {}
    for bad in (
        {"choices": {}},
        {"choices": [{"delta": "x"}]},
        {"usage": {"total_tokens": True}},
        {"timings": {"predicted_n": 1.5}},
        7,
    ):
        with pytest.raises(BadChunk):
            check_chunk(bad)


def test_the_token_budget_counts_chunks_usage_and_length():
    from llmcli.engine.openai.chunks import TokenBudget

    def text(t: str, **extra) -> dict:
        return {"choices": [{"delta": {"content": t}, "finish_reason": None}], **extra}

    budget = TokenBudget(3, 10)
    assert [budget.spent(text("a")) for _ in range(4)] == [False, False, False, True]
    assert not TokenBudget(3, 10).spent(
        {"choices": [], "usage": {"completion_tokens": 9}}
    )  # no text: not cut
    assert TokenBudget(3, 10).spent(text("a", usage={"completion_tokens": 4}))
    assert TokenBudget(3, 10).spent(text("a" * 31))  # far more text than 3 tokens hold
    assert not TokenBudget(None, 10).spent(text("a" * 1000))
