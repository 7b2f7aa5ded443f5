"""Tool-call forms: which one a model writes, read from its chat template, and how to read its markup.

Decided from the template source, never from the model's name (as thinking.py decides thinking):
- Hermes 2 Pro, Qwen 2.5–3: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`, one block per call;
- Mistral: `[TOOL_CALLS][{"name": …, "arguments": {…}}, …]`, or the newer `[TOOL_CALLS]name[ARGS]{…}`
  once per call, to the end of the reply;
- Functionary v3.2: `>>>recipient\\n…` segments, where the recipient `all` is text and any other
  a call whose body is its JSON arguments (the generation prompt already wrote the first `>>>`);
- Llama 3.x: the whole reply one JSON object `{"name": …, "parameters": {…}}`, or JSON after
  `<|python_tag|>`;
- any other template: the whole reply one JSON object `{"tool_calls": [{"name", "arguments"}, …]}`,
  `{"tool_call": {…}}`, `{"name", "arguments"}`, or `{"response": "text"}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from llmcli.engine.tools.calls import UNCLOSED, arguments_of, bad_json, bad_shape, decode_values, loads


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Found:
    name: str
    arguments: dict


@dataclass(frozen=True)
class Bad:
    reason: str


Piece = Text | Found | Bad
Reader = Callable[[str], list[Piece]]  # markup (without its opening marker) -> what it holds


@dataclass(frozen=True)
class ToolFormat:
    name: str
    opens: tuple[str, ...]  # markers that begin call markup anywhere in the text
    close: str | None  # the marker that ends one call's markup; None: the markup runs to the end
    read: Reader
    json_reply: bool = False  # a reply that starts with a JSON object is read as a call
    lead: str | None = None  # the segment opener the generation prompt wrote (Functionary's `>>>`)

    @property
    def markers(self) -> tuple[str, ...]:
        """Every marker of the format's markup: none may ever reach the content."""
        return self.opens + ((self.close,) if self.close else ())


ARGUMENT_KEYS = ("arguments", "parameters")  # Llama 3 writes "parameters"; a call without either gets {}


