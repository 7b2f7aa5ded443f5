"""`tool_choice` as a grammar: the family's call markup, with each tool's arguments from its schema.

`tool_constraint(tools, form, choice)` gives the OutputConstraint a reply follows:
- "none": no grammar (None); the tools may still be in the prompt;
- "required": from the first token, one call (or several, with `parallel`) to any of the tools;
- "named": exactly one call, to that function (as vLLM and OpenAI answer a named tool_choice;
  allowing more let a small model repeat the call until max_tokens cut it off). The reply is the
  arguments object alone, under the function's schema: the name and the family's markup are known,
  so the reader (stream.NamedCallStream) builds the call, and a client's small max_tokens buys the
  arguments only (a forced call in the generic form cost 42 tokens on SmolLM2, and 32 cut it off);
- "auto": lazy. The reply is free text until it writes the family's opening marker (the
  constraint's `trigger`); from the marker on, the grammar applies, so a text answer stays free and
  a call is well formed. The whole-reply forms (llama3, generic) have no marker: their trigger is a
  `{` at the reply's start (`trigger_at_start`), as llama-server triggers on `{"` there. A reply
  that starts with anything else is never constrained.

Each tool's `parameters` schema goes through the converter that `--schema` uses
(engine/schema_grammar.py) with the same checks; its rules are renamed `t<i>-…` so that several
schemas fit one grammar. What the grammar writes is exactly what the form's reader
(engine/tools/formats.py) reads back as the calls.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from llmcli.engine.schema_grammar import gbnf_literal, json_text
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.tools.definitions import BadTool, one_line
from llmcli.engine.tools.formats import ToolFormat
from llmcli.errors import UsageError

MODES = ("none", "auto", "required", "named")


@dataclass(frozen=True)
class ToolChoice:
    mode: str  # one of MODES
    name: str | None = None  # the function, for "named"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"tool choice {self.mode!r} is not one of {', '.join(MODES)}")
        if (self.mode == "named") != (self.name is not None):
            raise ValueError('a function name goes with "named", and only with it')

    @classmethod
    def parse(cls, text: str) -> ToolChoice:
        """`auto`, `none`, `required`, or a function's name (chat's --tool-choice)."""
        return cls(text) if text in ("auto", "none", "required") else cls("named", text)


# Whitespace between markup and calls, bounded, so that no reply loops on it.
WS = 'ws ::= | " " | "\\n" [ \\t]{0,20}'
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}


@dataclass(frozen=True)
class Markup:
    """How one family writes its calls, as GBNF over `call` (one call) or a named call `seg`."""

    root: Callable[[bool, bool], str]  # (parallel, lazy) -> the root rule's body
    key: str = "arguments"  # Llama 3 writes "parameters"
    trigger: str | None = None  # the opening marker that starts a lazy grammar
    at_start: bool = False  # the trigger counts only at the reply's start (whole-reply forms)


# Parallel calls per reply: a small model that repeats one call would otherwise run to its token
# limit and end with a cut, malformed call; with a bound its reply ends well formed.
MAX_CALLS = 8


def _listed(one: str, parallel: bool, separator: str) -> str:
    return f"{one} ({separator} {one}){{0,{MAX_CALLS - 1}}}" if parallel else one


MARKUPS: dict[str, Markup] = {
    "hermes": Markup(
        lambda parallel, lazy: _listed('"<tool_call>" ws call ws "</tool_call>"', parallel, "ws"),
        trigger="<tool_call>",
    ),
    "mistral": Markup(
        lambda parallel, lazy: '"[TOOL_CALLS]" ws "[" ' + _listed("call", parallel, '"," ws') + ' "]"',
        trigger="[TOOL_CALLS]",
    ),
    # The generation prompt wrote the first `>>>`: a forced reply starts at its recipient line; a lazy
    # one starts at a later `>>>` (a call in the reply's first segment is left free, and still read).
    "functionary": Markup(
        lambda parallel, lazy: ('">>>" ' if lazy else "") + _listed("seg", parallel, '">>>"'),
        trigger=">>>",
    ),
    "llama3": Markup(
        lambda parallel, lazy: _listed("call", parallel, '";" ws'),
        key="parameters",
        trigger="{",
        at_start=True,
    ),
    # A lazy generic reply that opens `{` may still be an answer: {"response": "..."}, read as text.
    "generic": Markup(
        lambda parallel, lazy: (
            '"{\\"tool_calls\\": [" '
            + _listed("call", parallel, '"," ws')
            + ' "]}"'
            + (' | "{\\"response\\": " response "}"' if lazy else "")
        ),
        trigger="{",
        at_start=True,
    ),
}


# -- one grammar out of several schemas --------------------------------------------------------
# GBNF read as llama.cpp reads it: literals, character classes and repetition counts are skipped,
# so only rule names are renamed.
_GBNF_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]|\{[^}]*\}|#[^\n]*|[A-Za-z0-9_-]+|.', re.S)
_RULE_NAME = re.compile(r"^([A-Za-z0-9_-]+)\s*::=", re.M)


def namespaced(gbnf: str, prefix: str) -> str:
    """A converter grammar with every rule renamed PREFIX-name (its `root` becomes PREFIX-root)."""
    names = set(_RULE_NAME.findall(gbnf))
    return "".join(f"{prefix}-{token}" if token in names else token for token in _GBNF_TOKEN.findall(gbnf))


def _arguments_grammar(schema: object, where: str, prefix: str) -> str:
    """A tool's parameters schema as rules named PREFIX-…; BadTool names the field when refused."""
    from llmcli.engine.schema_check import check_bounds, check_is_schema, check_subset
    from llmcli.engine.schema_loosen import tool_parameters
    from llmcli.engine.structured import schema_to_gbnf

    try:
        schema = tool_parameters(schema)  # as llama-server reads an agent's tools
        check_bounds(schema)
        check_is_schema(schema)
        assert isinstance(schema, dict)
        check_subset(schema)
        gbnf = schema_to_gbnf(schema)
    except UsageError as err:
        raise BadTool(one_line(re.sub("^--schema", where, str(err))), where) from None
    return namespaced(gbnf, prefix)


