"""Request bodies (OpenAI's and Ollama's) -> one Generation, or a 400 naming the field.

The generation parameters are checked against llmcli.params, the same rows (names, bounds,
messages) that chat's options and `/set` use. Unknown fields are ignored, as OpenAI's clients send
many; fields llmcli cannot honour are refused rather than silently dropped.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from llmcli.engine.messages import Message, is_text
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import OutputConstraint
from llmcli.errors import UsageError
from llmcli.params import PARAMS
from llmcli.serve.constraint import ollama_constraint, openai_constraint
from llmcli.serve.errors import ApiError, bad

ROLES = ("system", "user", "assistant", "tool")
MAX_STOPS = 16
MAX_STOP_CHARS = 256
# Ollama's option names that differ from llmcli.params' (the rest are the same words).
OLLAMA_NAMES = {"num_predict": "max_tokens"}
# Fields that change what a reply means and that this server does not do: refused, never ignored.
UNSUPPORTED = {
    "tools": "tool calls are not supported",
    "functions": "function calls are not supported",
    "logprobs": "log probabilities are not returned",
    "n": "one choice per request (n must be 1)",
    "best_of": "one choice per request (best_of must be 1)",
    "suffix": "insertion (suffix) is not supported",
    "echo": "echo is not supported",
    "logit_bias": "logit_bias is not supported",
}
NEUTRAL = {"n": 1, "best_of": 1, "logprobs": False, "echo": False, "logit_bias": {}}  # ask for nothing
# Ollama's sampling options llama.cpp's chain here does not run: refused unless they ask for nothing.
OLLAMA_NEUTRAL_OPTIONS = {
    "frequency_penalty": 0,
    "presence_penalty": 0,
    "mirostat": 0,
    "typical_p": 1,
    "tfs_z": 1,
}
# Ollama request fields that change the reply, as `field: why`, refused when not empty.
OLLAMA_UNSUPPORTED = {
    "suffix": "insertion (suffix) is not supported",
    "template": "a request's own template is not supported (the model's is used)",
    "images": "images are not supported: the model reads text",
}
ZERO_PENALTIES = ("frequency_penalty", "presence_penalty")


@dataclass
class Generation:
    """What one request asks the engine for."""

    messages: list[Message] | None  # a chat, rendered with the model's template
    prompt: str | None  # a raw completion prompt
    params: SamplingParams
    max_tokens: int | None  # None: as many as fit the pool, up to the default
    stops: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    model: str | None = None
    raw: bool = False  # Ollama's `raw`: the prompt as is, no template
    constraint: OutputConstraint | None = None  # response_format, grammar or Ollama's format


def parse_json(data: bytes) -> dict:
    try:
        value = json.loads(data)
    except UnicodeDecodeError:
        raise bad(None, "the body is not UTF-8; send JSON in UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise bad(None, f"the body is not valid JSON ({str(exc)[:80]}); send a JSON object") from None
    if not isinstance(value, dict):
        raise bad(None, f"the body must be a JSON object, not {type(value).__name__}")
    if b"\\u" in data:  # only a \uXXXX escape can make a lone surrogate: most bodies skip the walk
        where = _lone_surrogate_at(value)
        if where is not None:
            raise bad(
                where or None,
                f"{where or 'the body'} holds a lone surrogate escape (\\ud800-\\udfff), which is not text; "
                "send UTF-8 text",
            )
    return value


def _lone_surrogate_at(value: Any) -> str | None:
    """The dotted path of the first string (a key or a value) that is not Unicode text, or None."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if not is_text(item):
                return path
        elif isinstance(item, dict):
            for key, child in item.items():
                if not is_text(key):
                    return path
                stack.append((f"{path}.{key}" if path else key, child))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(item))
    return None


def _text(value: Any, name: str, *, allow_none: bool = False) -> str | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise bad(name, f"{name} must be a string")
    return value


