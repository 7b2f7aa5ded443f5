"""instructor's TOOLS mode against the server: the response model is one function, named in
tool_choice, and instructor builds its object from the call's arguments."""

from __future__ import annotations

from typing import Literal

import jsonschema
from pydantic import Field

from llmcli.store import EMBEDDED_NAME
from tests.serve.clients import ASK_WEATHER, WEATHER_PARAMETERS
from tests.serve.server import KEY
from tests.support.deps import require


def test_instructor_tools_mode_builds_the_model_from_the_call(server, openai_module):
    instructor = require("instructor")
    from pydantic import BaseModel

    class Weather(BaseModel):
        """The weather asked about."""

        city: str = Field(max_length=40)
        unit: Literal["celsius", "fahrenheit"]

    client = instructor.from_openai(
        openai_module.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0),
        mode=instructor.Mode.TOOLS,
    )
    # TOOLS mode names its one function in tool_choice: the server holds the reply to one call to it.
    weather, completion = client.chat.completions.create_with_completion(
        model=EMBEDDED_NAME,
        response_model=Weather,
        max_tokens=96,
        max_retries=0,
        messages=ASK_WEATHER,
    )
    assert isinstance(weather, Weather)
    jsonschema.validate(weather.model_dump(), WEATHER_PARAMETERS)
    (call,) = completion.choices[0].message.tool_calls
    assert call.function.name == "Weather" and completion.choices[0].finish_reason == "tool_calls"
