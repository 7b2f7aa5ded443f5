"""The client libraries agents are built on, each driving `llmcli serve` with tools, log
probabilities and several choices, on the shared server (tests/serve/conftest.py).

Each test checks what the client got back as the client's own types: the tool call with its parsed
arguments, the model object, the agent's final output. The embedded 135M model seldom decides to call
a tool on its own, so most tests force one with `tool_choice` "required" or a named function, which
the server holds to the tool's schema from the first token; each says why where it does.
"""

from __future__ import annotations

import jsonschema

# One tool in OpenAI's shape (what `tools` carries), and a second one for a named choice to pick from.
WEATHER_PARAMETERS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": WEATHER_PARAMETERS,
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone.",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 40}},
            "required": ["zone"],
        },
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather like in Paris today?"}]
# A question the tiny model answers by opening a call on its own (with `{`, as the generic form writes
# one), when the system prompt shows that form's JSON.
ASK_JSON = [
    {
        "role": "system",
        "content": 'Answer only with JSON: {"tool_calls": [{"name": ..., "arguments": {...}}]}',
    },
    {"role": "user", "content": "Weather in Paris? Answer in JSON."},
]
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in (WEATHER, TIME)}


def assert_call_fits(name: str, arguments: dict) -> None:
    """A call names one of the tools and its arguments hold to that tool's schema."""
    assert name in SCHEMAS, name
    jsonschema.validate(arguments, SCHEMAS[name])
