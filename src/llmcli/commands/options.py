"""Options shared by several commands, declared once so their help reads the same everywhere.

A short flag means one thing in every command (tests/cli/test_help_and_flags.py checks the whole app):
-c --continue (chat, as in `llm`), -n --max-tokens (chat, as llama-cli's -n), -m --model, -s --system,
-t --threads, -o --output (a path), -q --outtype (the GGUF type to write, as Ollama's -q),
-p --n-prompt, -r --repetitions, -b --batch-size (bench, as llama-bench). Everything else is long only:
--ctx, bench's --n-gen, logs' --count and --query. `--json` is one JSON document on stdout, in every
command that prints a result; `--format` is chat's constrained decoding and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from llmcli.convert.outtypes import OUTTYPES
from llmcli.environment import Environment
from llmcli.errors import UsageError
from llmcli.offload import GpuLayers
from llmcli.params import PARAMS

if TYPE_CHECKING:
    from llmcli.engine.sampling import SamplingParams

# What a completed name may hold: the shells insert a completion as typed text, unquoted, so `$(...)`,
# `;`, a quote, a space or a newline would run or split on the command line, and an escape sequence
# would reach the terminal. A store name with anything else is not offered (it can still be typed).
SAFE_NAME_PUNCTUATION = frozenset("._-:/+@=,%")


def offerable(name: str) -> bool:
    """Whether a shell may be given `name` as a completion: letters, digits and SAFE_NAME_PUNCTUATION."""
    return bool(name) and all(c.isalnum() or c in SAFE_NAME_PUNCTUATION for c in name)


def environment(ctx: typer.Context) -> Environment:
    """The Environment `cli.main` passed down as Typer's context object: streams, terminal, variables."""
    env = ctx.obj
    if not isinstance(env, Environment):  # the app run without cli.main: a bug, not a user's mistake
        raise TypeError("llmcli's commands run through llmcli.cli.main, which passes the Environment")
    return env


