"""`llmcli chat`: the REPL on a terminal, a one-shot answer everywhere else."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from llmcli.commands.options import (
    ChatTemplateOpt,
    CtxOpt,
    DraftOpt,
    FilterOpt,
    GpuLayersOpt,
    JsonOpt,
    ServerOptions,
    StopOpt,
    ThinkOpt,
    ThreadsOpt,
    cid_option,
    complete_model_names,
    environment,
    file_option,
    system_option,
    with_sampling,
    with_server,
)

if TYPE_CHECKING:
    from llmcli.engine.sampling import SamplingParams
    from llmcli.environment import Environment
    from llmcli.usecases.chat import ChatOptions

HELP = """Chat with a model: a REPL on a terminal, a one-shot answer when given a prompt or a pipe.

\b
  llmcli chat                          REPL on the default model
  llmcli chat MODEL "prompt"           one-shot answer on stdout
  echo "prompt" | llmcli chat          the same, prompt from stdin
  cat notes.txt | llmcli chat "Summarize this."
                                       stdin first, a blank line, then the instruction

With one argument, it is the MODEL if it names one exactly (a store name, a .gguf path or
REPO[:QUANT]); otherwise it is the prompt.

\b
  llmcli chat -c "And the next step?"  continue the latest logged conversation
  llmcli chat --cid ID                 continue a chosen one (`llmcli logs` shows the ids)

\b
  llmcli chat --endpoint http://gpu-box:8000/v1 "prompt"
                                       the same, on a vLLM / SGLang / TGI / llama.cpp server;
                                       -m picks one of its models (default: its only one)
