"""Structured output: `--schema`, `--format json` and `--grammar`, parsed once into an OutputConstraint.

Strict at both ends. Before generating, a schema is checked against the subset that the grammar
converter (llama-cpp-python's SchemaConverter, with exact numeric bounds added in
engine/schema_grammar.py) turns into GBNF: a keyword outside SCHEMA_KEYWORDS
is refused with one line, never ignored. A grammar is parsed by llama.cpp before the model loads
(usecases/constraint.py asks engine/local/grammar.py, whichever backend answers); a grammar that
does not parse is refused (llama.cpp's server once "failed open" on one), and so is one that
demands a character no model writes (engine/local/gbnf_chars.py: llama.cpp would abort at that
dead end). After
generating, the reply is parsed and validated with `jsonschema`: a reply that fails is an error,
so a script never receives invalid JSON with exit status 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.engine.schema_check import (
    check_bounds,
    check_is_schema,
    check_subset,
    short,
)
from llmcli.engine.schema_loosen import from_earlier_drafts
from llmcli.engine.templates.thinking import strip_thinking
from llmcli.errors import RuntimeFailure, UsageError

KINDS = ("schema", "json", "grammar", "tools")  # --schema, --format json, --grammar, tool_choice


@dataclass(frozen=True)
class OutputConstraint:
    """What the reply must be: its grammar (always), and the schema it is validated against."""

    kind: str  # one of KINDS
    gbnf: str
    schema: dict | None = None  # --schema: the user's schema; --format json: {} (any JSON value)
    source: str = ""  # where it came from, for messages: an option or a file name
    # A lazy grammar (tool_choice auto): the reply is free until it writes `trigger`, and the grammar
    # matches from the trigger on. `trigger_at_start`: only a trigger that opens the reply counts.
    trigger: str | None = None
    trigger_at_start: bool = False

    @property
    def is_json(self) -> bool:
        return self.kind in ("schema", "json")


@dataclass
class StructuredReply:
    text: str  # exactly what goes to stdout, without the trailing newline
    data: Any = None  # the parsed JSON value (None for --grammar)


def _tail(text: str, limit: int = 40) -> str:
    """The end of a reply on one line, starting with '…' when its start is cut off."""
    line = " ".join(text.split())
    return line if len(line) <= limit else "…" + line[-(limit - 1) :]


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
        raise UsageError(f"--schema: the grammar converter cannot handle it ({short(err)})") from None


# Any JSON value, from the converter's own primitives.
ANY_JSON = {"anyOf": [{"type": t} for t in ("object", "array", "string", "number", "boolean", "null")]}


# -- from the options to one constraint ---------------------------------------------------------
# What each file option holds, for its messages.
_FILE_FIX = {
    "--schema": "give a JSON Schema file, or the schema inline",
    "--grammar": "give a GBNF grammar file (root ::= ...)",
}


def _read(path: Path, option: str) -> str:
    """An option's file: regular (a FIFO would block), bounded, UTF-8 (fsutil.read_text_file)."""
    from llmcli.fsutil import read_text_file
    from llmcli.limits import limit

    return read_text_file(
        path, what=f"{option} file", fix=_FILE_FIX[option], limit=limit("option_file_bytes")
    )


def _exists(path: Path) -> bool:
    try:
        return "\n" not in str(path) and path.exists()
    except (OSError, ValueError):
        return False


def _user_path(text: str | Path, home: Path | None) -> Path:
    """A path the user gave: a leading `~` is HOME (the caller's $HOME, passed in; None: taken as given)."""
    from llmcli.fsutil import expand_home

    return expand_home(text, home) if home is not None else Path(text)


def load_schema(arg: str, home: Path | None = None) -> tuple[dict, str]:
    """--schema SCHEMA: inline JSON when it starts with '{', else a file path (`~` is HOME)."""
    text, source = arg, "--schema"
    if not arg.lstrip().startswith(("{", "[")):
        path = _user_path(arg, home)
        if not _exists(path):
            try:
                return json.loads(arg), source  # 42, true, "": JSON, just not a schema (said next)
            except (ValueError, RecursionError):
                pass
            raise UsageError(
                f"--schema {short(arg, 60)!r} is neither JSON nor a file; "
                "give a JSON Schema inline or a file path"
            )
        text, source = _read(path, "--schema"), arg
    try:
        schema = json.loads(text)
    except ValueError as err:
        raise UsageError(
            f"--schema {'' if source == '--schema' else source + ' '}is not JSON "
            f"({short(err)}); give a JSON Schema inline or a file path"
        ) from None
    except RecursionError:
        raise UsageError("--schema nests too deeply") from None
    return schema, source


def constraint_from_schema(
    schema: Any, source: str = "--schema", *, name: str = "--schema"
) -> OutputConstraint:
    """A schema checked (its bounds, the metaschema, the supported subset, the converter) into its
    constraint, for chat's --schema and the server's schema fields alike. source: where it came from
    (an option, a file, a field); name: what its refusals call it (chat's option, a request's field)."""
    try:
        check_bounds(schema)  # first: jsonschema's own check is slow on what the bounds refuse
        schema = from_earlier_drafts(schema)  # engine/schema_loosen.py
        check_is_schema(schema)
        check_subset(schema)
        gbnf = schema_to_gbnf(schema)
    except UsageError as exc:
        if name == "--schema":
            raise
        raise UsageError(str(exc).replace("--schema", name, 1)) from None
    return OutputConstraint("schema", gbnf, schema, source)


def parse_constraint(
    schema: str | None = None, fmt: str | None = None, grammar: Path | None = None, home: Path | None = None
) -> OutputConstraint | None:
    """The three options into one value (or None), before a model loads. Whether llama.cpp parses the
    grammar is the local backend's word: usecases/constraint.py asks it."""
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
        return OutputConstraint("grammar", gbnf, None, str(grammar))
    return None


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
                f"the reply does not match the schema at {error.json_path}: {short(error.message)}"
            )
    return StructuredReply(body, data)
