"""OpenAI's request bodies, typed: /v1/chat/completions and /v1/completions, each into a Generation.

The generation parameters are fields made from llmcli.params' rows (OpenAI's names, and the
extensions vLLM, SGLang and llama-server accept). Fields that change what a reply means and that
this server does not do are refused unless they ask for nothing; the rest of what clients send is
ignored.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, create_model

from llmcli.engine.messages import Message
from llmcli.params import PARAMS
from llmcli.serve.constraint import Grammar, JsonSchema, ResponseFormat, one_constraint
from llmcli.serve.errors import bad
from llmcli.serve.logprobs import Choices, CompletionLogprobs, TopLogprobs, chat_logprobs
from llmcli.serve.protocol import (
    EFFORTS,
    Body,
    Defaults,
    Flag,
    Generation,
    Stops,
    Text,
    checked,
    content_text,
    message_list,
    one_of,
    param_field,
    refuse,
    refused_unless_neutral,
    role_field,
    sampling,
    thinking_vars,
)
from llmcli.serve.tools import ToolCalls, ToolChoiceField, Tools, ToolText, message, tool_use, with_tools

# The roles a message may take, and the one a newer client's `developer` is read as.
ROLES = ("system", "developer", "user", "assistant", "tool")
READ_AS = {"developer": "system"}

# sent field -> params row: OpenAI's own names, then the extensions, then OpenAI's newer spelling.
PARAM_FIELDS: dict[str, str] = {
    sent: name
    for name, row in PARAMS.items()
    for sent in ((row.openai,) if row.openai else ()) + row.extensions
}
PARAM_FIELDS["max_completion_tokens"] = "max_tokens"

# field: (why it is refused, the values that ask for nothing)
REFUSED: dict[str, tuple[str, tuple[Any, ...]]] = {
    "functions": ("function calls are not supported", ()),
    "best_of": ("is not supported (send 1 or leave it out; n gives several choices)", (1,)),
    "suffix": ("insertion (suffix) is not supported", ()),
    "echo": ("echo is not supported", (False,)),
    "logit_bias": ("logit_bias is not supported", ({},)),
    "frequency_penalty": ("is not supported (send 0 or leave it out; repeat_penalty is)", (0,)),
    "presence_penalty": ("is not supported (send 0 or leave it out; repeat_penalty is)", (0,)),
    # llama-server's and vLLM's samplers that llama.cpp's chain here does not run
    "mirostat": ("is not supported (send 0 or leave it out)", (0,)),
    "typical_p": ("is not supported (send 1 or leave it out)", (1,)),
    "tfs_z": ("is not supported (send 1 or leave it out)", (1,)),
    "dry_multiplier": ("is not supported (send 0 or leave it out)", (0,)),
    "ignore_eos": ("is not supported (send false or leave it out)", (False,)),
    "min_tokens": ("is not supported (send 0 or leave it out)", (0,)),
}


def _refused_field(why: str, neutral: tuple[Any, ...]) -> Any:
    # "frequency_penalty is not supported ..." reads as a predicate; "tools: tool calls are ..." not
    return refused_unless_neutral(why if why.startswith("is ") else f": {why}", neutral)


_COMMON: dict[str, Any] = {
    **{sent: (param_field(PARAMS[name]), None) for sent, name in PARAM_FIELDS.items()},
    **{name: (_refused_field(why, neutral), None) for name, (why, neutral) in REFUSED.items()},
}
SamplingBody: Any = create_model("SamplingBody", __base__=Body, **_COMMON)


def _messages(value: Any) -> list:
    return message_list(value, may_be_empty=False)


def _stream_options(value: Any) -> dict:
    if not isinstance(value, dict):
        raise refuse("must be an object")
    if not isinstance(value.get("include_usage", False), bool):
        raise refuse(".include_usage must be true or false")
    return value


def _prompt(value: Any) -> str:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
        value = value[0]  # a batch of one
    if not isinstance(value, str) or not value:
        raise refuse("must be a non-empty string (one prompt a request)")
    return value


def _template_kwargs(value: Any) -> dict:
    """vLLM's and llama-server's chat_template_kwargs: enable_thinking is read (the one variable a
    request may set in the template; the rest are the template's own business and are ignored)."""
    if not isinstance(value, dict):
        raise refuse("must be an object")
    if not isinstance(value.get("enable_thinking", False), bool):
        raise refuse(".enable_thinking must be true or false")
    return value


Role = role_field(ROLES, READ_AS)
Content = checked(content_text, {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]})
StreamOptions = checked(_stream_options, {"type": "object"})
Effort = checked(one_of(EFFORTS), {"enum": list(EFFORTS)})
TemplateKwargs = checked(_template_kwargs, {"type": "object"})
Prompt = checked(_prompt, {"type": "string"}, nullable=False)
CompletionTools = _refused_field("tools are for /v1/chat/completions, whose template renders them", ())


