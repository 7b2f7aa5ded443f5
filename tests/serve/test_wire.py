"""Each dialect's reply shapes (serve/openai/wire.py, serve/ollama/wire.py) as pure functions of what a
call yields, without a server: chunks, finishing entries, whole replies, calls, usage and durations."""

from __future__ import annotations

import json

import pytest
from sse_starlette import ServerSentEvent

from llmcli.engine.templates.thinking import ANSWER, REASONING
from llmcli.engine.tools import CallDelta, ToolCall
from llmcli.serve.errors import ApiError
from llmcli.serve.ollama import wire as ollama
from llmcli.serve.openai import wire as openai
from llmcli.serve.outcome import Outcome
from llmcli.serve.reply import CALL, Ending, Piece, Reply

TEXTS = ["Hello", ' "quoted" \\ back', "naïve 日本 😀", "\x00\x1f", "", "\n\t", '"}]}']
WEATHER = ToolCall("get_weather", {"city": "Paris"}, "call_1")


def outcome(reason: str = "stop", **ms: float) -> Outcome:
    return Outcome(
        finish_reason=reason,
        prompt_tokens=12,
        cached_tokens=4,
        prefill_tokens=8,
        completion_tokens=3,
        access_ms=1.0,
        load_ms=ms.get("load_ms", 0.0),
        tokenize_ms=2.0,
        queue_ms=0.5,
        prefill_ms=ms.get("prefill_ms", 30.0),
        decode_ms=ms.get("decode_ms", 20.0),
        ttft_ms=40.0,
        release_ms=0.1,
    )


def head(chat: bool) -> openai.Head:
    return openai.Head(
        chat, "chatcmpl-x" if chat else "cmpl-x", 1700000000, 'model "x" \x00 ü', "fp_0123456789"
    )


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
def test_a_plain_chunk_is_the_json_of_its_envelope_byte_for_byte(chat):
    h, frames = head(chat), {}
    for choice in (0, 1):
        for kind in (ANSWER, REASONING):
            for text in TEXTS:
                piece = Piece(kind, text, choice)
                whole = json.dumps(openai.envelope(h, [openai.piece_choice(h, piece, None)], True))
                assert openai.plain_chunk(h, piece, frames) == whole
                assert openai.sse(whole) == ServerSentEvent(whole, sep="\n").encode()
    assert len(frames) == 4  # one frame per choice and kind, reused for every text


def test_a_chat_chunk_names_its_kind_and_a_completion_its_text():
    chunk = openai.envelope(head(True), [openai.piece_choice(head(True), Piece(REASONING, "hm"), None)], True)
    assert chunk["object"] == "chat.completion.chunk" and chunk["choices"][0]["delta"] == {
        "reasoning_content": "hm"
    }
    text = openai.envelope(head(False), [openai.piece_choice(head(False), Piece(ANSWER, "a"), None)], True)
    assert text["object"] == "text_completion" and text["choices"][0]["text"] == "a"


def test_a_call_streams_its_id_and_name_first_then_its_arguments():
    first = openai.piece_choice(head(True), Piece(CALL, "", 0, CallDelta(0, "call_1", "f", '{"a"')), None)
    more = openai.piece_choice(head(True), Piece(CALL, "", 0, CallDelta(0, None, None, ": 1}")), None)
    assert first["delta"]["tool_calls"] == [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a"'}}
    ]
    assert more["delta"]["tool_calls"] == [{"index": 0, "function": {"arguments": ": 1}"}}]


@pytest.mark.parametrize(
    "reason,calls,expected",
    [
        ("stop", (), "stop"),
        ("cancelled", (), "stop"),
        ("stop", (WEATHER,), "tool_calls"),
        ("length", (WEATHER,), "length"),
    ],
)
def test_the_finish_reason_comes_from_the_engine_and_the_calls(reason, calls, expected):
    assert Ending(outcome(reason), calls).finish_reason == expected


def test_a_whole_reply_with_calls_has_null_content_and_the_dropped_calls_reason():
    ending = Ending(outcome(), (WEATHER,), "the arguments are not JSON")
    choice = openai.whole_choice(head(True), 0, Reply("", "thought", ending), None)
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "thought",
        "tool_calls": [openai.calls((WEATHER,))[0]],
    }
    assert (
        choice["finish_reason"] == "tool_calls"
        and choice["malformed_tool_call"] == "the arguments are not JSON"
    )
    assert openai.calls((WEATHER,))[0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
    }
    last = openai.last_choice(head(True), 1, ending, None)
    assert last == {
        "index": 1,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
        "malformed_tool_call": "the arguments are not JSON",
    }


def test_a_whole_body_carries_usage_and_timings_after_its_choices():
    body = openai.whole(head(True), [], outcome(), {"t": 1})
    assert list(body)[-3:] == ["choices", "usage", "timings"]
    assert body["usage"] == {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    assert openai.usage_chunk(head(True), outcome())["choices"] == []


def test_a_mid_stream_error_is_each_dialects_error_shape():
    exc = ApiError(504, "took too long")
    assert openai.failed(exc)["error"]["message"] == "took too long"
    assert ollama.failed(exc) == {"error": "took too long"}


def test_ollamas_last_object_reports_the_load_as_load_duration_in_nanoseconds():
    h = ollama.Head(True, ollama.tagged("smol"))
    last = ollama.final(h, Ending(outcome(load_ms=250.0)), total_ms=400.0, timings={"load_ms": 250.0})
    assert last["model"] == "smol:latest" and last["done"] is True and last["done_reason"] == "stop"
    assert last["load_duration"] == 250_000_000 and last["total_duration"] == 400_000_000
    assert last["prompt_eval_duration"] == 30_000_000 and last["eval_count"] == 3
    assert last["timings"] == {"load_ms": 250.0}


def test_ollamas_whole_reply_gives_calls_arguments_as_an_object():
    h = ollama.Head(True, "m:latest")
    last = ollama.final(h, Ending(outcome(), (WEATHER,)), 1.0, {}, whole=True)
    assert last["message"]["tool_calls"] == [
        {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    ]
    assert ollama.call_line(h, WEATHER)["message"]["tool_calls"] == last["message"]["tool_calls"]
    generate = ollama.line(ollama.Head(False, "m:latest"), REASONING, "hm")
    assert generate["response"] == "" and generate["thinking"] == "hm" and generate["done"] is False
    assert ollama.loaded(h, True)["done_reason"] == "unload"