def call_of(value: object) -> Piece:
    """A decoded `{"name": …, "arguments": {…}}` as a call, or why it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return Bad(bad_shape("no string name"))
    raw: object = next((value[key] for key in ARGUMENT_KEYS if key in value), {})
    arguments = arguments_of(raw)
    return (
        Found(value["name"], arguments)
        if arguments is not None
        else Bad(bad_shape("arguments not an object"))
    )


def _json_calls(text: str, separators: str = "") -> list[Piece]:
    """One or more call objects (or arrays of them), apart from whitespace and `separators`."""
    try:
        values = decode_values(text, separators)
    except ValueError as e:
        return [Bad(bad_json(str(e)))]
    if not values:
        return [Bad(bad_shape("nothing after the marker"))]
    items = [item for value in values for item in (value if isinstance(value, list) else [value])]
    return [call_of(item) for item in items] or [Bad(bad_shape("an empty list"))]


def read_hermes(block: str) -> list[Piece]:
    return _json_calls(block)


def read_llama(markup: str) -> list[Piece]:
    """After <|python_tag|>, or a whole reply: call objects, `;`-separated when several."""
    return _json_calls(markup, ";")


NEWER_MISTRAL = re.compile(r"\s*([^\s\[\]{}]+)\s*\[ARGS\]", re.S)


def read_mistral(markup: str) -> list[Piece]:
    start = markup.lstrip()
    if start.startswith("[") and not start.startswith("[ARGS]"):  # [TOOL_CALLS][{…}, …]
        return _json_calls(markup)
    pieces: list[Piece] = []
    for part in markup.split("[TOOL_CALLS]"):  # name[ARGS]{…}, each after its own [TOOL_CALLS]
        head = NEWER_MISTRAL.match(part)
        if head is None:
            pieces.append(Bad(bad_shape("no name[ARGS] after [TOOL_CALLS]")))
            continue
        try:
            values = decode_values(part[head.end() :])
        except ValueError as e:
            pieces.append(Bad(bad_json(str(e))))
            continue
        arguments = arguments_of(values[0]) if len(values) == 1 else None
        pieces.append(
            Found(head.group(1), arguments)
            if arguments is not None
            else Bad(bad_shape("[ARGS] not one object"))
        )
    return pieces


RECIPIENT = re.compile(r"([A-Za-z_][\w.-]*)\n")


def read_functionary(markup: str) -> list[Piece]:
    """`recipient\\nbody` segments joined by `>>>`: `all` is text; `python` may take raw code."""
    pieces: list[Piece] = []
    for segment in markup.split(">>>"):
        head = RECIPIENT.match(segment)
        if head is None:
            pieces.append(Bad(UNCLOSED if "\n" not in segment else bad_shape("no recipient line")))
            continue
        name, body = head.group(1), segment[head.end() :]
        if name == "all":
            pieces.append(Text(body))
            continue
        try:
            value = loads(body)
        except ValueError as e:
            value = {"code": body} if name == "python" else e
        if isinstance(value, Exception):
            pieces.append(Bad(bad_json(str(value))))
        elif isinstance(value, dict):
            pieces.append(Found(name, value))
        else:
            pieces.append(Bad(bad_shape("arguments not an object")))
    return pieces


def read_generic(reply: str) -> list[Piece]:
    try:
        values = decode_values(reply)
    except ValueError as e:
        return [Bad(bad_json(str(e)))]
    value = values[0] if len(values) == 1 else None
    if not isinstance(value, dict):
        return [Bad(bad_shape("not one JSON object"))]
    if "tool_calls" in value:
        listed = value["tool_calls"]
        if not isinstance(listed, list) or not listed:
            return [Bad(bad_shape("tool_calls is not a list of calls"))]
        return [call_of(item) for item in listed]
    if "tool_call" in value:
        return [call_of(value["tool_call"])]
    if isinstance(value.get("response"), str) and len(value) == 1:
        return [Text(value["response"])]
    return [call_of(value)]


def is_call_shaped(value: object, family: str) -> bool:
    """Whether a whole-reply JSON object is meant as a call; any other JSON object is an answer."""
    if not isinstance(value, dict):
        return False
    if family == "generic":
        return bool({"tool_calls", "tool_call", "name", "response"} & value.keys())
    return "name" in value and ("parameters" in value or "arguments" in value)


HERMES = ToolFormat("hermes", ("<tool_call>",), "</tool_call>", read_hermes)
MISTRAL = ToolFormat("mistral", ("[TOOL_CALLS]",), None, read_mistral)
FUNCTIONARY = ToolFormat("functionary", (">>>",), None, read_functionary, lead=">>>")
LLAMA3 = ToolFormat("llama3", ("<|python_tag|>",), None, read_llama, json_reply=True)
GENERIC = ToolFormat("generic", (), None, read_generic, json_reply=True)


def _hermes(source: str) -> bool:
    # <tool_call> alone is not enough: GLM, Qwen3-Coder and Nemotron wrap XML arguments in it, and
    # Apriel names it in prose but writes <tool_calls>[…]</tool_calls>.
    shows_json = '{"name":' in source or "<tool_call>\\n{" in source or "<tool_call>\n{" in source
    return "<tool_call>" in source and shows_json and "<tool_calls>" not in source


def _llama3(source: str) -> bool:
    # Functionary v3.1 also writes <|python_tag|>, but its calls are <function=name>{…}</function>.
    llama = "<|python_tag|>" in source or ("<|start_header_id|>" in source and '"parameters"' in source)
    return llama and "<function=" not in source


# First match wins; a Hermes template built on Llama 3 (Hermes 3) must be Hermes, so it comes first.
DETECTION: tuple[tuple[ToolFormat, Callable[[str], bool]], ...] = (
    (HERMES, _hermes),
    (MISTRAL, lambda source: "[TOOL_CALLS]" in source),
    (FUNCTIONARY, lambda source: ">>>" in source and "recipient" in source),
    (LLAMA3, _llama3),
)
FORMATS = {form.name: form for form in (HERMES, MISTRAL, FUNCTIONARY, LLAMA3, GENERIC)}


def detect(template_source: str) -> ToolFormat:
    """The tool-call form a model with this chat template writes; GENERIC when it shows none."""
    return next((form for form, shows in DETECTION if shows(template_source)), GENERIC)
