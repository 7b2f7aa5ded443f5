"""Structured output: `--schema`, `--format json` and `--grammar`, parsed once into an OutputConstraint.

Strict at both ends. Before generating, a schema is checked against the subset that the grammar
converter (llama-cpp-python's SchemaConverter, with exact numeric bounds added in
engine/schema_grammar.py) turns into GBNF: a keyword outside SCHEMA_KEYWORDS
is refused with one line, never ignored. A grammar is parsed by llama.cpp before the model loads;
a grammar that does not parse is refused (llama.cpp's server once "failed open" on one). After
generating, the reply is parsed and validated with `jsonschema`: a reply that fails is an error,
so a script never receives invalid JSON with exit status 0.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.engine.schema_grammar import BOUND_KEYWORDS
from llmcli.errors import RuntimeFailure, UsageError

KINDS = ("schema", "json", "grammar")  # --schema, --format json, --grammar


@dataclass(frozen=True)
class OutputConstraint:
    """What the reply must be: its grammar (always), and the schema it is validated against."""

    kind: str  # one of KINDS
    gbnf: str
    schema: dict | None = None  # --schema: the user's schema; --format json: {} (any JSON value)
    source: str = ""  # where it came from, for messages: an option or a file name

    @property
    def is_json(self) -> bool:
        return self.kind in ("schema", "json")


@dataclass
class StructuredReply:
    text: str  # exactly what goes to stdout, without the trailing newline
    data: Any = None  # the parsed JSON value (None for --grammar)


# -- the supported subset, as a table --------------------------------------------------------
# Every JSON Schema keyword the checker knows: "grammar" (enforced while generating), "annotation"
# (no constraint on the value, nothing to enforce), or a refusal with its reason. A keyword that is
# not in the table is refused too. After generation, jsonschema validates the reply against the
# whole schema either way.
GRAMMAR, ANNOTATION = "grammar", "annotation"
SCHEMA_KEYWORDS: dict[str, str] = {
    "type": GRAMMAR,
    "properties": GRAMMAR,
    "required": GRAMMAR,
    "additionalProperties": GRAMMAR,
    "items": GRAMMAR,
    "prefixItems": GRAMMAR,
    "minItems": GRAMMAR,
    "maxItems": GRAMMAR,
    "enum": GRAMMAR,
    "const": GRAMMAR,
    "anyOf": GRAMMAR,
    "oneOf": GRAMMAR,  # generated as anyOf; "exactly one" is checked after generation
    "$ref": GRAMMAR,  # local references only ("#/...")
    "pattern": GRAMMAR,  # anchored ^...$, the converter's regex subset
    "format": GRAMMAR,  # date, time, date-time, uuid
    "minLength": GRAMMAR,
    "maxLength": GRAMMAR,
    "$defs": ANNOTATION,
    "definitions": ANNOTATION,  # containers for $ref targets
    "title": ANNOTATION,
    "description": ANNOTATION,
    "$schema": ANNOTATION,
    "$id": ANNOTATION,
    "$comment": ANNOTATION,
    "examples": ANNOTATION,
    "default": ANNOTATION,
    "deprecated": ANNOTATION,
    "readOnly": ANNOTATION,
    "writeOnly": ANNOTATION,
    "minimum": GRAMMAR,  # exact bounds (engine/schema_grammar.py), type integer or number
    "maximum": GRAMMAR,
    "exclusiveMinimum": GRAMMAR,
    "exclusiveMaximum": GRAMMAR,
    "multipleOf": "a grammar cannot express divisibility",
    "uniqueItems": "a grammar cannot express uniqueness",
    "contains": "the grammar converter does not support contains",
    "minContains": "the grammar converter does not support contains",
    "maxContains": "the grammar converter does not support contains",
    "minProperties": "the grammar converter does not count properties",
    "maxProperties": "the grammar converter does not count properties",
    "patternProperties": "the grammar converter does not support patternProperties",
    "propertyNames": "the grammar converter does not support propertyNames",
    "dependentRequired": "the grammar converter does not support dependencies",
    "dependentSchemas": "the grammar converter does not support dependencies",
    "dependencies": "the grammar converter does not support dependencies",
    "if": "the grammar converter does not support if/then/else",
    "then": "the grammar converter does not support if/then/else",
    "else": "the grammar converter does not support if/then/else",
    "not": "a grammar cannot express negation",
    "allOf": "the grammar converter only merges properties of allOf; write one object",
    "unevaluatedProperties": "the grammar converter does not support unevaluated*",
    "unevaluatedItems": "the grammar converter does not support unevaluated*",
    "additionalItems": "use prefixItems and items (draft 2020-12)",
    "contentEncoding": "the grammar converter does not support content*",
    "contentMediaType": "the grammar converter does not support content*",
    "contentSchema": "the grammar converter does not support content*",
    "$anchor": "only local $ref paths (#/...) are supported",
    "$dynamicRef": "only local $ref paths (#/...) are supported",
    "$dynamicAnchor": "only local $ref paths (#/...) are supported",
    "$vocabulary": "custom vocabularies are not supported",
}
FORMATS = ("date", "time", "date-time", "uuid", "uuid1", "uuid2", "uuid3", "uuid4", "uuid5")
TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")

# Keywords that hold subschemas: a map of them, a list of them, or one (or a bool).
_SCHEMA_MAPS = ("properties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
_SCHEMA_ONE = ("items", "additionalProperties")
# Keywords after which the converter looks at nothing else of the same subschema.
_EXCLUSIVE = ("$ref", "anyOf", "oneOf", "const", "enum")


def _refuse(where: str, text: str) -> UsageError:
    return UsageError(f"--schema: {text} at {where or '/'}; see docs/structured-output.md")


def resolve_ref(root: Any, ref: str) -> bool:
    """Does a local $ref ('#/a/b', a JSON Pointer: ~1 is '/', ~0 is '~') point into the schema?"""
    from urllib.parse import unquote

    node = root
    for raw in ref[2:].split("/") if ref != "#/" else [""]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False
    return True


def _check_node(node: Any, where: str, depth: int, root: Any = None) -> None:
    """One subschema: every keyword known and supported, in combinations the converter honours."""
    if isinstance(node, bool):
        if not where.endswith("/additionalProperties"):
            raise _refuse(where, "a true/false subschema (only additionalProperties takes one)")
        return
    if not isinstance(node, dict):
        raise _refuse(where, "a subschema must be an object")
    if depth > 64:
        raise _refuse(where, "the schema nests deeper than 64 levels")
    for key in node:
        status = SCHEMA_KEYWORDS.get(key)
        if status is None:
            raise _refuse(where, f"unknown keyword {key!r}")
        if status not in (GRAMMAR, ANNOTATION):
            raise _refuse(where, f"unsupported keyword {key!r} ({status})")
    constraints = [k for k in node if SCHEMA_KEYWORDS[k] == GRAMMAR]
    for key in _EXCLUSIVE:
        if key in node and len(constraints) > 1 and not set(constraints) <= {key, "type"}:
            others = ", ".join(k for k in constraints if k != key)
            raise _refuse(where, f"{key} beside {others} (the converter would drop them); nest them instead")
    if key_type := node.get("type"):
        types = key_type if isinstance(key_type, list) else [key_type]
        if isinstance(key_type, list) and len(constraints) > 1:
            raise _refuse(where, "a list of types beside other keywords; use anyOf with one type each")
        if any(t not in TYPES for t in types):
            raise _refuse(where, f"type must be one of {', '.join(TYPES)}")
    if "format" in node and node["format"] not in FORMATS:
        raise _refuse(where, f"format {node['format']!r} has no grammar (supported: {', '.join(FORMATS)})")
    if ("minLength" in node or "maxLength" in node) and (
        node.get("type") != "string" or "pattern" in node or "format" in node
    ):
        raise _refuse(where, "minLength/maxLength need type string, without pattern or format")
    if bounds := [k for k in BOUND_KEYWORDS if k in node]:
        if node.get("type") not in ("integer", "number"):
            raise _refuse(where, f"{bounds[0]} needs type integer or number")
        for key in bounds:
            value = node[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise _refuse(
                    where, f"{key} must be a finite number (draft 2020-12), not {_short(value, 20)}"
                )
    if ("minItems" in node or "maxItems" in node) and not isinstance(node.get("items"), dict):
        raise _refuse(where, "minItems/maxItems need items to be one schema")
    if "pattern" in node and "format" in node:
        raise _refuse(where, "pattern beside format (the converter would drop format)")
    if "items" in node and "prefixItems" in node:
        raise _refuse(where, "items beside prefixItems (the converter would drop one)")
    if "pattern" in node and not (
        isinstance(node["pattern"], str) and node["pattern"].startswith("^") and node["pattern"].endswith("$")
    ):
        raise _refuse(where, "pattern must be anchored: ^...$")
    if "$ref" in node and not str(node["$ref"]).startswith("#/"):
        raise _refuse(where, f"$ref {node['$ref']!r} is not local (#/...)")
    if "$ref" in node and not resolve_ref(node if root is None else root, node["$ref"]):
        raise _refuse(where, f"$ref {node['$ref']!r} points to nothing")
    missing = [name for name in node.get("required") or [] if name not in (node.get("properties") or {})]
    if missing:
        raise _refuse(where, f"required names {missing[0]!r}, which is not in properties")
    for key in _SCHEMA_MAPS:
        for name, sub in (node.get(key) or {}).items():
            _check_node(sub, f"{where}/{key}/{name}", depth + 1, root)
    for key in _SCHEMA_LISTS:
        for i, sub in enumerate(node.get(key) or []):
            _check_node(sub, f"{where}/{key}/{i}", depth + 1, root)
    for key in _SCHEMA_ONE:
        if key in node:
            _check_node(node[key], f"{where}/{key}", depth + 1, root)


def check_subset(schema: dict) -> None:
    """Raise UsageError (one line, naming the keyword and its place) unless every keyword is supported."""
    _check_node(schema, "", 0, schema)


def check_is_schema(schema: Any) -> None:
    """Is it a JSON Schema at all (jsonschema's metaschema check)? {"type": 5} is not."""
    import jsonschema

    if not isinstance(schema, dict):
        raise UsageError(
            "--schema must be a JSON object (a JSON Schema), e.g. "
            '\'{"type": "object", "properties": {"name": {"type": "string"}}}\''
        )
    if not isinstance(schema.get("$schema", ""), str):
        raise UsageError("--schema is not a valid JSON Schema at /$schema: it must be a URI string")
    try:
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
    except jsonschema.SchemaError as err:
        where = "/" + "/".join(str(p) for p in err.absolute_path)
        raise UsageError(f"--schema is not a valid JSON Schema at {where}: {_short(err.message)}") from None
    except RecursionError:
        raise UsageError("--schema nests too deeply to check") from None


def _tail(text: str, limit: int = 40) -> str:
    """The end of a reply on one line, starting with '…' when its start is cut off."""
    line = " ".join(text.split())
    return line if len(line) <= limit else "…" + line[-(limit - 1) :]


def _short(text: object, limit: int = 160) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def schema_to_gbnf(schema: dict) -> str:
    from llmcli.engine.schema_grammar import EmptyRange, schema_to_gbnf

    try:
        return schema_to_gbnf(schema)
    except EmptyRange as err:
        raise UsageError(f"--schema: {err}; widen the bounds") from None
    except (
        AssertionError,
        AttributeError,
        ValueError,
        KeyError,
        TypeError,
        IndexError,
        RecursionError,
    ) as err:
        # The converter reports unsupported regex syntax and bad references with asserts.
        raise UsageError(f"--schema: the grammar converter cannot handle it ({_short(err)})") from None


# Any JSON value, from the converter's own primitives.
ANY_JSON = {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]}


