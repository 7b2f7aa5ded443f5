"""Is a --schema one llmcli can enforce? The supported subset of JSON Schema, as a table, and the
bounds on what the grammar converter would write out one by one (llmcli.limits).

Strict: a keyword outside SCHEMA_KEYWORDS is refused with one line, never ignored, and every
refusal names the keyword and its place in the schema, in the schema's own words.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from llmcli.engine.schema_grammar import BOUND_KEYWORDS
from llmcli.errors import UsageError

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
SCHEMA_MAPS = ("properties", "$defs", "definitions")
SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
SCHEMA_ONE = ("items", "additionalProperties")
# Keywords after which the converter looks at nothing else of the same subschema.
_EXCLUSIVE = ("$ref", "anyOf", "oneOf", "const", "enum")


def _refuse(where: str, text: str) -> UsageError:
    return UsageError(f"--schema: {text} at {where or '/'}; see docs/structured-output.md")


_MISSING = object()


def ref_target(root: Any, ref: str) -> Any:
    """What a local $ref ('#/a/b', a JSON Pointer: ~1 is '/', ~0 is '~') points to, or _MISSING."""
    from urllib.parse import unquote

    node = root
    for raw in ref[2:].split("/") if ref != "#/" else [""]:
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def resolve_ref(root: Any, ref: str) -> bool:
    """Does a local $ref point into the schema?"""
    return ref_target(root, ref) is not _MISSING


def _bare_refs(node: Any) -> set[str]:
    """The $refs a value reaches before writing anything: through $ref, anyOf and oneOf only."""
    found, todo = set(), [node]
    while todo:
        here = todo.pop()
        if not isinstance(here, dict):
            continue
        if isinstance(here.get("$ref"), str):
            found.add(here["$ref"])
        for key in ("anyOf", "oneOf"):
            if isinstance(here.get(key), list):
                todo.extend(here[key])
    return found


def _check_ref_cycles(schema: dict) -> None:
    """A $ref that reaches itself with no object, array or string between describes a value that
    never starts (llama.cpp would refuse the grammar as left-recursive): say so in schema terms."""
    edges: dict[str, set[str]] = {}
    todo, walk = [], [schema]
    while walk:  # every $ref anywhere in the schema
        here = walk.pop()
        if isinstance(here, dict):
            if isinstance(here.get("$ref"), str):
                todo.append(here["$ref"])
            walk.extend(here.values())
        elif isinstance(here, list):
            walk.extend(here)
    while todo:
        ref = todo.pop()
        if ref in edges:
            continue
        target = ref_target(schema, ref) if ref.startswith("#") else _MISSING
        edges[ref] = _bare_refs(target) if target is not _MISSING else set()
        todo.extend(edges[ref])
    for start in sorted(edges):
        seen, frontier = set(), list(edges[start])
        while frontier:
            ref = frontier.pop()
            if ref == start:
                raise _refuse(
                    start[1:] or "/", f"$ref {start!r} refers to itself before any object, array or value"
                )
            if ref not in seen:
                seen.add(ref)
                frontier.extend(edges.get(ref, ()))


# Two bounds on one count: a lower one above the upper one leaves nothing to write.
_COUNT_PAIRS = (("minLength", "maxLength", "string"), ("minItems", "maxItems", "array"))


def _check_number_range(node: dict, where: str) -> None:
    """The tighter bound of each side (an exclusive one wins a tie) must leave a value between them."""
    lower = [(node[k], k) for k in ("minimum", "exclusiveMinimum") if k in node]
    upper = [(node[k], k) for k in ("maximum", "exclusiveMaximum") if k in node]
    if not lower or not upper:
        return
    lo, lo_key = max(lower, key=lambda b: (b[0], b[1] == "exclusiveMinimum"))
    hi, hi_key = min(upper, key=lambda b: (b[0], b[1] != "exclusiveMaximum"))
    lo_x, hi_x = lo_key.startswith("exclusive"), hi_key.startswith("exclusive")
    if node.get("type") == "integer":
        first = math.floor(lo) + 1 if lo_x else math.ceil(lo)
        last = math.ceil(hi) - 1 if hi_x else math.floor(hi)
        empty, what = first > last, "integer"
    else:
        empty, what = lo > hi or (lo == hi and (lo_x or hi_x)), "number"
    if empty:
        raise _refuse(where, f"{lo_key} {lo} and {hi_key} {hi} leave no {what}")


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
                raise _refuse(where, f"{key} must be a finite number (draft 2020-12), not {short(value, 20)}")
        _check_number_range(node, where)
    for low, high, what in _COUNT_PAIRS:
        lo, hi = node.get(low), node.get(high)
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi:
            raise _refuse(where, f"{low} {lo} above {high} {hi} leaves no {what}")
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
    _check_sizes(node, where)
    missing = [name for name in node.get("required") or [] if name not in (node.get("properties") or {})]
    if missing:
        raise _refuse(where, f"required names {missing[0]!r}, which is not in properties")
    for key in SCHEMA_MAPS:
        for name, sub in (node.get(key) or {}).items():
            _check_node(sub, f"{where}/{key}/{name}", depth + 1, root)
    for key in SCHEMA_LISTS:
        for i, sub in enumerate(node.get(key) or []):
            _check_node(sub, f"{where}/{key}/{i}", depth + 1, root)
    for key in SCHEMA_ONE:
        if key in node:
            _check_node(node[key], f"{where}/{key}", depth + 1, root)


# Counts the converter writes out one by one (x{n,m} becomes m nested optionals, an enum one
# alternative a value): each is bounded before conversion, in the schema's own words.
_COUNTS = {
    "maxItems": "schema_repeat",
    "minItems": "schema_repeat",
    "maxLength": "schema_repeat",
    "minLength": "schema_repeat",
}
_LISTS = {
    "enum": "schema_enum",
    "anyOf": "schema_any_of",
    "oneOf": "schema_any_of",
    "prefixItems": "schema_repeat",
}
_PATTERN_COUNT = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def _over(where: str, what: str, value: int, name: str) -> UsageError:
    from llmcli.limits import LIMITS

    row = LIMITS[name]
    unit = f" {row.unit}" if row.unit else ""
    return UsageError(
        f"--schema: {what} {value:,} at {where or '/'} is over the limit of {row.value:,}{unit}; lower it"
    )


def _check_sizes(node: dict, where: str) -> None:
    """Every count, list and string of one subschema within llmcli.limits, before the converter
    expands them (a maxItems of 10^9 took gigabytes; an enum of 10^5 values, minutes)."""
    from llmcli.limits import limit

    for key, name in _COUNTS.items():
        value = node.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit(name):
            raise _over(where, key, value, name)
    for key, name in _LISTS.items():
        if isinstance(node.get(key), list) and len(node[key]) > limit(name):
            raise _over(where, f"{key} of", len(node[key]), name)
    properties = node.get("properties")
    if isinstance(properties, dict):
        if len(properties) > limit("schema_properties"):
            raise _over(where, "properties:", len(properties), "schema_properties")
        for prop in properties:
            if len(prop) > limit("schema_string"):
                raise _over(where, "a property name of", len(prop), "schema_string")
    for key in ("enum", "const"):
        values = node.get(key) if key == "enum" else [node[key]] if key in node else []
        for value in values if isinstance(values, list) else []:
            size = len(json.dumps(value, ensure_ascii=False)) if not isinstance(value, str) else len(value)
            if size > limit("schema_string"):
                raise _over(where, f"a {key} value of", size, "schema_string")
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        if len(pattern) > limit("schema_string"):
            raise _over(where, "a pattern of", len(pattern), "schema_string")
        for match in _PATTERN_COUNT.finditer(pattern):
            count = max(int(n) for n in match.groups() if n)
            if count > limit("schema_repeat"):
                raise _over(where, f"the pattern's {match.group()}: a count of", count, "schema_repeat")


def check_bounds(schema: Any) -> None:
    """The size checks alone, over the whole schema and before anything else reads it: jsonschema's
    own check of an anyOf of 20,000 branches takes longer than refusing it."""
    todo = [(schema, "")]
    while todo:
        node, where = todo.pop()
        if not isinstance(node, dict):
            continue
        _check_sizes(node, where)
        for key in SCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                todo += [(sub, f"{where}/{key}/{name}") for name, sub in node[key].items()]
        for key in SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                todo += [(sub, f"{where}/{key}/{i}") for i, sub in enumerate(node[key])]
        for key in SCHEMA_ONE:
            if key in node:
                todo.append((node[key], f"{where}/{key}"))


def check_subset(schema: dict) -> None:
    """Raise UsageError (one line, naming the keyword and its place) unless every keyword is supported."""
    _check_node(schema, "", 0, schema)
    _check_ref_cycles(schema)


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
        raise UsageError(f"--schema is not a valid JSON Schema at {where}: {short(err.message)}") from None
    except RecursionError:
        raise UsageError("--schema nests too deeply to check") from None


def short(text: object, limit: int = 160) -> str:
    """`text` on one line, cut to `limit` characters with "…" (a message quotes what it was given)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
