"""The reply's constraint, from chat's options, `/set schema`, chat's --tools or a request's tools,
checked before any model loads.

engine/structured.py parses the options and converts a schema to GBNF, engine/tools/grammar.py
writes the tools' grammar: the contract every backend shares. Whether llama.cpp parses the grammar
is engine/local's word (grammar.py), asked here whichever backend answers: a grammar llama.cpp
refuses is refused before a model loads or a server is called, as llama.cpp's own server would
refuse it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.engine.structured import OutputConstraint


# Each kind of constraint: the name a refusal gives it (None: its source) and whether llmcli wrote
# the grammar from the user's schema. `--format json`'s grammar is the converter's own, written from
# a fixed schema: nothing to check.
CHECKS: dict[str, tuple[str | None, bool]] = {
    "schema": ("--schema", True),
    "tools": ("tools", True),
    "grammar": (None, False),
}


def checked(constraint: OutputConstraint) -> OutputConstraint:
    """The constraint, once llama.cpp parses its grammar (UsageError naming the option otherwise)."""
    from llmcli.engine.local.grammar import check_gbnf

    if constraint.kind in CHECKS:
        name, from_schema = CHECKS[constraint.kind]
        check_gbnf(constraint.gbnf, name or constraint.source, from_schema=from_schema)
    return constraint


def constraint_from_options(
    schema: str | None, fmt: str | None, grammar: Path | None, home: Path | None
) -> OutputConstraint | None:
    """--schema, --format json, --grammar: one constraint or None, checked."""
    from llmcli.engine.structured import parse_constraint

    constraint = parse_constraint(schema, fmt, grammar, home)
    return None if constraint is None else checked(constraint)


def constraint_from_schema_arg(arg: str, home: Path | None) -> OutputConstraint:
    """/set schema FILE|JSON: checked as --schema is."""
    from llmcli.engine.structured import constraint_from_schema, load_schema

    return checked(constraint_from_schema(*load_schema(arg, home)))
