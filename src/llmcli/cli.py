"""The Typer app: registers one module per command and holds the one error boundary.

Library code raises; this module alone turns an exception into one line on stderr and an
exit code. LLMCLI_DEBUG=1 brings the traceback back.
"""

from __future__ import annotations

import errno
import functools
import importlib
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

import typer
from typer.completion import completion_init
from typer.core import TyperCommand, TyperGroup

from llmcli.environment import Environment
from llmcli.errors import ExitStatus, LlmcliError, UsageError
from llmcli.startup import Collector, import_rich_help


def _flags_show_no_value(params: list[Any]) -> list[Any]:
    """A flag takes no value, so its help row shows none (typer's rich help would print `<bool>`).

    The help flag not given is False rather than click's None: Typer coerces any value that is not a
    bool through pydantic, and importing it would cost `llmcli chat --help` ~50 ms for the group's
    absent --help."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
        if param.name == "help" and param.default is None:
            param.default = False
    return params


class Command(TyperCommand):
    def get_params(self, ctx):  # the help option is made here, so it is covered too
        return _flags_show_no_value(super().get_params(ctx))

    def format_help(self, ctx, formatter):
        import_rich_help()
        super().format_help(ctx, formatter)

    def invoke(self, ctx):
        Collector.resume()  # the command runs: from here on, objects may live long
        return super().invoke(ctx)


@dataclass(frozen=True)
class Entry:
    """A command as the table holds it: where its function is, and its line in `llmcli --help`."""

    module: str  # under llmcli.commands
    function: str
    help: str  # the first paragraph of the function's docstring (tests/cli/test_help_and_flags.py checks)

    def load(self, name: str) -> Any:
        """The click command Typer builds from the function, as it would inside the group."""
        function = getattr(importlib.import_module(f"llmcli.commands.{self.module}"), self.function)
        single = typer.Typer(add_completion=False)
        single.command(name, cls=Command)(function)
        return typer.main.get_command(single)


# name -> command, in the order `llmcli --help` lists them. A command's module is imported only when
# it runs or shows its own help: importing one costs its options' tables and Typer's reading of its
# signature, and `llmcli --help` lists them all from the help lines here. Adding a command is one
# module in commands/ and one line here.
COMMANDS: dict[str, Entry] = {
    "chat": Entry(
        "chat",
        "chat",
        "Chat with a model: a REPL on a terminal, a one-shot answer when given a prompt or a pipe.",
    ),
    "logs": Entry(
        "logs",
        "logs",
        "Show logged chat exchanges: the latest 3, oldest first\n"
        "(the newest is at the bottom, as in `llm logs`).",
    ),
    "list": Entry(
        "list",
        "list_models",
        "List the models in the store: name, size, quantization, architecture, parameters, source.",
    ),
    "show": Entry(
        "show",
        "show",
        "Show a model's architecture, size, heads, vocabulary, chat template and KV-cache cost.",
    ),
    "rm": Entry(
        "rm",
        "rm",
        "Remove a model from the store (files llmcli made go with it; the HF cache is left alone).",
    ),
    "tokenize": Entry(
        "tokenize", "tokenize", "Show the token ids and pieces a model's tokenizer makes of TEXT."
    ),
    "embed": Entry(
        "embed",
        "embed",
        "Print the embedding vector of each TEXT (or of each line of stdin) as one JSON line.",
    ),
    "rerank": Entry(
        "rerank",
        "rerank",
        "Rank documents by relevance to QUERY, a chat model judging each (docs/embeddings.md).",
    ),
    "render": Entry(
        "render",
        "render",
        "Print exactly the prompt `chat` would feed the model for these messages: text, or ids.",
    ),
    "pull": Entry(
        "pull",
        "pull",
        "Download a model from Hugging Face (GGUF, or safetensors converted to GGUF), "
        "resumably and verified.",
    ),
    "convert": Entry(
        "convert", "convert", "Convert a Hugging Face safetensors checkpoint to GGUF and register it."
    ),
    "bench": Entry(
        "bench", "bench", "Measure prefill (pp) and decode (tg) tokens/s the way llama-bench does."
    ),
    "serve": Entry(
        "serve",
        "serve",
        "Serve the store's models (or one) over HTTP: OpenAI's (chat and Responses), Anthropic's and\n"
        "Ollama's APIs, several requests decoded together.",
    ),
    "ps": Entry(
        "ps",
        "ps",
        "List the models a running `llmcli serve` has loaded: size, processor, context, until when.",
    ),
    "cache": Entry(
        "cache",
        "cache",
        "The disk prefix cache: KV states of piped documents and conversation tips, reused by `chat`.",
    ),
    "completion": Entry(
        "completion",
        "completion",
        "Print the completion script for SHELL: commands, options and the model names in the store.",
    ),
    "doctor": Entry(
        "doctor",
        "doctor",
        "Check llama.cpp on this machine: its build's features, the CPU's, the devices, "
        "and one decoded token.",
    ),
}


class Group(TyperGroup):
    """The commands of COMMANDS, each built when first asked for; while the group formats its own
    help, a command not yet built is listed by its help line alone."""

    listing = False

    def get_params(self, ctx):
        return _flags_show_no_value(super().get_params(ctx))

    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, cmd_name):
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        if cmd_name not in self.commands:
            if self.listing:
                return TyperCommand(cmd_name, help=entry.help)
            self.commands[cmd_name] = entry.load(cmd_name)
        return self.commands[cmd_name]

    def format_help(self, ctx, formatter):
        import_rich_help()
        self.listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self.listing = False


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
    Collector.pause()
    try:
        status = _run(argv, env)
    finally:
        Collector.finish(process_exits=argv is None)  # argv is None: the console script's own run
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