# -- GBNF: parsed by llama.cpp before the model loads -------------------------------------------
@contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """llama.cpp's grammar parser writes its error to fd 2 itself; keep it off the user's stderr."""
    lines: list[str] = []
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines += sink.read().decode("utf-8", "replace").splitlines()


def grammar_sampler(vocab, gbnf: str, source: str):
    """llama.cpp's grammar sampler, or UsageError with the parser's reason (never a silent no-op)."""
    from llmcli.engine.runtime import LOG_LINES, _llama

    ll = _llama()
    if not gbnf.strip():
        raise UsageError(f"{source} is empty; it needs at least a root rule (root ::= ...)")
    with _stderr_captured() as printed:
        sampler = ll.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if sampler:
        return sampler
    reason = _parse_error(printed, gbnf) or (LOG_LINES[-1].strip() if LOG_LINES else "llama.cpp refused it")
    if vocab is None and "no vocab" in reason:
        return None  # token references (<[id]>, <token>) need the model: checked again once it loads
    raise UsageError(f"{source} is not a valid GBNF grammar ({_short(reason)}); fix the grammar")


PARSE_ERROR = "error parsing grammar: "


def _parse_error(printed: list[str], gbnf: str) -> str | None:
    """llama.cpp's parse error, with where it happened. llama.cpp writes '<reason> at <the rest of
    the grammar>', a blank line, then the whole grammar: the rest is a suffix of the grammar, which
    gives the line and column (an empty rest would otherwise leave a dangling 'at')."""
    text = "\n".join(printed)
    start = text.find(PARSE_ERROR)
    if start < 0:
        return None
    what = text[start + len(PARSE_ERROR) :]
    for dump in ("\n\n" + gbnf, "\n\n" + gbnf.rstrip("\n")):  # splitlines may drop the final newline
        if what.endswith(dump):
            what = what[: len(what) - len(dump)]
            break
    at = what.find(" at ")
    while at >= 0:
        rest = what[at + 4 :]
        if gbnf.endswith(rest):
            if not rest.strip():
                where = f"the end of the grammar (line {gbnf.rstrip().count(chr(10)) + 1})"
            else:
                pos = len(gbnf) - len(rest)
                line, column = gbnf.count("\n", 0, pos) + 1, pos - (gbnf.rfind("\n", 0, pos) + 1) + 1
                where = f"line {line}, column {column}: {_short(rest, 30)}"
            return f"{what[:at]} at {where}"
        at = what.find(" at ", at + 1)
    first = what.split("\n", 1)[0].strip()
    return first[:-3] if first.endswith(" at") else first