def _bool(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad(name, f"{name} must be true or false")
    return value


def _content(value: Any, name: str) -> str:
    """A message's content: a string, or OpenAI's list of text parts, joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(value):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad(
                    f"{name}[{i}]", f"{name}[{i}] must be a text part ({{'type': 'text', 'text': ...}})"
                )
            parts.append(part["text"])
        return "".join(parts)
    raise bad(name, f"{name} must be a string or a list of text parts")


def _messages(value: Any, system: str | None) -> list[Message]:
    if not isinstance(value, list) or not value:
        raise bad("messages", "messages must be a non-empty list of {role, content} objects")
    messages = []
    for i, item in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(item, dict):
            raise bad(where, f"{where} must be an object with role and content")
        role = item.get("role")
        if role not in ROLES:
            raise bad(f"{where}.role", f"{where}.role must be one of {', '.join(ROLES)}")
        messages.append(Message(role, _content(item.get("content"), f"{where}.content")))
    if system and messages[0].role != "system":
        messages.insert(0, Message("system", system))
    return messages


def _stops(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad(name, f"{name} must be a non-empty string or a list of them")
    if len(stops) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise bad(name, f"{name}: at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters")
    return list(stops)


def _params(
    values: dict[str, tuple[str, Any]], defaults: SamplingParams
) -> tuple[SamplingParams, int | None]:
    """(field name as sent, value) per params row -> checked SamplingParams and the max tokens asked."""
    chosen = defaults.as_dict()
    max_tokens = None
    for name, (sent, value) in values.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise bad(sent, f"{sent} must be a finite number")
        try:
            checked = PARAMS[name].check(value)
        except UsageError as exc:
            raise bad(sent, str(exc).replace(name, sent, 1)) from None
        if name == "max_tokens":
            max_tokens = int(checked) if checked is not None else None
        else:
            chosen[name] = checked
    return SamplingParams(**chosen), max_tokens


def _refuse_unsupported(body: dict) -> None:
    for name, why in UNSUPPORTED.items():
        if name in body and body[name] is not None and body[name] != NEUTRAL.get(name, object()):
            raise bad(name, f"{name}: {why}")
    for name in ZERO_PENALTIES:
        value = body.get(name)
        if value not in (None, 0, 0.0):
            raise bad(name, f"{name} is not supported (send 0 or leave it out; repeat_penalty is)")


def _openai_values(body: dict) -> dict[str, tuple[str, Any]]:
    """The parameters a body sets, by row name; null is OpenAI's "not given" (the server's default)."""
    values: dict[str, tuple[str, Any]] = {}
    for name, row in PARAMS.items():
        for sent in ((row.openai,) if row.openai else ()) + row.extensions:
            if body.get(sent) is not None:
                values[name] = (sent, body[sent])
    if body.get("max_completion_tokens") is not None:
        values["max_tokens"] = ("max_completion_tokens", body["max_completion_tokens"])
    return values


def _stream_options(body: dict, stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, dict):
        raise bad("stream_options", "stream_options must be an object")
    if not stream:
        raise bad("stream_options", "stream_options is only allowed when stream is true")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise bad("stream_options.include_usage", "stream_options.include_usage must be true or false")
    return include


def openai_chat(body: dict, defaults: SamplingParams, system: str | None) -> Generation:
    _refuse_unsupported(body)
    stream = _bool(body, "stream", False)
    params, max_tokens = _params(_openai_values(body), defaults)
    return Generation(
        messages=_messages(body.get("messages"), system),
        prompt=None,
        params=params,
        max_tokens=max_tokens,
        stops=_stops(body.get("stop"), "stop"),
        stream=stream,
        include_usage=_stream_options(body, stream),
        model=_text(body.get("model"), "model", allow_none=True),
        constraint=openai_constraint(body),
    )


def openai_completion(body: dict, defaults: SamplingParams) -> Generation:
    _refuse_unsupported(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]  # a batch of one
    if not isinstance(prompt, str) or not prompt:
        raise bad("prompt", "prompt must be a non-empty string (one prompt a request)")
    stream = _bool(body, "stream", False)
    values = _openai_values(body)
    values.setdefault("max_tokens", ("max_tokens", 16))  # OpenAI's default for completions
    params, max_tokens = _params(values, defaults)
    return Generation(
        messages=None,
        prompt=prompt,
        params=params,
        max_tokens=max_tokens,
        stops=_stops(body.get("stop"), "stop"),
        stream=stream,
        include_usage=_stream_options(body, stream),
        model=_text(body.get("model"), "model", allow_none=True),
        constraint=openai_constraint(body),
    )


def _ollama_options(body: dict) -> tuple[dict[str, tuple[str, Any]], list[str]]:
    options = body.get("options") or {}
    if not isinstance(options, dict):
        raise bad("options", "options must be an object")
    values: dict[str, tuple[str, Any]] = {}
    for sent, value in options.items():
        neutral = OLLAMA_NEUTRAL_OPTIONS.get(sent)
        if neutral is not None and value not in (None, neutral):
            raise bad(f"options.{sent}", f"options.{sent} is not supported (send {neutral} or leave it out)")
        name = OLLAMA_NAMES.get(sent, sent)
        if name not in PARAMS or value is None:
            continue  # Ollama's load-time options (num_ctx, num_thread...) are the server's, not a request's
        if name == "max_tokens" and value in (-1, -2):
            continue  # Ollama's "until the context is full"
        values[name] = (f"options.{sent}", value)
    return values, _stops(options.get("stop"), "options.stop")


def _refuse_ollama_unsupported(body: dict) -> None:
    messages = body.get("messages")
    items = [body] + ([m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else [])
    for name, why in OLLAMA_UNSUPPORTED.items():
        if any(item.get(name) for item in items):
            raise bad(name, f"{name}: {why}")


def ollama_chat(body: dict, defaults: SamplingParams, system: str | None) -> Generation:
    _refuse_ollama_unsupported(body)
    values, stops = _ollama_options(body)
    if body.get("tools"):
        raise bad("tools", "tools: tool calls are not supported")
    params, max_tokens = _params(values, defaults)
    return Generation(
        messages=_messages(body.get("messages"), system),
        prompt=None,
        params=params,
        max_tokens=max_tokens,
        stops=stops,
        stream=_bool(body, "stream", True),
        model=_text(body.get("model"), "model", allow_none=True),
        constraint=ollama_constraint(body),
    )


def ollama_generate(body: dict, defaults: SamplingParams, system: str | None) -> Generation:
    _refuse_ollama_unsupported(body)
    values, stops = _ollama_options(body)
    prompt = _text(body.get("prompt", ""), "prompt") or ""
    if not prompt:
        raise bad("prompt", "prompt must be a non-empty string")
    raw = _bool(body, "raw", False)
    own_system = _text(body.get("system"), "system", allow_none=True)
    params, max_tokens = _params(values, defaults)
    messages = None if raw else _messages([{"role": "user", "content": prompt}], own_system or system)
    return Generation(
        messages=messages,
        prompt=prompt if raw else None,
        params=params,
        max_tokens=max_tokens,
        stops=stops,
        stream=_bool(body, "stream", True),
        model=_text(body.get("model"), "model", allow_none=True),
        raw=raw,
        constraint=ollama_constraint(body),
    )


def too_large(cap: int) -> ApiError:
    return ApiError(413, f"the body is over {cap:,} bytes, this server's --max-body; send less")