"""


@with_server
@with_sampling
def chat(
    context: typer.Context,
    *,
    model: Annotated[
        Optional[str],
        typer.Argument(
            metavar="MODEL",
            help="Model (see `llmcli list`), or the prompt.",
            autocompletion=complete_model_names,
            show_default=False,
        ),
    ] = None,
    prompt: Annotated[
        Optional[str],
        typer.Argument(metavar="PROMPT", help="The prompt: a one-shot answer.", show_default=False),
    ] = None,
    model_opt: Annotated[
        Optional[str],
        typer.Option(
            "-m",
            "--model",
            metavar="MODEL",
            help="The model, by option.",
            autocompletion=complete_model_names,
            show_default=False,
        ),
    ] = None,
    system: Annotated[Optional[str], system_option()] = None,
    params: SamplingParams,  # the sampling options, from llmcli.params (with_sampling)
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    gpu_layers: GpuLayersOpt = None,
    draft: DraftOpt = None,
    stop: StopOpt = None,
    filter_file: FilterOpt = None,
    json_out: JsonOpt = False,
    stats: Annotated[
        Optional[bool],
        typer.Option(
            "--stats/--no-stats",
            help="Show the timing panel on stderr. \\[on in the REPL and when stderr is a terminal]",
            show_default=False,
        ),
    ] = None,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="Render the reply as Markdown while it streams (REPL only).")
    ] = False,
    schema: Annotated[
        Optional[str],
        typer.Option(
            "--schema",
            metavar="SCHEMA",
            show_default=False,
            help="The reply is JSON valid against this JSON Schema "
            "(inline JSON or a file); stdout is exactly the JSON.",
        ),
    ] = None,
    fmt: Annotated[
        Optional[str],
        typer.Option(
            "--format",
            metavar="json",
            show_default=False,
            help="The reply is one JSON value; stdout is exactly the JSON.",
        ),
    ] = None,
    grammar: Annotated[
        Optional[Path], file_option("--grammar", "The reply follows this GBNF grammar.")
    ] = None,
    messages: Annotated[
        Optional[Path],
        file_option(
            "--messages",
            'OpenAI-style JSON conversation before PROMPT: [{"role": ..., "content": ...}], with '
            "assistant tool_calls and tool results. Without PROMPT its last message is answered. Not logged.",
        ),
    ] = None,
    tools: Annotated[
        Optional[Path],
        file_option(
            "--tools",
            'OpenAI-style JSON tools the model may call: [{"type": "function", "function": '
            '{"name": ..., "parameters": {...}}}]. The calls are printed, never run.',
        ),
    ] = None,
    tool_choice: Annotated[
        Optional[str],
        typer.Option(
            "--tool-choice",
            metavar="CHOICE",
            show_default=False,
            help="auto (the model decides), none, required (some call), or a function's name. \\[auto]",
        ),
    ] = None,
    chat_template: ChatTemplateOpt = None,
    think: ThinkOpt = None,
    show_thinking: Annotated[
        bool,
        typer.Option(
            "--show-thinking",
            help="Stream a thinking model's reasoning on stderr (stdout carries only the answer).",
        ),
    ] = False,
    no_cache: Annotated[
        bool,
        typer.Option(
            "--no-cache",
            help="Neither reuse nor save the KV state of the "
            "prompt's start in the disk prefix cache (`llmcli cache`).",
        ),
    ] = False,
    server_options: ServerOptions,  # --endpoint, --api-key, --timeout (with_server)
    continue_latest: Annotated[
        bool,
        typer.Option(
            "-c",
            "--continue",
            help="Continue the most recent logged conversation (its model and system prompt unless given).",
        ),
    ] = False,
    cid: Annotated[
        Optional[str], cid_option("Continue the logged conversation ID (see `llmcli logs`).")
    ] = None,
    no_log: Annotated[
        bool, typer.Option("--no-log", help="Log nothing of this chat (also LLMCLI_NO_LOG=1).")
    ] = False,
) -> None:
    from llmcli.usecases.chat import ChatOptions
    from llmcli.usecases.constraint import constraint_from_options
    from llmcli.usecases.tools import parse_tool_options, read_history

    env = environment(context)
    constraint = constraint_from_options(schema, fmt, grammar, env.home)  # checked before any model loads
    remote = bool(server_options.url or env.endpoint)
    tool_use = parse_tool_options(tools, tool_choice, constraint, remote)
    history = read_history(messages, remote, continue_latest or cid is not None)
    _refuse_old_ctx_flag(continue_latest, model, prompt)
    run_chat(
        ChatOptions(
            model=model,
            prompt=prompt,
            model_opt=model_opt,
            system=system,
            params=params,
            ctx=ctx,
            threads=threads,
            gpu_layers=gpu_layers,
            draft=draft,
            stops=stop or [],
            filter_file=filter_file,
            json_out=json_out,
            stats=stats,
            markdown=markdown,
            endpoint=server_options.url,
            api_key=server_options.api_key,
            timeout=server_options.timeout,
            constraint=constraint,
            tool_use=tool_use,
            history=history,
            chat_template=chat_template,
            think=think,
            show_thinking=show_thinking,
            no_cache=no_cache,
            continue_latest=continue_latest,
            cid=cid,
            no_log=no_log or env.no_log,
        ),
        env,
    )


chat.__doc__ = HELP


def _refuse_old_ctx_flag(continue_latest: bool, model: str | None, prompt: str | None) -> None:
    """`chat -c 4096 ...` meant the context size before -c became --continue: say so, not continue."""
    if continue_latest and model is not None and model.isdigit() and prompt is not None:
        from llmcli.errors import UsageError

        raise UsageError(f"-c is -c/--continue in chat; for the context size give --ctx {model}")


def run_chat(opts: ChatOptions, env: Environment) -> None:
    """Hand the process's inputs to the use-case, which opens the chat; render it: a REPL or one answer."""
    from llmcli.store import Store
    from llmcli.ui.download import pull_report
    from llmcli.ui.output import Output
    from llmcli.usecases.chat import ChatInputs, start_chat
    from llmcli.usecases.endpoint import endpoint_from_options

    store = Store(env.store_root)
    endpoint = endpoint_from_options(opts.endpoint or env.endpoint, opts.api_key, opts.timeout, env.api_key)
    inputs = ChatInputs(
        interactive=env.stdin_isatty and env.stdout_isatty,
        default_model=env.default_model,
        cache_max=0 if opts.no_cache or endpoint is not None else env.cache_max,
        home=env.home,
    )
    chat = start_chat(
        store,
        opts,
        inputs,
        stdin=None if env.stdin_isatty else env.stdin,
        endpoint=endpoint,
        pulling=lambda: pull_report(env.stderr, env.stderr_isatty),
        warn=Output(env).warn,
    )
    try:
        opened, recorder = chat.opened, chat.recorder
        if opened.prompt is None and opts.history is None:
            from llmcli.ui.repl import Repl

            Repl(
                env,
                opened.session,
                opened.model_name,
                store,
                opts,
                recorder=recorder,
                resumed=chat.log.resumed,
                tools=opened.tools,
            ).run()
        else:
            from llmcli.ui.answer import AnswerView
            from llmcli.usecases.answer import ask_once, log_exchange

            session, prompt = opened.session, opened.prompt
            view = AnswerView(env, opts, opened.model_name, opened.tools)
            answer = ask_once(session, prompt, opts.constraint, view.hooks(), opened.tools)
            view.show(answer, lambda: log_exchange(recorder, session, prompt, answer.reply, view.out.warn))
    finally:
        chat.close()
