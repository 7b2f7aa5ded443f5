"""JSON Schemas as llama-server reads them, for the schemas llmcli does not write itself: an earlier
draft's words (every schema), and, in a tool's parameters, the keywords llama-server's converter
passes over.

--schema and response_format are the user's own and stay strict (engine/schema_check.py refuses what
the grammar cannot hold). A tool's parameters come from an agent the user does not edit: Claude
Code's tools hold `propertyNames`, `format: uri` and a `maxLength` of 524,288, and a strict refusal
would refuse every request that sends them. There, what the grammar cannot hold is left unheld, as
llama-server leaves it, and the rest is checked as strictly as ever.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from llmcli.engine.schema_check import (
    ANNOTATION,
    FORMATS,
    SCHEMA_KEYWORDS,
    SCHEMA_LISTS,
    SCHEMA_MAPS,
    SCHEMA_ONE,
)

# What llama-server's converter passes over and a grammar here cannot hold either: left out of a
# tool's parameters (its reply may then break them; the agent that runs the tool checks its input).
PASSED_OVER = (
    "multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "minProperties",
    "maxProperties", "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas",
    "dependencies", "if", "then", "else", "not", "unevaluatedProperties", "unevaluatedItems",
    "contentEncoding", "contentMediaType", "contentSchema",
)  # fmt: skip
UPPER_BOUNDS = ("maxLength", "maxItems")  # past the limit (llmcli.limits schema_repeat): unbounded
NOTES = {key for key, kind in SCHEMA_KEYWORDS.items() if kind == ANNOTATION}  # nothing to hold


def _nodes(root: dict) -> Iterator[dict]:
    """Every subschema of `root` (a copy the caller owns), each copied before it is yielded, so that
    a caller may change it in place; iterative, as a schema's depth is not bounded yet."""
    todo: list[dict] = [root]
    while todo:
        node = todo.pop()
        yield node
        children: list[tuple[Any, Any]] = []
        for key in SCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                copied = node[key] = dict(node[key])
                children += [(copied, name) for name in copied]
        for key in SCHEMA_LISTS:
            if isinstance(node.get(key), list):
                copied_list = node[key] = list(node[key])
                children += [(copied_list, i) for i in range(len(copied_list))]
        children += [(node, key) for key in SCHEMA_ONE if key in node]
        for holder, at in children:
            if isinstance(holder[at], dict):
                holder[at] = dict(holder[at])
                todo.append(holder[at])


def from_earlier_drafts(schema: Any) -> Any:
    """Draft 4-7 words that clients still send, read as llama-server reads them: an `items` list is a
    tuple (2020-12's prefixItems: those items, in order; its additionalItems is dropped, as llama-server
    makes the tuple exact). `definitions` needs nothing: it is a $ref container like $defs. A schema that
    needs no change is returned as is; one that does loses its draft's `$schema`, as it now reads as
    2020-12. Iterative: check_bounds has already bounded its size, not its depth for a recursion."""
    if not isinstance(schema, dict):
        return schema
    root: dict = dict(schema)
    changed = False
    for node in _nodes(root):
        if isinstance(node.get("items"), list):
            node["prefixItems"] = node.pop("items")
            node.pop("additionalItems", None)
            changed = True
    if changed:
        root.pop("$schema", None)
        return root
    return schema


def tool_parameters(schema: Any) -> Any:
    """A tool's parameters as llama-server reads them: an earlier draft's words, and without what its
    converter passes over (PASSED_OVER, a format it has no grammar for, an upper bound past the
    limit); a subschema of annotations alone (`{"description": ...}`) is any value, `{}`. Anything
    else is checked as --schema is."""
    from llmcli.limits import limit

    schema = from_earlier_drafts(schema)
    if not isinstance(schema, dict):
        return schema
    root: dict = dict(schema)
    for node in _nodes(root):
        for key in PASSED_OVER:
            node.pop(key, None)
        if isinstance(node.get("format"), str) and node["format"] not in FORMATS:
            del node["format"]
        for key in UPPER_BOUNDS:
            value = node.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > limit("schema_repeat"):
                del node[key]
        if node is not root and set(node) <= NOTES:
            node.clear()
    return root
