"""openai-agents (the Agents SDK) on its Chat Completions model against the server: an agent runs its
function tool on the arguments of the server's call, feeds the result back and ends with text."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER
from tests.serve.server import KEY
from tests.support.deps import require


def test_an_agents_sdk_agent_runs_its_function_tool_and_answers(server, openai_module):
    agents = require("agents")

    agents.set_tracing_disabled(True)  # its traces would otherwise be uploaded to OpenAI
    ran = []

    @agents.function_tool
    def get_weather(
        city: Annotated[str, Field(max_length=40)], unit: Literal["celsius", "fahrenheit"]
    ) -> str:
        """The current weather in a city."""
        ran.append({"city": city, "unit": unit})
        return "sunny, 21 degrees"

    client = openai_module.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)
    agent = agents.Agent(
        name="weather",
        instructions="You answer questions about the weather.",
        tools=[get_weather],
        model=agents.OpenAIChatCompletionsModel(model=EMBEDDED_NAME, openai_client=client),
        # "required": the 135M model seldom calls a tool on its own. The SDK sets tool_choice back to
        # its default once the tool has run (reset_tool_choice), so the second turn may answer.
        model_settings=agents.ModelSettings(tool_choice="required", max_tokens=96),
    )
    result = agents.Runner.run_sync(agent, ASK_WEATHER[0]["content"], max_turns=3)
    calls = [item for item in result.new_items if isinstance(item, agents.ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, agents.ToolCallOutputItem)]
    assert len(calls) == len(outputs) == 1, result.new_items
    assert calls[0].raw_item.name == "get_weather"
    assert ran == [json.loads(calls[0].raw_item.arguments)]
    assert outputs[0].output == "sunny, 21 degrees"
    assert isinstance(result.final_output, str) and result.final_output.strip()
