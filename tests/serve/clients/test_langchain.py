"""langchain-openai's ChatOpenAI against the server: `bind_tools` and
`with_structured_output(method="function_calling")`, read back as langchain's own messages."""

from __future__ import annotations

from typing import Annotated, Literal

import jsonschema
import pytest
from pydantic import Field

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER, WEATHER_PARAMETERS
from tests.serve.server import KEY
from tests.support.deps import require


@pytest.fixture(scope="module")
def chat(server):
    langchain_openai = require("langchain_openai")
    return langchain_openai.ChatOpenAI(
        model=EMBEDDED_NAME, base_url=server.url + "/v1", api_key=KEY, max_retries=0, max_tokens=96
    )


def test_bind_tools_gives_an_ai_message_whose_tool_call_runs_the_tool(chat):
    from langchain_core.tools import tool

    ran = []

    @tool
    def get_weather(
        city: Annotated[str, Field(max_length=40)], unit: Literal["celsius", "fahrenheit"]
    ) -> str:
        """The current weather in a city."""
        ran.append((city, unit))
        return "sunny, 21 degrees"

    # "required" (langchain also spells it "any"): the 135M model seldom calls a tool on its own.
    model = chat.bind_tools([get_weather], tool_choice="required")
    message = model.invoke(ASK_WEATHER)
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert message.tool_calls and not message.invalid_tool_calls, message
    call = message.tool_calls[0]
    assert call["name"] == "get_weather" and call["id"] and call["type"] == "tool_call"
    jsonschema.validate(call["args"], WEATHER_PARAMETERS)

    result = get_weather.invoke(call)  # a ToolMessage answering that call
    assert ran == [(call["args"]["city"], call["args"]["unit"])]
    assert result.tool_call_id == call["id"] and result.content == "sunny, 21 degrees"

    # Streamed, the chunks add up to the same call.
    chunks = list(model.stream(ASK_WEATHER))
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [
        (c["name"], c["args"]) for c in message.tool_calls
    ]


def test_with_structured_output_by_function_calling_gives_the_model_object(chat):
    from pydantic import BaseModel

    class Weather(BaseModel):
        """The weather asked about."""

        city: str = Field(max_length=40)
        unit: Literal["celsius", "fahrenheit"]

    # langchain names the function in tool_choice here, so the server holds the reply to that call.
    structured = chat.with_structured_output(Weather, method="function_calling", include_raw=True)
    out = structured.invoke(ASK_WEATHER)
    assert out["parsing_error"] is None and isinstance(out["parsed"], Weather), out
    (call,) = out["raw"].tool_calls
    assert call["name"] == "Weather" and call["args"] == out["parsed"].model_dump()
