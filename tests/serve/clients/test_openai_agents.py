"""openai-agents (the Agents SDK) on its Chat Completions model against the server: an agent runs its
function tool on the arguments of the server's call, and the conversation, with the call and its
result in it, goes on to a text answer."""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import Field

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER
from tests.serve.server import KEY
from tests.support.deps import require


def test_an_agents_sdk_agent_runs_its_function_tool_and_the_conversation_goes_on(server, openai_module):
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
        # "required": the 135M model seldom calls a tool on its own, and once it has seen a call it
        # calls again whenever it may; so the run stops at the tool's result, and one call only.
        model_settings=agents.ModelSettings(tool_choice="required", parallel_tool_calls=False, max_tokens=96),
        tool_use_behavior="stop_on_first_tool",
    )
    result = agents.Runner.run_sync(agent, ASK_WEATHER[0]["content"], max_turns=2)
    calls = [item for item in result.new_items if isinstance(item, agents.ToolCallItem)]
    outputs = [item for item in result.new_items if isinstance(item, agents.ToolCallOutputItem)]
    assert len(calls) == len(outputs) == 1, result.new_items
    assert calls[0].raw_item.name == "get_weather"
    assert ran == [json.loads(calls[0].raw_item.arguments)]
    assert outputs[0].output == result.final_output == "sunny, 21 degrees"

    # The call and its result go back (an assistant message with tool_calls, a tool message), and
    # "none" asks for the answer in text.
    answering = agent.clone(
        model_settings=agents.ModelSettings(tool_choice="none", max_tokens=32),
        tool_use_behavior="run_llm_again",
    )
    history = [*result.to_input_list(), {"role": "user", "content": "So what is it like?"}]
    answer = agents.Runner.run_sync(answering, history, max_turns=1)
    assert isinstance(answer.final_output, str) and answer.final_output.strip()
    assert not [item for item in answer.new_items if isinstance(item, agents.ToolCallItem)]
    assert len(ran) == 1