def complete_model_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion for MODEL: the store's names that start with what was typed.

    Runs on every Tab press, so it imports only the store (standard library only).
    """
    from llmcli.store import Store
    from llmcli.usecases.models import model_names

    try:
        names = model_names(Store(environment(ctx).store_root))
    except Exception:  # a damaged manifest must not break the shell's Tab; `llmcli list` reports it
        return []
    return [name for name in names if name.startswith(incomplete) and offerable(name)]


def renamed_option(*old: str, now: str | Mapping[str, str]) -> Any:
    """A hidden option for a flag renamed before 1.0: giving it is a usage error that names the new flag.

    `now` is the new flag, which takes the same value; or, where each value became a flag of its
    own (bench's `-f json` -> `--json`), a table from the old value to what replaces it.
    """

    def refuse(value: Optional[str]) -> None:  # noqa: UP045 (typer reads the annotation)
        if value is None:
            return
        if isinstance(now, str):
            instead, renamed = f"{now.split('/')[0]} {value}", now
        else:
            flags = [flag for flag in now.values() if flag.startswith("-")]
            instead = now.get(value.strip().lower(), " or ".join(flags))
            renamed = ", ".join(flags)
        raise UsageError(
            f"{old[0]} {value} is now {instead}: {'/'.join(old)} was renamed {renamed} before 1.0"
        )

    refuse.renamed = True  # type: ignore[attr-defined]  # how the flags test tells a refusal from a meaning
    return typer.Option(*old, hidden=True, callback=refuse, show_default=False)


RequiredModelArg = Annotated[
    str,
    typer.Argument(
        metavar="MODEL",
        autocompletion=complete_model_names,
        show_default=False,
        help="A .gguf path, a name from `llmcli list`, or an unambiguous prefix of one.",
    ),
]


# Long only: -c is chat's --continue.
CtxOpt = Annotated[
    Optional[int],
    typer.Option(
        "--ctx",
        min=16,
        show_default=False,
        help="Context size in tokens. Default: min(trained context, 4096).",
    ),
]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option(
        "-t",
        "--threads",
        min=1,
        help="CPU threads. Default: the usable cores other processes leave free, followed while decoding.",
        show_default=False,
    ),
]


def file_option(flag: str, help: str) -> Any:
    """An option naming a FILE (--chat-template, --filter, --grammar, --messages, --tools...): the
    typer.Option for `Annotated[Optional[Path], file_option(FLAG, HELP)]`."""
    return typer.Option(flag, metavar="FILE", show_default=False, help=help)


ChatTemplateOpt = Annotated[
    Optional[Path],
    file_option(
        "--chat-template",
        "A Jinja chat template (UTF-8) to use instead of the model's; rendered in the same sandbox.",
    ),
]
ThinkOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--think/--no-think",
        show_default=False,
        help="Turn a thinking model's reasoning on or off (enable_thinking), where its template can. "
        "\\[the template's default]",
    ),
]


# Long only: llama.cpp's -ngl is two letters after one dash, and -n is --max-tokens here.
GpuLayersOpt = Annotated[
    Optional[GpuLayers],
    typer.Option(
        "--gpu-layers",
        metavar="N|all",
        parser=GpuLayers.parse,
        show_default=False,
        help="Layers llama.cpp offloads to the GPU (llama.cpp's -ngl, Ollama's num_gpu): all, or a number "
        "(0: CPU only). Without a GPU build every layer stays on the CPU. \\[all]",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
PoolingOpt = Annotated[
    Optional[str],
    typer.Option(
        "--pooling",
        help="How a chat (decoder) model pools its tokens into one embedding: mean, cls or last "
        "(an embedding model's GGUF says its own).",
        show_default=False,
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option("--dry-run", help="Print the plan and stop; nothing is written. With --json, as JSON."),
]


# From the table, so a new outtype shows up in pull's and convert's help by itself.
OUTTYPE_NAMES = (
    f"{', '.join(n for n, t in OUTTYPES.items() if t.qtype)} (written directly) or "
    f"{', '.join(n for n, t in OUTTYPES.items() if not t.qtype)} (llama.cpp's quantizer)"
)


def outtype_option(default: str, when: str = "") -> Any:
    """-q/--outtype TYPE (pull, convert): the GGUF type to write, as Ollama's `create -q`."""
    return typer.Option(
        "-q",
        "--outtype",
        metavar="TYPE",
        show_default=False,
        help=f"The GGUF type to write{when}: {OUTTYPE_NAMES}. \\[{default}]",
    )


# A server instead of the local engine. The environment variables are read by Environment, not
# bound here, so `--help` can never show a key's value.
EndpointOpt = Annotated[
    Optional[str],
    typer.Option(
        "--endpoint",
        metavar="URL",
        show_default=False,
        help="An OpenAI-compatible server (vLLM, SGLang, TGI, llama.cpp server), "
        "e.g. http://localhost:8000/v1. Default: $LLMCLI_ENDPOINT.",
    ),
]
ApiKeyOpt = Annotated[
    Optional[str],
    typer.Option(
        "--api-key",
        metavar="KEY",
        show_default=False,
        help="The server's API key, sent as a bearer token; never printed or saved. "
        "Prefer $LLMCLI_API_KEY (a command line is visible to other users).",
    ),
]
TimeoutOpt = Annotated[
    Optional[float],
    typer.Option(
        "--timeout",
        metavar="SECONDS",
        show_default=False,
        help="With --endpoint: give up after this long without a stream event (pings do not count); "
        "a whole reply gets this much for every 100 tokens of max_tokens, plus once. \\[120]",
    ),
]


def _parse_cid(text: str) -> str:
    from llmcli.usecases.conversation import parse_cid  # only when --cid is given: startup stays light

    return parse_cid(text)


def cid_option(help: str) -> Any:
    """--cid ID (chat and logs), parsed once here: stripped, lowercase, never empty.

    The typer.Option for `Annotated[Optional[str], cid_option(HELP)]`: the type stays in the
    signature, where a type checker reads it."""
    return typer.Option("--cid", metavar="ID", parser=_parse_cid, show_default=False, help=help)


def param_option(name: str) -> Any:
    """A generation parameter's option, built from its row in llmcli.params: the flags, the help
    with its range and default, and the same range check (and message) as `/set`.

    The typer.Option for `Annotated[Optional[KIND], param_option(NAME)]`, KIND being the row's kind."""
    row = PARAMS[name]

    def check(value):
        if value is None:  # not given: SamplingParams keeps the table's default
            return None
        try:
            return row.check(value)
        except UsageError as exc:
            raise typer.BadParameter(str(exc)) from None

    return typer.Option(
        *row.flags,
        callback=check,
        show_default=False,
        # `\\[`: rich would take "[random]" for a style tag and drop it from the help.
        help=f"{row.help.rstrip('.')}; {row.range_text}. \\[{row.default_text}]",
    )


# -- option groups: several options a command takes as one value, declared once ----------------------
def grouped(name: str, options: Mapping[str, Any], make: Callable[[dict[str, Any]], Any]) -> Any:
    """A decorator: `command(..., NAME: T, ...)` as the Typer command that takes `options` (each
    parameter name -> its Annotated typer.Option) where NAME stands, and hands `command` one
    `make({name: value})` for them. Typer reads a command's parameters from its signature, so the
    group's options are written into it; the --help pages that show a group cannot drift."""
    import inspect

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        # SamplingParams is only named here (the engine loads when a command runs, not at --help).
        signature = inspect.signature(command, eval_str=True, locals={"SamplingParams": object})
        added = [
            inspect.Parameter(option, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation)
            for option, annotation in options.items()
        ]
        parameters = []
        for parameter in signature.parameters.values():
            taken = added if parameter.name == name else [parameter]
            parameters += [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in taken]

        def run(**given: Any) -> None:
            group = make({option: given.pop(option) for option in options})
            command(**given, **{name: group})

        run.__name__, run.__qualname__, run.__doc__ = command.__name__, command.__qualname__, command.__doc__
        run.__module__ = command.__module__
        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


def _sampling(given: dict[str, Any]) -> SamplingParams:
    """The sampling options as SamplingParams; an option not given keeps its row's default."""
    from llmcli.engine.sampling import SamplingParams

    return SamplingParams(**{name: value for name, value in given.items() if value is not None})


SAMPLING = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty", "seed", "max_tokens")
# chat and serve: the sampling options, each from its row in llmcli.params, as `params: SamplingParams`
with_sampling = grouped(
    "params",
    {name: Annotated[Optional[PARAMS[name].kind], param_option(name)] for name in SAMPLING},
    _sampling,
)


@dataclass(frozen=True)
class ServerOptions:
    """--endpoint, --api-key and --timeout as given (None: not given; the command adds $LLMCLI_*)."""

    url: str | None = None
    api_key: str | None = None
    timeout: float | None = None

    def endpoint(self, env: Environment) -> Any:
        """The server these name, else $LLMCLI_ENDPOINT's, as usecases/endpoint.py makes it (an
        engine/openai Endpoint, which commands do not name); None: none, the local engine."""
        from llmcli.usecases.endpoint import endpoint_from_options

        return endpoint_from_options(self.url or env.endpoint, self.api_key, self.timeout, env.api_key)


# chat, bench, list and ps: the server to ask, as `server_options: ServerOptions`
with_server = grouped(
    "server_options",
    {"endpoint": EndpointOpt, "api_key": ApiKeyOpt, "timeout": TimeoutOpt},
    lambda given: ServerOptions(given["endpoint"], given["api_key"], given["timeout"]),
)


def system_option(when: str = "") -> Any:
    """-s/--system (chat, serve): the system prompt; `when` says which chats get it.

    The typer.Option for `Annotated[Optional[str], system_option(WHEN)]`."""
    return typer.Option("-s", "--system", show_default=False, help=f"System prompt{when}.")


StopOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--stop",
        metavar="TEXT",
        show_default=False,
        help="Stop at this string (repeatable); it is trimmed from the reply.",
    ),
]
FilterOpt = Annotated[
    Optional[Path],
    file_option("--filter", "Mask the words/phrases in FILE (one a line, case-insensitive) with ***."),
]


def _check_draft(value: str | None) -> str | None:
    from llmcli.usecases.chat import check_draft

    try:
        return None if value is None else check_draft(value)
    except UsageError as exc:
        raise typer.BadParameter(str(exc)) from None


DraftOpt = Annotated[
    Optional[str],
    typer.Option(
        "--draft",
        metavar="none|lookup",
        callback=_check_draft,
        show_default=False,
        help="Speculative decoding: 'lookup' drafts tokens from n-gram matches in the prompt and the reply "
        "and verifies them in one batch (same output, faster on copy-heavy jobs). \\[none]",
    ),
]
