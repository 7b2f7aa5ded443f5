"""The ollama package's `tools` against the server's /api/chat: the call comes back in Ollama's shape
(arguments as an object), and its result goes back in as a `tool` message."""

from __future__ import annotations

import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_JSON, WEATHER, assert_call_fits
from tests.serve.server import AUTH

# Ollama's API has no tool_choice: the model decides ("auto"). The 135M model opens a call when the
# system prompt shows the generic form's JSON and the question asks for JSON (ASK_JSON); once its
# reply opens with `{`, the server's grammar holds it to a valid call.
# (The ollama package sends the schema without `maxLength`: its Tool type has no such field.)


@pytest.fixture(scope="module")
def ollama(server, ollama_module):
    return ollama_module.Client(host=server.url, headers=AUTH)


def test_ollama_tools_give_a_call_with_arguments_as_an_object_and_take_its_result(ollama):
    options = {"num_predict": 96}
    reply = ollama.chat(model=EMBEDDED_NAME, messages=ASK_JSON, tools=[WEATHER], options=options)
    calls = reply.message.tool_calls
    assert calls, reply.message
    for call in calls:
        assert isinstance(call.function.arguments, dict)
        assert_call_fits(call.function.name, dict(call.function.arguments))
    assert not reply.message.content and reply.done_reason == "stop"

    streamed = [
        part.message.tool_calls
        for part in ollama.chat(
            model=EMBEDDED_NAME, messages=ASK_JSON, tools=[WEATHER], options=options, stream=True
        )
        if part.message.tool_calls
    ]
    assert [c for part in streamed for c in part] == calls

    result = {"role": "tool", "tool_name": calls[0].function.name, "content": "sunny, 21 degrees"}
    history = [*ASK_JSON, reply.message, result]
    answer = ollama.chat(model=EMBEDDED_NAME, messages=history, options={"num_predict": 16})
    assert answer.message.content.strip() and not answer.message.tool_calls