class OpenAIMessage(Body):
    role: Role
    content: Content = ""
    tool_calls: ToolCalls = None  # an assistant's calls: its content may then be null
    tool_call_id: ToolText = None  # a tool result: the call it answers
    name: ToolText = None


class GenerationBody(SamplingBody):
    """What both routes take: the parameters, the stream, the stops and the output constraint."""

    model: Text = None
    keep_alive: Any = None  # Ollama's, on OpenAI's routes too (or X-Keep-Alive); Server.start reads it
    stream: Flag = False
    stream_options: StreamOptions = None
    stop: Stops = None
    response_format: ResponseFormat = None
    grammar: Grammar = None
    json_schema: JsonSchema = None
    n: Choices = None

    def _generation(self, defaults: Defaults, **what: Any) -> Generation:
        values = {}
        for sent, name in PARAM_FIELDS.items():
            if (value := getattr(self, sent)) is not None:
                values[name] = value
        params, max_tokens = sampling(values, defaults.params)
        return Generation(
            **what,
            params=params,
            max_tokens=max_tokens,
            stops=self.stop or [],
            stream=bool(self.stream),
            include_usage=self._include_usage(),
            constraint=one_constraint(self.response_format, self.json_schema, self.grammar),
            n=self.n or 1,
        )

    def _include_usage(self) -> bool:
        if self.stream_options is None:
            return False
        if not self.stream:
            raise bad("stream_options", "stream_options is only allowed when stream is true")
        return bool(self.stream_options.get("include_usage", False))


class ChatCompletionRequest(GenerationBody):
    messages: Annotated[list[OpenAIMessage], BeforeValidator(_messages)] = Field(
        default=None, validate_default=True
    )
    # vLLM's: the last (assistant) message is continued rather than answered, as llama-server does
    continue_final_message: Flag = False
    add_generation_prompt: Flag = True
    tools: Tools = None
    tool_choice: ToolChoiceField = None
    parallel_tool_calls: Flag = None
    logprobs: Flag = None
    top_logprobs: TopLogprobs = None
    reasoning_effort: Effort = None
    chat_template_kwargs: TemplateKwargs = None

    def generation(self, defaults: Defaults) -> Generation:
        messages = [
            message(i, m.role, m.content or "", m.tool_calls, m.tool_call_id, m.name)
            for i, m in enumerate(self.messages)
        ]
        continue_final = bool(self.continue_final_message) or self.add_generation_prompt is False
        sent_both = self.add_generation_prompt and "add_generation_prompt" in self.model_fields_set
        if self.continue_final_message and sent_both:  # vLLM and transformers refuse it too
            raise bad(
                "continue_final_message",
                "continue_final_message and add_generation_prompt cannot both be true; "
                "leave add_generation_prompt out",
            )
        if continue_final and messages[-1].role != "assistant":
            raise bad(
                "continue_final_message",
                "continue_final_message needs the last message to be the assistant's, to continue it",
            )
        if defaults.system and messages[0].role != "system":
            messages.insert(0, Message("system", defaults.system))
        gen = self._generation(
            defaults,
            messages=messages,
            prompt=None,
            continue_final=continue_final,
            logprobs=chat_logprobs(self.logprobs, self.top_logprobs),
        )
        kwargs: dict[str, Any] = self.chat_template_kwargs or {}
        think = kwargs.get("enable_thinking")
        gen.template_vars = thinking_vars(think, self.reasoning_effort)
        use = tool_use(self.tools, self.tool_choice, self.parallel_tool_calls, defaults.tool_form)
        return with_tools(gen, use)


class CompletionRequest(GenerationBody):
    prompt: Prompt = Field(default=None, validate_default=True)
    tools: CompletionTools = None
    logprobs: CompletionLogprobs = None  # the number of most likely tokens, 0..5, as OpenAI's

    def generation(self, defaults: Defaults) -> Generation:
        gen = self._generation(defaults, messages=None, prompt=self.prompt, logprobs=self.logprobs)
        if gen.max_tokens is None:
            gen.max_tokens = 16  # OpenAI's default for completions
        return gen
