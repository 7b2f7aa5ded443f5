"""The OpenAI-compatible client's pieces: endpoint URLs, SSE framing, error lines, the key's safety."""

from __future__ import annotations

import io

import pytest

from llmcli.engine.openai_http import (
    Endpoint,
    RemoteModel,
    http_error,
    pick_model,
    server_message,
)
from llmcli.engine.remote import request_body
from llmcli.engine.sse import sse_events
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import ExitStatus, UsageError

KEY = "sk-unit-secret"


@pytest.mark.parametrize("given,base", [
    ("http://localhost:8000", "http://localhost:8000/v1"),
    ("http://localhost:8000/", "http://localhost:8000/v1"),
    ("http://localhost:8000/v1/", "http://localhost:8000/v1"),
    ("http://localhost:8000/v1/chat/completions", "http://localhost:8000/v1"),
    ("https://api.example.com/openai/v1/models", "https://api.example.com/openai/v1"),
    (" http://[::1]:9000/v1 ", "http://[::1]:9000/v1"),
])
def test_endpoint_urls_are_normalised_to_the_api_base(given, base):
    assert Endpoint.parse(given).base_url == base


@pytest.mark.parametrize("bad", ["localhost:8000", "ftp://h/v1", "http://", "http://h:x/v1", "http://u:pw@h/v1"])
def test_bad_endpoint_urls_are_usage_errors(bad):
    with pytest.raises(UsageError, match="--endpoint"):
        Endpoint.parse(bad)


def test_endpoint_and_key_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("LLMCLI_ENDPOINT", "http://h:1")
    monkeypatch.setenv("LLMCLI_API_KEY", KEY)
    ep = Endpoint.from_options(None)
    assert ep.base_url == "http://h:1/v1" and ep.api_key == KEY
    assert Endpoint.from_options(None, "sk-option").api_key == "sk-option"  # the option wins
    monkeypatch.delenv("LLMCLI_ENDPOINT")
    assert Endpoint.from_options(None) is None  # no server: the local engine, key or not in the env


def test_the_key_stays_out_of_reprs_and_messages():
    ep = Endpoint.parse("http://h:1/v1", KEY)
    assert KEY not in repr(ep) and KEY not in str(ep)
    assert ep.headers()["Authorization"] == f"Bearer {KEY}"
    echoed = f'{{"error": {{"message": "bad key {KEY}"}}}}'.encode()
    for status in (400, 401, 404, 500):
        assert KEY not in str(http_error(ep, status, "X", echoed, what="POST /chat/completions"))


@pytest.mark.parametrize("status,code,words", [
    (401, ExitStatus.USAGE, "rejected the API key"),
    (403, ExitStatus.USAGE, "rejected the API key"),
    (400, ExitStatus.USAGE, "context too long"),
    (429, ExitStatus.ERROR, "busy"),
    (500, ExitStatus.ERROR, "context too long"),
    (503, ExitStatus.ERROR, "context too long"),
])
def test_http_statuses_map_to_exit_codes(status, code, words):
    err = http_error(Endpoint.parse("http://h/v1", KEY), status, "Reason", b'{"error": {"message": "context too long"}}',
                     what="POST /chat/completions")
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
    text = ('data: {"a": "中文"}\r\n\r\n: ping\n\ndata: x\rdata: y\r\r'
            'event: error\ndata: {"error": 1}\n\ndata: [DONE]\n\n')
    body = _Body(text.encode("utf-8"), size)
    events = list(sse_events(body.read1))
    assert events == [("message", '{"a": "中文"}'), ("message", "x\ny"), ("error", '{"error": 1}'),
                      ("message", "[DONE]")]


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
    assert set(plain) == {"model", "messages", "stream", "stream_options", "temperature", "top_p", "max_tokens"}
    tuned = request_body("m", [], SamplingParams(repeat_penalty=1.1, min_p=0.0), ["a", "b", "c", "d", "e"])
    assert tuned["repeat_penalty"] == tuned["repetition_penalty"] == 1.1 and tuned["min_p"] == 0.0
    assert tuned["stop"] == ["a", "b", "c", "d"]  # the API's limit; the fifth is applied client-side
