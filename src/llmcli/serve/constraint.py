"""Constrained decoding from a request: OpenAI's `response_format` (with llama-server's schema in its
json_object form), llama-server's `grammar` and `json_schema`, and Ollama's `format`, into the
OutputConstraint that `llmcli chat --schema/--format json/--grammar` uses.

Each field is typed as it is validated (an `Asked`: the field and its constraint), so a body past
validation holds no raw JSON for them. A schema gets chat's checks (engine/structured.py's
constraint_from_schema) then, on the request's side; the grammar is parsed by llama.cpp on the
engine thread, with the model's vocabulary, when that thread queues the request (Model.submit).
Messages are chat's, naming the field instead of the option.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmcli.engine.structured import OutputConstraint, constraint_from_schema, schema_to_gbnf
from llmcli.errors import UsageError
from llmcli.serve.errors import bad
from llmcli.serve.protocol import checked

RESPONSE_FORMATS = ("text", "json_object", "json_schema")
OLLAMA_FIX = 'send "json" or a JSON Schema object'


@dataclass(frozen=True)
class Asked:
    """A field that constrains the reply, checked: the field as sent, and its constraint (None for
    what asks for none: response_format "text", Ollama's empty format)."""

    field: str
    constraint: OutputConstraint | None


def _from_schema(schema: Any, field: str) -> OutputConstraint:
    try:
        return constraint_from_schema(schema, field, name=field)
    except UsageError as exc:
        raise bad(field, str(exc)) from None


# OpenAI's JSON mode and Ollama's `"format": "json"` promise a JSON object (clients index the reply
# by key); chat's `--format json` takes any JSON value (ANY_JSON).
JSON_OBJECT = {"type": "object"}


def _json_object(field: str) -> OutputConstraint:
    return OutputConstraint("json", schema_to_gbnf(JSON_OBJECT), JSON_OBJECT, field)


def _response_format(value: Any) -> OutputConstraint | None:
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in RESPONSE_FORMATS:
        raise bad("response_format", "response_format.type must be text, json_object or json_schema")
    if kind == "text":
        return None
    if kind == "json_object":
        # llama-server's, Together's and older instructor's JSON mode carry their schema here.
        schema = value.get("schema")
        if schema is None:
            return _json_object("response_format")
        return _from_schema(schema, "response_format.schema")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or "schema" not in spec:
        raise bad(
            "response_format.json_schema",
            'response_format.json_schema must be an object with a schema ({"name": ..., "schema": {...}})',
        )
    return _from_schema(spec["schema"], "response_format.json_schema.schema")


def response_format(value: Any) -> OutputConstraint | None:
    """An OpenAI response_format object, or None (what Responses' `text.format` is read as)."""
    return None if value is None else _response_format(value)


def _grammar(grammar: Any) -> Asked:
    if not isinstance(grammar, str) or not grammar.strip():
        raise bad("grammar", "grammar must be a GBNF grammar as a string (root ::= ...)")
    return Asked("grammar", OutputConstraint("grammar", grammar, None, "grammar"))


def _ollama_format(fmt: Any) -> Asked:
    """Ollama's `format`: "json", or a JSON Schema object ("" asks for nothing)."""
    if fmt == "":
        return Asked("format", None)
    if isinstance(fmt, str):
        if fmt.lower() != "json":
            raise bad("format", f"format {fmt[:40]!r} is not known; {OLLAMA_FIX}")
        return Asked("format", _json_object("format"))
    if not isinstance(fmt, dict):
        raise bad("format", f"format must be a string or an object; {OLLAMA_FIX}")
    return Asked("format", _from_schema(fmt, "format"))


# The body fields, typed as they are validated (a failure is a 400 naming the field, in chat's words).
ResponseFormat = checked(lambda value: Asked("response_format", _response_format(value)), {"type": "object"})
JsonSchema = checked(
    lambda value: Asked("json_schema", _from_schema(value, "json_schema")), {"type": "object"}
)
Grammar = checked(_grammar, {"type": "string"})
OllamaFormat = checked(_ollama_format, {"anyOf": [{"type": "string"}, {"type": "object"}]})


def one_constraint(*asked: Asked | None) -> OutputConstraint | None:
    """The reply's constraint: one of the fields that ask for one (OpenAI's response_format, or
    llama-server's json_schema or grammar), or none; two is a 400."""
    given = [each.field for each in asked if each is not None]
    if len(given) > 1:
        raise bad(given[-1], f"{' and '.join(given)} each constrain the reply; give only one")
    return next((each.constraint for each in asked if each is not None), None)
