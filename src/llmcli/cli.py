"""The Typer app: registers one module per command and holds the one error boundary.

Library code raises; this module alone turns an exception into one line on stderr and an
exit code. LLMCLI_DEBUG=1 brings the traceback back.
"""

from __future__ import annotations

import errno
import sys
import traceback

import typer
from typer.completion import completion_init
from typer.core import TyperCommand, TyperGroup

# Explicit, so a reader sees every edge. At module level a command module imports only typer,
# commands/options, environment and errors (tests/cli/test_startup.py checks; heavy imports live
# inside the command functions), so importing all of them is what `llmcli --help` needs and no more.
from llmcli.commands import bench, chat, completion, convert, pull, render, rm, show, tokenize
from llmcli.commands import list as list_
from llmcli.environment import env
from llmcli.errors import ExitStatus, LlmcliError


class _FlagsShowNoValue:
    """A flag takes no value, so its help row shows none (typer's rich help would print `<bool>`)."""

    def get_params(self, ctx):  # the help option is made here, so it is covered too
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


class Command(_FlagsShowNoValue, TyperCommand):
    pass


class Group(_FlagsShowNoValue, TyperGroup):
    pass


app = typer.Typer(
    name="llmcli",
    help="Run open LLMs on your own machine, and see where the time of every request goes.",
    cls=Group,
    no_args_is_help=True,
    # `llmcli completion SHELL` prints the script instead of --install-completion editing rc files.
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
completion_init()  # typer's bash/zsh/fish completers answer $_LLMCLI_COMPLETE (add_completion=True would do this)

# name -> function, in the order `llmcli --help` lists them. Adding a command is one module in
# commands/, its import above and one line here.
COMMANDS = {
    "chat": chat.chat,
    "list": list_.list_models,
    "show": show.show,
    "rm": rm.rm,
    "tokenize": tokenize.tokenize,
    "render": render.render,
    "pull": pull.pull,
    "convert": convert.convert,
    "bench": bench.bench,
    "completion": completion.completion,
}
for _name, _function in COMMANDS.items():
    app.command(_name, cls=Command)(_function)


def _os_error_message(exc: OSError) -> tuple[str, ExitStatus]:
    # A table, not a chain of ifs: errno -> (what happened, what to do).
    table = {
        errno.ENOSPC: ("the disk is full", "free some space and run it again"),
        errno.EACCES: ("permission denied", "check the file's permissions"),
        errno.ENOENT: ("no such file", "check the path"),
        errno.EISDIR: ("that is a folder, not a file", "give a file"),
    }
    what, fix = table.get(exc.errno, (exc.strerror or str(exc), "see LLMCLI_DEBUG=1 for details"))
    where = f": {exc.filename}" if exc.filename else ""
    status = ExitStatus.USAGE if exc.errno in (errno.ENOENT, errno.EISDIR) else ExitStatus.ERROR
    return f"{what}{where}; {fix}", status


def _message_for(exc: BaseException) -> tuple[str, ExitStatus]:
    if isinstance(exc, LlmcliError):
        return str(exc), exc.exit_status
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
        # Click's exceptions (typer vendors its own copy of click): bad options and arguments.
        ctx = getattr(exc, "ctx", None)
        cmd = ctx.command_path if ctx else "llmcli"
        return f"{exc.format_message()} (see `{cmd} --help`)", ExitStatus.USAGE
    if isinstance(exc, OSError):
        return _os_error_message(exc)
    return (f"internal error: {type(exc).__name__}: {exc} (run with LLMCLI_DEBUG=1 for the traceback)",
            ExitStatus.ERROR)


def _report(message: str, status: ExitStatus) -> None:
    stream = env.stderr
    kind = "" if status == ExitStatus.INTERRUPTED else "error: "
    stream.write(f"llmcli: {kind}{message}\n")
    stream.flush()


def main(argv: list[str] | None = None) -> None:
    try:
        result = app(args=argv, prog_name="llmcli", standalone_mode=False)
    except (KeyboardInterrupt, typer.Abort):
        env.stderr.write("\nllmcli: interrupted\n")
        sys.exit(ExitStatus.INTERRUPTED)
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # typer's own rendering of Ctrl-C
            env.stderr.write("\nllmcli: interrupted\n")
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        # `llmcli chat ... | head -1`: the reader left; that is not our failure.
        sys.stderr = None  # type: ignore[assignment]
        sys.exit(ExitStatus.OK)
    except Exception as exc:  # the one boundary: everything a user can cause ends here
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `llmcli`: typer has printed the help
            sys.exit(ExitStatus.OK)
        if env.debug:
            traceback.print_exc()
        message, status = _message_for(exc)
        _report(message, status)
        sys.exit(status)
    sys.exit(result if isinstance(result, int) else ExitStatus.OK)
