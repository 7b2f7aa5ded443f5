"""Constrained decoding from a request: OpenAI's `response_format` (with llama-server's schema in its
json_object form), llama-server's `grammar` and `json_schema`, and Ollama's `format`, into the
OutputConstraint that `llmcli chat --schema/--format json/--grammar` uses.

A schema gets chat's checks (engine/structured.py's constraint_from_schema) here, on the request's
side; the grammar is parsed by llama.cpp on the engine thread, with the model's vocabulary, when the
request is admitted. Messages are chat's, naming the field instead of the option.
"""

from __future__ import annotations

from typing import Any

from llmcli.engine.structured import OutputConstraint, constraint_from_schema, schema_to_gbnf
from llmcli.errors import UsageError
from llmcli.serve.errors import bad

RESPONSE_FORMATS = ("text", "json_object", "json_schema")
OLLAMA_FIX = 'send "json" or a JSON Schema object'


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


def openai_constraint(response_format: Any, grammar: Any, json_schema: Any) -> OutputConstraint | None:
    """`response_format`, or llama-server's `grammar` or top-level `json_schema`: one of them, or none."""
    sent = {"response_format": response_format, "json_schema": json_schema, "grammar": grammar}
    given = [name for name, value in sent.items() if value is not None]
    if len(given) > 1:
        raise bad(given[-1], f"{' and '.join(given)} each constrain the reply; give only one")
    if response_format is not None:
        return _response_format(response_format)
    if json_schema is not None:
        return _from_schema(json_schema, "json_schema")
    if grammar is None:
        return None
    if not isinstance(grammar, str) or not grammar.strip():
        raise bad("grammar", "grammar must be a GBNF grammar as a string (root ::= ...)")
    return OutputConstraint("grammar", grammar, None, "grammar")


def ollama_constraint(fmt: Any) -> OutputConstraint | None:
    """Ollama's `format`: "json", or a JSON Schema object."""
    if fmt in (None, ""):
        return None
    if isinstance(fmt, str):
        if fmt.lower() != "json":
            raise bad("format", f"format {fmt[:40]!r} is not known; {OLLAMA_FIX}")
        return _json_object("format")
    if not isinstance(fmt, dict):
        raise bad("format", f"format must be a string or an object; {OLLAMA_FIX}")
    return _from_schema(fmt, "format")
