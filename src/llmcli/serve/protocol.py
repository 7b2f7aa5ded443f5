"""What every dialect's request body shares: the JSON read, the typed fields, and a refusal's words.

A body is read once (`read_body`: UTF-8 JSON, an object, no lone surrogate, no NaN, no repeated key),
then validated once into its route's pydantic model (openai/protocol.py, ollama/protocol.py), which
turns it into the one `Generation` the rest of the server knows. A field that fails is a 400 naming
it, in the route's shape (serve/errors.py): the validators here raise their message as a predicate
("must be ..."), and `refusal` puts the field's dotted path in front.

The generation parameters are fields made from llmcli.params' rows, so the CLI, `/set`, a body and
the OpenAPI schema share one table of names, bounds and words.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, WithJsonSchema
from pydantic_core import PydanticCustomError

from llmcli.engine.messages import Message, is_text
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.tools.formats import GENERIC, ToolFormat
from llmcli.errors import UsageError
from llmcli.params import PARAMS, Param
from llmcli.serve.errors import ApiError, bad

if TYPE_CHECKING:
    from llmcli.engine.tools.use import ToolUse

MAX_STOPS = 16
MAX_STOP_CHARS = 256


@dataclass
class Generation:
    """What one request asks the engine for, whichever dialect it came in."""

    messages: list[Message] | None  # a chat, rendered with the model's template
    prompt: str | None  # a raw completion prompt
    params: SamplingParams
    max_tokens: int | None  # None: as many as fit the pool, up to the default
    stops: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    constraint: OutputConstraint | None = None  # response_format, grammar or Ollama's format
    continue_final: bool = False  # the last (assistant) message is continued, not answered
    dialect: str = "openai"  # whose error words a refusal takes (context_length_exceeded is OpenAI's)
    n: int = 1  # choices of the one prompt (OpenAI's n), prefilled once
    logprobs: int | None = None  # log-probabilities of each token and this many most likely; None: none
    tools: ToolUse | None = None  # the tools for the template, and whether the reply is read for calls
    template_vars: dict[str, Any] = field(default_factory=dict)  # enable_thinking, reasoning_effort
    reasoning_budget: int | None = None  # the most reasoning tokens before the thinking is ended
    cap_asked: bool = False  # params.max_tokens is the client's own cap (Anthropic's max_tokens)
    reply_field: str = "max_tokens"  # the body's word for the reply's cap, which a refusal names


# A reasoning level as every dialect words it (Ollama's think, OpenAI's reasoning_effort, Responses'
# reasoning.effort): "none" turns thinking off, the others on, and gpt-oss's template reads the level.
EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")


def thinking_vars(think: bool | None = None, effort: str | None = None) -> dict[str, Any]:
    """The template variables that drive a thinking template: enable_thinking (Qwen3's switch) and
    reasoning_effort (gpt-oss's level). A template that reads neither ignores them."""
    found: dict[str, Any] = {}
    if effort is not None:
        found["enable_thinking"] = effort != "none"
        if effort != "none":
            found["reasoning_effort"] = effort
    if think is not None:
        found["enable_thinking"] = think
    return found


@dataclass(frozen=True)
class Defaults:
    """What the server sets and a request may override."""

    params: SamplingParams
    system: str | None  # prepended to a chat without a system message of its own
    context: int = 0  # tokens a sequence holds (Ollama's repeat_last_n -1 looks back over all of them)
    tool_form: ToolFormat = GENERIC  # how the served model writes tool calls (from its template)


class Body(BaseModel):
    """A request body: unknown fields are ignored, as OpenAI's and Ollama's clients send many."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def refuse(message: str) -> PydanticCustomError:
    """A field's failure, worded as a predicate ("must be ..."): `refusal` names the field."""
    return PydanticCustomError("llmcli", message)


def as_sent(value: Any) -> Any:
    """The check of a field read further on, where its refusal names the field: none here."""
    return value


def one_of(choices: tuple[str, ...]) -> Callable[[Any], str]:
    """The check of a field that takes one of `choices`."""

    def check(value: Any) -> str:
        if value not in choices:
            raise refuse(f"must be one of {', '.join(choices)}")
        return value

    return check


def checked(check: Callable[[Any], Any], schema: dict, *, nullable: bool = True) -> Any:
    """A field type whose value goes through `check` as sent (no coercion by pydantic first); `schema`
    is what /openapi.json says of it. `nullable`: null is OpenAI's "not given", the server's default."""

    def check_given(value: Any) -> Any:
        return None if value is None and nullable else check(value)

    return Annotated[Any, BeforeValidator(check_given), WithJsonSchema(schema)]


# -- generation parameters from llmcli.params ----------------------------------------------------------
def param_field(row: Param, low: int | float | None = None, means: str = "") -> Any:
    """A body field for a params row, checked by the row itself. `low`: a dialect's own lower value
    (Ollama's num_predict -1), which the field passes through for the route to read."""

    def check(value: Any) -> Any:
        if value is None or (low is not None and isinstance(value, int) and low <= value < row.low):
            return value
        try:
            row.check(value)
            return value  # as sent: SamplingParams reads it as the row does (a seed of -1 is random)
        except UsageError as exc:
            raise refuse(str(exc).removeprefix(row.name).lstrip()) from None

    kind = "integer" if row.kind is int else "number"
    shown_low = row.low if low is None else low
    if row.also_none is not None:
        shown_low = min(shown_low, row.also_none)
    text = row.help + (f" {means}" if means else "")
    schema = {"type": kind, "minimum": shown_low, "maximum": row.high, "description": text}
    return Annotated[checked(check, {"anyOf": [schema, {"type": "null"}]}), Field(default=None)]


def sampling(values: Mapping[str, Any], defaults: SamplingParams) -> tuple[SamplingParams, int | None]:
    """(row name -> value, given fields only) -> the request's SamplingParams and the max tokens asked."""
    chosen = defaults.as_dict()
    max_tokens = values.get("max_tokens")
    chosen.update({name: value for name, value in values.items() if name != "max_tokens"})
    return SamplingParams(**chosen), max_tokens


# -- fields every dialect has ------------------------------------------------------------------------
def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse("must be true or false")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise refuse("must be a string")
    return value


def _stops(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise refuse("must be a non-empty string or a list of them")
    if len(stops) > MAX_STOPS or any(len(s) > MAX_STOP_CHARS for s in stops):
        raise refuse(f"must be at most {MAX_STOPS} strings of at most {MAX_STOP_CHARS} characters")
    return list(stops)


Flag = checked(_bool, {"type": "boolean"})
Text = checked(_text, {"type": "string"})
Stops = checked(_stops, {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]})


def role_field(roles: tuple[str, ...], read_as: Mapping[str, str] | None = None) -> Any:
    """A message's role: one of `roles`, read as `read_as` says (OpenAI's developer is system)."""

    def check(value: Any) -> str:
        if value not in roles:
            raise refuse(f"must be one of {', '.join(roles)}")
        return (read_as or {}).get(value, value)

    return checked(check, {"enum": list(roles)})


def message_list(value: Any, *, may_be_empty: bool) -> list:
    """A body's messages: a list of objects (each then typed by its dialect's message model)."""
    if not isinstance(value, list) or not (value or may_be_empty):
        needed = "a list" if may_be_empty else "a non-empty list"
        raise refuse(f"must be {needed} of {{role, content}} objects")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise refuse(f"[{i}] must be an object with role and content")
    return value


def join_turn(out: list[Message], message: Message) -> None:
    """`message` after `out`, joined to the last one when both are plain turns of one role (system,
    user or assistant), as Anthropic joins consecutive turns: templates such as Gemma's refuse two
    user turns in a row, and take one system prompt. Tool results stay apart."""
    last = out[-1] if out else None
    if last is None or last.role != message.role or message.role == "tool":
        out.append(message)
        return
    last.content = "\n\n".join(text for text in (last.content, message.content) if text)
    if message.tool_calls:
        last.tool_calls = [*(last.tool_calls or []), *message.tool_calls]


def content_text(value: Any) -> str:
    """A message's content: a string, or OpenAI's list of text parts, joined."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for i, part in enumerate(value):
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(text, str):
                raise refuse(f"[{i}] must be a text part ({{'type': 'text', 'text': ...}})")
            parts.append(part["text"])
        return "".join(parts)
    raise refuse("must be a string or a list of text parts")


def refused_unless_neutral(why: str, neutral: tuple[Any, ...] = ()) -> Any:
    """A field that changes what a reply means and that this server does not do: refused unless it
    asks for nothing (null, or one of `neutral`)."""

    def check(value: Any) -> Any:
        if value is None or any(value == n and type(value) is type(n) for n in neutral):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if any(value == n for n in neutral if isinstance(n, (int, float)) and not isinstance(n, bool)):
                return value
        raise refuse(why)

    return Annotated[checked(check, {"description": f"refused unless neutral: {why}"}), Field(default=None)]


# -- reading and refusing ----------------------------------------------------------------------------
def read_body(data: bytes) -> dict:
    """The body as a JSON object, or a 400: not UTF-8, not JSON (NaN and Infinity are not), not an
    object, a key given twice (which of the two would count is a parser's whim), a lone surrogate."""
    try:
        value = json.loads(data, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise bad(None, "the body is not UTF-8; send JSON in UTF-8") from None
    except _RepeatedKey as exc:
        raise bad(str(exc), f"{exc} is given twice in one object; send each key once") from None
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


class _RepeatedKey(ValueError):
    pass


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return found


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


def dotted(loc: tuple[int | str, ...]) -> str:
    """('messages', 0, 'role') -> 'messages[0].role'."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def refusal(exc: ValidationError, renamed: Mapping[str, str] | None = None) -> ApiError:
    """The first failing field as a 400 naming it. `renamed`: field -> the name the client sent (an
    alias such as max_completion_tokens)."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"])
    where = dotted(loc)
    if renamed and where in renamed:
        where = renamed[where]
    message = error["msg"]
    if error["type"] == "llmcli":
        text = f"{where}{message}" if message[:1] in "[.:" else f"{where} {message}"
    elif error["type"] == "missing":
        text = f"{where} is required"
    else:
        text = f"{where}: {message}"
    return bad(where or None, text)


def validate(model: type[Any], body: dict, renamed: Mapping[str, str] | None = None) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise refusal(exc, renamed) from None


def row(name: str) -> Param:
    return PARAMS[name]
