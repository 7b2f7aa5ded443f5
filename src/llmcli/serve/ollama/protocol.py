"""Ollama's request bodies, typed: /api/chat and /api/generate, each into a Generation, and /api/show.

The options are fields made from llmcli.params' rows under Ollama's names. Ollama's load-time options
(num_ctx, num_thread, ...) are the server's, not a request's, and are ignored, as are unknown fields;
the sampling options llama.cpp's chain here does not run are refused unless they ask for nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, create_model

from llmcli.engine.messages import Message
from llmcli.params import PARAMS
from llmcli.serve.constraint import OllamaFormat
from llmcli.serve.logprobs import TopLogprobs, chat_logprobs
from llmcli.serve.protocol import (
    Body,
    Defaults,
    Flag,
    Generation,
    Stops,
    Text,
    checked,
    message_list,
    param_field,
    refuse,
    refused_unless_neutral,
    role_field,
    sampling,
    thinking_vars,
)
from llmcli.serve.tools import ToolCalls, Tools, ToolText, message, tool_use, with_tools

ROLES = ("system", "user", "assistant", "tool")
# Ollama's option names that differ from llmcli.params' (the rest are the same words), and the values
# below a row's range that Ollama gives a meaning: num_predict -1 and -2 (until the context is full),
# repeat_last_n -1 (the whole context).
NAMES = {"num_predict": "max_tokens"}
BELOW = {"num_predict": -2, "repeat_last_n": -1}
MEANS = {"num_predict": "-1 or -2: until the context is full.", "repeat_last_n": "-1: the whole context."}
NEUTRAL_OPTIONS = {"frequency_penalty": 0, "presence_penalty": 0, "mirostat": 0, "typical_p": 1, "tfs_z": 1}
# Request fields that change the reply: refused when not empty.
REFUSED = {
    "suffix": "insertion (suffix) is not supported",
    "template": "a request's own template is not supported (the model's is used)",
    "images": "images are not supported: the model reads text",
}
# option name as sent -> params row
OPTION_FIELDS = {next((sent for sent, row in NAMES.items() if row == name), name): name for name in PARAMS}


def _refused(why: str) -> Any:
    def check(value: Any) -> Any:
        if value:
            raise refuse(f": {why}")
        return value

    return Annotated[checked(check, {"description": f"refused unless empty: {why}"}), Field(default=None)]


_OPTIONS: dict[str, Any] = {
    **{
        sent: (param_field(PARAMS[name], BELOW.get(sent), MEANS.get(sent, "")), None)
        for sent, name in OPTION_FIELDS.items()
    },
    **{
        sent: (refused_unless_neutral(f"is not supported (send {neutral} or leave it out)", (neutral,)), None)
        for sent, neutral in NEUTRAL_OPTIONS.items()
    },
    "stop": (Stops, None),
}
Options: Any = create_model("Options", __base__=Body, **_OPTIONS)


THINK_LEVELS = ("low", "medium", "high")


def _think(value: Any) -> Any:
    """Ollama's think: true or false, or a level (gpt-oss's), which also turns thinking on."""
    if not isinstance(value, bool) and value not in THINK_LEVELS:
        raise refuse(f"must be true, false or one of {', '.join(THINK_LEVELS)}")
    return value


def _options(value: Any) -> Any:
    if value is not None and not isinstance(value, dict):
        raise refuse("must be an object")
    return value or {}


def _messages(value: Any) -> list:
    if value is None:
        return []  # no messages: a preload (or, with keep_alive 0, an unload)
    return message_list(value, may_be_empty=True)


def _content(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise refuse("must be a string")
    return value


Role = role_field(ROLES)
Think = checked(_think, {"anyOf": [{"type": "boolean"}, {"enum": list(THINK_LEVELS)}]})
Content = checked(_content, {"type": "string"})
Images = _refused(REFUSED["images"])
Suffix = _refused(REFUSED["suffix"])
Template = _refused(REFUSED["template"])


class OllamaMessage(Body):
    role: Role
    content: Content = ""
    images: Images = None
    tool_calls: ToolCalls = None  # an assistant's calls, arguments as an object
    tool_name: ToolText = None  # a tool result: the tool that gave it
    tool_call_id: ToolText = None  # a tool result: the call it answers (Ollama's newer clients send it)


class GenerationBody(Body):
    model: Text = None
    stream: Flag = True
    format: OllamaFormat = None
    options: Annotated[Options, BeforeValidator(_options)] = Field(default=None, validate_default=True)
    keep_alive: Any = None  # how long the model stays loaded once idle; budget.parse_keep_alive reads it
    suffix: Suffix = None
    template: Template = None
    images: Images = None
    # Ollama's newer fields, as OpenAI's chat has them
    logprobs: Flag = None
    top_logprobs: TopLogprobs = None
    think: Think = None

    @property
    def unloads(self) -> bool:
        from llmcli.serve.budget import parse_keep_alive

        return parse_keep_alive(self.keep_alive) == 0  # a keep_alive that is not a duration: 400

    def _generation(self, defaults: Defaults, **what: Any) -> Generation:
        values = {}
        for sent, name in OPTION_FIELDS.items():
            value = getattr(self.options, sent)
            if value is None or (sent == "num_predict" and value < 0):
                continue  # the server's default; num_predict -1 or -2: as many as fit, as Ollama does
            values[name] = defaults.context if sent == "repeat_last_n" and value < 0 else value
        params, max_tokens = sampling(values, defaults.params)
        return Generation(
            **what,
            params=params,
            max_tokens=max_tokens,
            stops=self.options.stop or [],
            stream=self.stream is not False,  # null: Ollama's default, a stream
            constraint=self.format.constraint if self.format is not None else None,
            dialect="ollama",
            reply_field="options.num_predict",
            logprobs=chat_logprobs(self.logprobs, self.top_logprobs),
            template_vars=thinking_vars(self.think if isinstance(self.think, bool) else None, self._level()),
        )

    def _level(self) -> str | None:
        return self.think if isinstance(self.think, str) else None


class ChatRequest(GenerationBody):
    messages: Annotated[list[OllamaMessage], BeforeValidator(_messages)] = Field(
        default=None, validate_default=True
    )
    tools: Tools = None

    @property
    def loads_only(self) -> bool:
        return not self.messages

    def generation(self, defaults: Defaults) -> Generation:
        messages = [
            message(i, m.role, m.content or "", m.tool_calls, m.tool_call_id, m.tool_name)
            for i, m in enumerate(self.messages)
        ]
        if defaults.system and messages[0].role != "system":
            messages.insert(0, Message("system", defaults.system))
        gen = self._generation(defaults, messages=messages, prompt=None)
        # Ollama has no tool_choice: the model chooses ("auto"), as Ollama's own server lets it
        return with_tools(gen, tool_use(self.tools, None, None, defaults.tool_form))


class GenerateRequest(GenerationBody):
    prompt: Content = ""
    system: Text = None
    raw: Flag = False

    @property
    def loads_only(self) -> bool:
        return not self.prompt

    def generation(self, defaults: Defaults) -> Generation:
        if self.raw is True:
            return self._generation(defaults, messages=None, prompt=self.prompt)
        messages = [Message("user", self.prompt)]
        system = self.system or defaults.system
        if system:
            messages.insert(0, Message("system", system))
        return self._generation(defaults, messages=messages, prompt=None)


class ShowRequest(Body):
    model: Text = None
    name: Text = None  # Ollama's older spelling

    @property
    def named(self) -> str:
        if self.model is None and self.name is None:
            from llmcli.serve.errors import bad

            raise bad("model", "model must be a string naming the model")
        return self.model if self.model is not None else self.name


class PullRequest(ShowRequest):
    """/api/pull: REPO[:QUANT] in `model`; `insecure` is Ollama's and means nothing here."""

    stream: Flag = True


class CopyRequest(Body):
    source: Text = None
    destination: Text = None

    def names(self) -> tuple[str, str]:
        from llmcli.serve.errors import bad

        for field in ("source", "destination"):
            if getattr(self, field) is None:
                raise bad(field, f"{field} must be a string naming a model")
        assert self.source is not None and self.destination is not None
        return self.source, self.destination
