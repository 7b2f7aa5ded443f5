"""The REPL's slash commands, as a table: adding one is one entry in SLASH_COMMANDS.

Handlers take the REPL state and the argument text and return what to show; they raise
UsageError for bad input, which the REPL prints as one line before the next prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmcli.errors import UsageError
from llmcli.params import PARAMS, USER_PARAMS
from llmcli.params import find as find_param
from llmcli.usecases.repl import ReplActions

if TYPE_CHECKING:
    from llmcli.engine.session import Session


@dataclass
class ReplState:
    session: Session  # ChatSession or RemoteChatSession
    model_name: str
    markdown: bool = False
    running: bool = True
    recorder: Any = None  # llmcli.usecases.conversation.Recorder: the conversation log, or None
    home: Path | None = None  # $HOME: what a leading `~` in /save, /load and /set schema names
    actions: ReplActions = field(default_factory=ReplActions)  # the use-cases' side of each command

    def path(self, text: str) -> Path:
        from llmcli.fsutil import expand_home

        return expand_home(text, self.home) if self.home is not None else Path(text)


@dataclass
class SlashResult:
    text: str = ""
    renderable: Any = None  # a rich renderable for stderr (tables, panels)


def _on_off(value: str) -> bool:
    table = {
        "on": True,
        "true": True,
        "1": True,
        "yes": True,
        "off": False,
        "false": False,
        "0": False,
        "no": False,
    }
    try:
        return table[value.lower()]
    except KeyError:
        raise UsageError(f"'{value}' is not on or off") from None


def _set_markdown(state: ReplState, value: str) -> None:
    state.markdown = _on_off(value)


def _set_schema(state: ReplState, value: str) -> None:
    """/set schema FILE|off: the grammar of the next replies (checked as --schema is)."""
    state.session.constraint = None if value.lower() == "off" else state.actions.schema(value, state.home)


# /set words beyond the parameter table: the REPL's own settings, each with what applies it.
REPL_SETTINGS: dict[str, Callable[[ReplState, str], None]] = {
    "markdown": _set_markdown,
    "schema": _set_schema,
}
# /set words that change the session itself: think passes enable_thinking to the template.
SESSION_SETTINGS: dict[str, Callable[[str], Any]] = {"think": _on_off}
SETTABLE_NAMES = [*USER_PARAMS, *REPL_SETTINGS, *SESSION_SETTINGS]


HELP_WIDTH = 79  # /help fits an 80-column terminal: a long description wraps under its own column


def cmd_help(state: ReplState, arg: str) -> SlashResult:
    import textwrap

    indent = " " * 25
    lines = [
        textwrap.fill(c.help, HELP_WIDTH, initial_indent=f"  {c.usage:<22} ", subsequent_indent=indent)
        for c in SLASH_COMMANDS.values()
    ]
    lines.append("  Esc+Enter (or Alt+Enter) adds a newline; Ctrl-C stops a reply; Ctrl-D exits.")
    return SlashResult("\n".join(lines))


def cmd_system(state: ReplState, arg: str) -> SlashResult:
    state.session.system = arg or None
    return SlashResult(f"system prompt {'set' if arg else 'cleared'}")


def cmd_set(state: ReplState, arg: str) -> SlashResult:
    word, _, value = arg.strip().partition(" ")
    value = value.strip()
    row = find_param(word)
    name = row.name if row else word.lower()
    if (row is None and name not in REPL_SETTINGS and name not in SESSION_SETTINGS) or not value:
        raise UsageError(f"usage: /set PARAM VALUE, PARAM one of {', '.join(SETTABLE_NAMES)}")
    if name in SESSION_SETTINGS:
        setattr(state.session, name, SESSION_SETTINGS[name](value))
    elif row is None:
        REPL_SETTINGS[name](state, value)
    else:
        # A new record rather than setattr, so SamplingParams checks itself as everywhere else.
        change: dict[str, Any] = {name: row.parse(value)}
        state.session.params = replace(state.session.params, **change)
    return SlashResult(f"{name} = {value}")


def cmd_show(state: ReplState, arg: str) -> SlashResult:
    info = state.session.describe()
    params = state.session.params.as_dict()
    lines = [f"model        {state.model_name}"]
    lines += [f"{label:<12} {value}" for label, value in info.details]
    lines += [
        f"system       {state.session.system or '(the template default)'}",
        f"markdown     {'on' if state.markdown else 'off'}",
    ]
    lines += [f"{k:<12} {PARAMS[k].none_means if v is None else v}" for k, v in params.items()]
    return SlashResult("\n".join(lines))


def cmd_stats(state: ReplState, arg: str) -> SlashResult:
    from llmcli.ui.stats import stats_table

    if state.session.last_stats is None:
        return SlashResult("no request yet")
    return SlashResult(renderable=stats_table(state.session.last_stats, state.model_name))


def cmd_clear(state: ReplState, arg: str) -> SlashResult:
    state.session.clear()
    if state.recorder is not None:
        state.recorder.new_conversation()  # the log starts a new conversation at the next exchange
    return SlashResult("conversation cleared")


def cmd_save(state: ReplState, arg: str) -> SlashResult:
    if not arg:
        raise UsageError("usage: /save FILE")
    path = state.path(arg)
    saved = state.actions.save(path, state.session, state.model_name, state.recorder)
    return SlashResult(f"saved {saved} messages to {path}")


def cmd_load(state: ReplState, arg: str) -> SlashResult:
    if not arg:
        raise UsageError("usage: /load FILE")
    path = state.path(arg)
    loaded = state.actions.load(path, state.session, state.recorder)
    logged = {
        None: "",
        True: f"; continuing conversation {loaded.conversation_id} in the log",
        False: "; the next reply starts a new conversation in the log",
    }[loaded.continued]
    return SlashResult(f"loaded {loaded.messages} messages from {path}{logged}")


def cmd_bye(state: ReplState, arg: str) -> SlashResult:
    state.running = False
    return SlashResult()


@dataclass
class SlashCommand:
    usage: str
    help: str
    handler: Callable[[ReplState, str], SlashResult]


SLASH_COMMANDS: dict[str, SlashCommand] = {
    "/help": SlashCommand("/help", "this list", cmd_help),
    "/system": SlashCommand("/system TEXT", "set the system prompt (empty: clear it)", cmd_system),
    "/set": SlashCommand("/set PARAM VALUE", ", ".join(SETTABLE_NAMES), cmd_set),
    "/show": SlashCommand("/show", "the model and the parameters", cmd_show),
    "/stats": SlashCommand("/stats", "the last request, all seven stages", cmd_stats),
    "/clear": SlashCommand("/clear", "forget the conversation", cmd_clear),
    "/save": SlashCommand("/save FILE", "save the conversation as JSON", cmd_save),
    "/load": SlashCommand("/load FILE", "load a conversation saved with /save", cmd_load),
    "/bye": SlashCommand("/bye", "exit (Ctrl-D too)", cmd_bye),
}
SLASH_ALIASES = {"/exit": "/bye", "/quit": "/bye", "/?": "/help"}


def dispatch(state: ReplState, line: str) -> SlashResult:
    name, _, arg = line.strip().partition(" ")
    name = SLASH_ALIASES.get(name.lower(), name.lower())
    command = SLASH_COMMANDS.get(name)
    if command is None:
        raise UsageError(f"unknown command {line.split()[0]}; type /help for the list")
    return command.handler(state, arg.strip())
