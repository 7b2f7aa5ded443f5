"""pydantic-ai's OpenAI chat model against the server: an agent with one tool runs the tool on the
arguments the server's call carried, sends its result back, and ends with a text answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER
from tests.serve.server import KEY
from tests.support.deps import require


def test_a_pydantic_ai_agent_runs_its_tool_and_answers_from_the_result(server):
    pydantic_ai = require("pydantic_ai")
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    @dataclass
    class CallFirst(AbstractCapability):
        """The first request forces the tool (pydantic-ai sends it as "required", its only tool), the
        ones after its result ask for text ("none"): the 135M model seldom calls a tool on its own,
        and pydantic-ai refuses a "required" for the whole run (it could never end). This is how its
        docs force a tool on one step."""

        tool: str

        def get_model_settings(self):
            def settings(ctx):
                answered = any(isinstance(p, ToolReturnPart) for m in ctx.messages for p in m.parts)
                return {"tool_choice": "none" if answered else [self.tool]}

            return settings

    provider = OpenAIProvider(base_url=server.url + "/v1", api_key=KEY)
    agent = pydantic_ai.Agent(
        OpenAIChatModel(EMBEDDED_NAME, provider=provider),
        instructions="You answer questions about the weather.",
        capabilities=[CallFirst("get_weather")],
        model_settings={"max_tokens": 96},
    )
    ran = []

    @agent.tool_plain
    def get_weather(
        city: Annotated[str, Field(max_length=40)], unit: Literal["celsius", "fahrenheit"]
    ) -> str:
        """The current weather in a city."""
        ran.append({"city": city, "unit": unit})
        return "sunny, 21 degrees"

    result = agent.run_sync(ASK_WEATHER[0]["content"])
    parts = [part for message in result.all_messages() for part in message.parts]
    calls = [part for part in parts if isinstance(part, ToolCallPart)]
    returns = [part for part in parts if isinstance(part, ToolReturnPart)]
    assert [call.tool_name for call in calls] == ["get_weather"], parts
    assert ran == [calls[0].args_as_dict()]
    assert [r.tool_call_id for r in returns] == [calls[0].tool_call_id] and returns[
        0
    ].content == "sunny, 21 degrees"
    assert isinstance(result.output, str) and result.output.strip()