def check_gbnf(gbnf: str, source: str) -> None:
    """Parse a grammar without a model (llama.cpp needs no vocabulary for that), then free it."""
    from llmcli.engine.runtime import _llama

    sampler = grammar_sampler(None, gbnf, source)
    if sampler:
        _llama().llama_sampler_free(sampler)


# -- from the options to one constraint ---------------------------------------------------------
def _read(path: Path, option: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{option}: no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{option}: cannot read {path} ({_short(err)})") from None


def _user_path(text: str | Path, home: Path | None) -> Path:
    """A path the user gave: a leading `~` is HOME (the caller's $HOME, passed in; None: taken as given)."""
    from llmcli.fsutil import expand_home

    return expand_home(text, home) if home is not None else Path(text)


def load_schema(arg: str, home: Path | None = None) -> tuple[dict, str]:
    """--schema SCHEMA: inline JSON when it starts with '{', else a file path (`~` is HOME)."""
    text, source = arg, "--schema"
    if not arg.lstrip().startswith(("{", "[")):
        path = _user_path(arg, home)
        if not path.is_file():
            try:
                return json.loads(arg), source  # 42, true, "": JSON, just not a schema (said next)
            except (ValueError, RecursionError):
                pass
            raise UsageError(
                f"--schema {_short(arg, 60)!r} is neither JSON nor a file; "
                "give a JSON Schema inline or a file path"
            )
        text, source = _read(path, "--schema"), arg
    try:
        schema = json.loads(text)
    except ValueError as err:
        raise UsageError(
            f"--schema {'' if source == '--schema' else source + ' '}is not JSON "
            f"({_short(err)}); give a JSON Schema inline or a file path"
        ) from None
    except RecursionError:
        raise UsageError("--schema nests too deeply") from None
    return schema, source


def constraint_from_schema(schema: Any, source: str = "--schema") -> OutputConstraint:
    check_is_schema(schema)
    check_subset(schema)
    return OutputConstraint("schema", schema_to_gbnf(schema), schema, source)


def parse_constraint(
    schema: str | None = None, fmt: str | None = None, grammar: Path | None = None, home: Path | None = None
) -> OutputConstraint | None:
    """The three options into one value (or None); everything is checked here, before a model loads.
    `home` is what a leading `~` in a file's path names."""
    given = [
        name
        for name, value in (("--schema", schema), ("--format", fmt), ("--grammar", grammar))
        if value is not None
    ]
    if len(given) > 1:
        raise UsageError(f"{' and '.join(given)} each constrain the reply; give only one")
    if schema is not None:
        return constraint_from_schema(*load_schema(schema, home))
    if fmt is not None:
        if fmt.lower() != "json":
            raise UsageError(f"--format {fmt!r} is not known; the one format is json")
        return OutputConstraint("json", schema_to_gbnf(ANY_JSON), {}, "--format json")
    if grammar is not None:
        gbnf = _read(_user_path(grammar, home), "--grammar")
        check_gbnf(gbnf, str(grammar))
        return OutputConstraint("grammar", gbnf, None, str(grammar))
    return None


# -- thinking: the grammar applies after </think> ------------------------------------------------
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ThinkGate:
    """When the grammar starts to apply: at once, or after a thinking block is closed.

    A reasoning model may open its reply with <think> (a single token in its vocabulary), or its
    template may open the block in the prompt. Either way the model thinks freely, and the grammar
    applies from the token after </think> (the idea of llama.cpp's lazy grammar).
    """

    def __init__(self, think_token: int | None, opened_in_prompt: bool = False) -> None:
        self.think_token = think_token
        self.state = (
            "thinking" if opened_in_prompt else ("undecided" if think_token is not None else "constrained")
        )
        self._text = ""

    @property
    def constrained(self) -> bool:
        return self.state == "constrained"

    def first(self, token: int) -> bool:
        """The first token was drawn unconstrained; True if it opens a thinking block."""
        self.state = "thinking" if token == self.think_token else "constrained"
        return self.state == "thinking"

    def observe(self, piece: str) -> None:
        """Text generated while thinking; the grammar starts after the closing tag."""
        if self.state == "thinking":
            self._text = (self._text + piece)[-64:]
            if THINK_CLOSE in self._text:
                self.state = "constrained"


def strip_thinking(text: str) -> str:
    """The reply after its thinking block, if it has one."""
    head, sep, tail = text.partition(THINK_CLOSE)
    if sep and (head.lstrip().startswith(THINK_OPEN) or THINK_OPEN not in head):
        return tail
    return text


# -- after generation: parse and validate --------------------------------------------------------
def finish(constraint: OutputConstraint, text: str, finish_reason: str = "stop") -> StructuredReply:
    """The reply as stdout gets it, or RuntimeFailure (exit 1) naming the failing path."""
    body = strip_thinking(text).strip()
    if not constraint.is_json:
        return StructuredReply(body)
    cut = " (max tokens reached: raise -n)" if finish_reason == "length" else ""
    if not body:
        raise RuntimeFailure(f"the reply is incomplete JSON: it is empty{cut}")
    try:
        data = json.loads(body)
    except json.JSONDecodeError as err:
        if err.pos >= len(body) or finish_reason == "length":
            raise RuntimeFailure(f"the reply is incomplete JSON{cut}: {_tail(body)}") from None
        raise RuntimeFailure(f"the reply is not JSON ({err.msg} at char {err.pos})") from None
    except RecursionError:
        raise RuntimeFailure("the reply is JSON nested too deeply to parse") from None
    if constraint.schema:
        import jsonschema

        cls = jsonschema.validators.validator_for(constraint.schema, default=jsonschema.Draft202012Validator)
        error = jsonschema.exceptions.best_match(cls(constraint.schema).iter_errors(data))
        if error is not None:
            raise RuntimeFailure(
                f"the reply does not match the schema at {error.json_path}: {_short(error.message)}"
            )
    return StructuredReply(body, data)
