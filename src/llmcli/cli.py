"""The Typer app: registers one module per command and holds the one error boundary.

Library code raises; this module alone turns an exception into one line on stderr and an
exit code. LLMCLI_DEBUG=1 brings the traceback back.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import typer
from typer.completion import completion_init
from typer.core import TyperCommand, TyperGroup

# Explicit, so a reader sees every edge. At module level a command module imports only typer,
# commands/options, environment and errors (tests/cli/test_startup.py checks; heavy imports live
# inside the command functions), so importing all of them is what `llmcli --help` needs and no more.
from llmcli.commands import (
    bench,
    cache,
    chat,
    completion,
    convert,
    doctor,
    embed,
    logs,
    ps,
    pull,
    render,
    rerank,
    rm,
    serve,
    show,
    tokenize,
)
from llmcli.commands import list as list_
from llmcli.environment import Environment
from llmcli.errors import ExitStatus, LlmcliError, UsageError


def _flags_show_no_value(params: list[Any]) -> list[Any]:
    """A flag takes no value, so its help row shows none (typer's rich help would print `<bool>`)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class Command(TyperCommand):
    def get_params(self, ctx):  # the help option is made here, so it is covered too
        return _flags_show_no_value(super().get_params(ctx))


class Group(TyperGroup):
    def get_params(self, ctx):
        return _flags_show_no_value(super().get_params(ctx))


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
# typer's bash/zsh/fish completers answer $_LLMCLI_COMPLETE (add_completion=True would do this)
completion_init()


def _print_version(ctx: typer.Context, value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    from llmcli.commands.options import environment

    def of(package: str) -> str:
        try:
            return version(package)
        except PackageNotFoundError:
            return "not installed"

    # As `ollama --version` and llama.cpp's `--version` do: the tool's version, then its engine's.
    environment(ctx).stdout.write(f"llmcli {of('llmcli')} (llama-cpp-python {of('llama-cpp-python')})\n")
    raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Run open LLMs on your own machine, and see where the time of every request goes."""


# name -> function, in the order `llmcli --help` lists them. Adding a command is one module in
# commands/, its import above and one line here.
COMMANDS: dict[str, Callable[..., Any]] = {
    "chat": chat.chat,
    "logs": logs.logs,
    "list": list_.list_models,
    "show": show.show,
    "rm": rm.rm,
    "tokenize": tokenize.tokenize,
    "embed": embed.embed,
    "rerank": rerank.rerank,
    "render": render.render,
    "pull": pull.pull,
    "convert": convert.convert,
    "bench": bench.bench,
    "serve": serve.serve,
    "ps": ps.ps,
    "cache": cache.cache,
    "completion": completion.completion,
    "doctor": doctor.doctor,
}
for _name, _function in COMMANDS.items():
    app.command(_name, cls=Command)(_function)


# errno -> (what happened, what to do, exit status): a path the user can fix is bad input (2), the
# machine's trouble is a runtime failure (1). errno is None for an OSError raised without one.
OS_ERRORS: dict[int | None, tuple[str, str, ExitStatus]] = {
    errno.ENOSPC: ("the disk is full", "free some space and run it again", ExitStatus.ERROR),
    errno.EACCES: ("permission denied", "check the file's permissions", ExitStatus.ERROR),
    errno.ENOENT: ("no such file", "check the path", ExitStatus.USAGE),
    errno.EISDIR: ("that is a folder, not a file", "give a file", ExitStatus.USAGE),
    errno.ENOTDIR: ("a part of that path is a file, not a folder", "check the path", ExitStatus.USAGE),
    errno.EEXIST: ("already exists", "move it away or choose another path", ExitStatus.USAGE),
}


def _os_error_message(exc: OSError) -> tuple[str, ExitStatus]:
    what, fix, status = OS_ERRORS.get(
        exc.errno, (exc.strerror or str(exc), "see LLMCLI_DEBUG=1 for details", ExitStatus.ERROR)
    )
    where = f": {exc.filename}" if exc.filename else ""
    return f"{what}{where}; {fix}", status


NOT_UTF8_FIX = "give UTF-8 text (convert it with `iconv -t UTF-8`)"


def _unicode_message(exc: UnicodeError) -> str:
    """Bytes that are not UTF-8: stdin read strictly (a UTF-8 locale), or smuggled in as lone surrogates
    (Python's surrogateescape, in the C locale) that fail when the text is encoded for llama.cpp."""
    if isinstance(exc, UnicodeDecodeError):
        byte = exc.object[exc.start]
        return f"the input is not valid UTF-8 (byte {byte:#04x} at offset {exc.start}); {NOT_UTF8_FIX}"
    return f"the input is not valid UTF-8; {NOT_UTF8_FIX}"


def _check_arguments_are_utf8(args: list[str]) -> None:
    """An argument with undecodable bytes (surrogate-escaped by Python) is refused up front, by position."""
    for i, arg in enumerate(args, 1):
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            from llmcli.display import printable  # only now: `--help` loads nothing it does not use

            shown = printable(arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"), 40)
            raise UsageError(f"argument {i} ({shown}) is not valid UTF-8; {NOT_UTF8_FIX}")


def _message_for(exc: BaseException) -> tuple[str, ExitStatus]:
    if isinstance(exc, LlmcliError):
        return str(exc), exc.exit_status
    if isinstance(exc, (UnicodeDecodeError, UnicodeEncodeError)):
        return _unicode_message(exc), ExitStatus.USAGE
    if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):
        # Click's exceptions (typer vendors its own copy of click): bad options and arguments.
        ctx = getattr(exc, "ctx", None)
        cmd = ctx.command_path if ctx else "llmcli"
        # Click lays out some messages on several lines ("Choose from:\n\tbash,\n\tzsh"): one line here.
        return f"{' '.join(exc.format_message().split())} (see `{cmd} --help`)", ExitStatus.USAGE
    if isinstance(exc, OSError):
        return _os_error_message(exc)
    return (
        f"internal error: {type(exc).__name__}: {exc} (run with LLMCLI_DEBUG=1 for the traceback)",
        ExitStatus.ERROR,
    )


def _report(env: Environment, message: str, status: ExitStatus) -> None:
    from llmcli.display import printable

    stream = env.stderr
    kind = "" if status == ExitStatus.INTERRUPTED else "error: "
    # One line, whatever a file name or a server put into the message: controls are shown escaped.
    stream.write(f"llmcli: {kind}{printable(message, limit=len(message))}\n")
    stream.flush()


def main(argv: list[str] | None = None, env: Environment | None = None) -> None:
    """Run llmcli on ARGV (default: sys.argv) in ENV (default: this process's streams and variables).

    Ends with SystemExit carrying the exit status, as a command-line program does.
    """
    env = env if env is not None else Environment()
    status = _run(argv, env)
    if status is None:  # the reader of stdout left: say nothing more (see _run)
        sys.stderr = None
        status = ExitStatus.OK
        # Python flushes stdout once more at exit, into the same closed pipe, and then exits with 1:
        # point the descriptor at /dev/null first (as Python's documentation on SIGPIPE advises).
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # stdout is not a real file (tests, embedding)
            pass
    sys.exit(status)


@functools.cache
def _command() -> Any:
    """The click command Typer builds from `app` (what `app(...)` builds on every call): built once,
    since building it reads every command's signature and evaluates its annotations (~50 ms), and
    reused by every later main() in the process."""
    return typer.main.get_command(app)


def _run(argv: list[str] | None, env: Environment) -> int | None:
    try:
        _check_arguments_are_utf8(sys.argv[1:] if argv is None else argv)
        # The Environment reaches every command as Typer's context object (ctx.obj): passed, never fetched.
        result = _command().main(args=argv, prog_name="llmcli", standalone_mode=False, obj=env)
    except (KeyboardInterrupt, typer.Abort):
        env.stderr.write("\nllmcli: interrupted\n")
        return ExitStatus.INTERRUPTED
    except typer.Exit as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):  # typer's own rendering of Ctrl-C
            env.stderr.write("\nllmcli: interrupted\n")
        return exc.exit_code
    except BrokenPipeError:
        # `llmcli chat ... | head -1`: the reader left; that is not our failure.
        return None
    except SystemExit as exc:
        # rich meets the same closed pipe (`llmcli list | head -1`, `-h | head`) by exiting with 1 from
        # inside its `except BrokenPipeError` (Console.on_broken_pipe): the same case, the same answer.
        if isinstance(exc.__context__, BrokenPipeError):
            return None
        raise
    except Exception as exc:  # the one boundary: everything a user can cause ends here
        if type(exc).__name__ == "NoArgsIsHelpError":  # bare `llmcli`: typer has printed the help
            return ExitStatus.OK
        if env.debug:
            traceback.print_exc(file=env.stderr)
        message, status = _message_for(exc)
        _report(env, message, status)
        return status
    return result if isinstance(result, int) else ExitStatus.OK