def _arguments_rules(i: int, function: dict) -> str:
    """Tool i's arguments as rules named t<i>-…: its parameters schema, always an object."""
    where = f"tools[{i}].function.parameters"
    schema = function.get("parameters", NO_PARAMETERS)
    if isinstance(schema, dict) and "type" not in schema:
        schema = {**schema, "type": "object"}  # arguments are an object, whatever else it says
    if isinstance(schema, dict) and isinstance(schema["type"], str) and schema["type"] != "object":
        raise BadTool(f'{where} must describe an object ("type": "object"): arguments are one', where)
    return _arguments_grammar(schema, where, f"t{i}")


def _call_rules(tools: list[tuple[int, dict]], markup: Markup) -> list[str]:
    """`call` (JSON forms) and `seg` (Functionary) over the (index, tool) pairs, and each tool's
    argument rules."""
    calls, segs, rules = [], [], []
    for i, tool in tools:
        function = tool["function"]
        rules.append(_arguments_rules(i, function))
        head = gbnf_literal('{"name": ' + json_text(function["name"]) + f', "{markup.key}": ')
        calls.append(f'{head} t{i}-root "}}"')
        segs.append(f"{gbnf_literal(function['name'] + chr(10))} t{i}-root")
    rules.append("call ::= " + " | ".join(f"({c})" for c in calls))
    rules.append("seg ::= " + " | ".join(f"({s})" for s in segs))
    return rules


def tool_constraint(
    tools: list[dict], form: ToolFormat, choice: ToolChoice, *, parallel: bool = True
) -> OutputConstraint | None:
    """The grammar a reply follows for this tool_choice (None for "none", or "auto" with no tools).
    `tools` is what check_tools returns. BadTool when a schema cannot be a grammar or the named
    function is not among the tools. Whether llama.cpp parses the grammar is the local backend's
    word, asked by the use-case (usecases/constraint.py), as for --schema."""
    if choice.mode == "none" or (choice.mode == "auto" and not tools):
        return None
    if not tools:
        raise BadTool(f"tool_choice {choice.mode} needs at least one tool")
    chosen = list(enumerate(tools))
    if choice.mode == "named":
        chosen = [(i, tool) for i, tool in chosen if tool["function"]["name"] == choice.name]
        if not chosen:
            raise BadTool(f"tool_choice names {choice.name!r}, which is not among the tools")
        parallel = False
    markup = MARKUPS[form.name]
    if choice.mode == "named":  # the arguments alone: NamedCallStream builds the call from the name
        ((i, tool),) = chosen
        rules = [f"root ::= t{i}-root", _arguments_rules(i, tool["function"])]
        return OutputConstraint("tools", "\n".join(rules) + "\n", source="tools")
    lazy = choice.mode == "auto"
    rules = [f"root ::= {markup.root(parallel, lazy)}", WS, *_call_rules(chosen, markup)]
    if lazy and form.name == "generic":
        rules += ["response ::= r-root", _arguments_grammar({"type": "string"}, "response", "r")]
    return OutputConstraint(
        "tools",
        "\n".join(rules) + "\n",
        source="tools",
        trigger=markup.trigger if lazy else None,
        trigger_at_start=lazy and markup.at_start,
    )
