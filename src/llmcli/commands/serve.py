"""`llmcli serve`: an OpenAI- and Ollama-compatible server on the batch scheduler."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

import llmcli.serve.options as defaults  # serve's defaults and ranges: a table that imports nothing
from llmcli.commands.options import (
    ChatTemplateOpt,
    CtxOpt,
    FilterOpt,
    GpuLayersOpt,
    JsonOpt,
    PoolingOpt,
    StopOpt,
    ThreadsOpt,
    complete_model_names,
    environment,
    file_option,
    system_option,
    with_sampling,
)

if TYPE_CHECKING:
    from llmcli.engine.sampling import SamplingParams

HELP = """Serve the store's models (or one) over HTTP: OpenAI's (chat and Responses), Anthropic's and
Ollama's APIs, several requests decoded together.

\b
  llmcli serve                              every model in the store, each loaded on its first request
  llmcli serve MODEL --parallel 8 --ctx 16384     one model, loaded at start, whatever name a request gives
  llmcli serve --host 0.0.0.0 --api-key-file keys.txt --rate-limit 60

\b
Routes: /v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings, /v1/models
(OpenAI); /v1/messages (Anthropic); /api/chat, /api/generate, /api/embed, /api/tags, /api/show,
/api/ps, /api/pull, /api/delete, /api/copy, /api/version (Ollama); /v1/rerank; /tokenize,
/detokenize, /apply-template (llama-server's); /health and /metrics (Prometheus); /ui, a chat page
(--no-ui: none). With no MODEL, /api/tags and /v1/models list the whole store.
SIGTERM or Ctrl-C stops accepting and lets the requests in flight finish (--grace).
With --json, stdout gets one line once it listens: {"url", "model", "path"}.
"""


@with_sampling
def serve(
    context: typer.Context,
    *,
    model: Annotated[
        Optional[str],
        typer.Argument(
            metavar="MODEL",
            help="Serve only this model (see `llmcli list`), a .gguf path or REPO[:QUANT]. "
            "\\[every model in the store]",
            autocompletion=complete_model_names,
            show_default=False,
        ),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = defaults.HOST,
    port: Annotated[
        int, typer.Option("--port", help=defaults.ranged("Port (0: any free one).", "port"))
    ] = defaults.PORT,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel", help=defaults.ranged("Sequences decoded together (one KV pool).", "parallel")
        ),
    ] = defaults.PARALLEL,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    gpu_layers: GpuLayersOpt = None,
    pooling: PoolingOpt = None,
    system: Annotated[Optional[str], system_option(" for chats that bring none")] = None,
    params: SamplingParams,  # the sampling options, from llmcli.params (with_sampling)
    stop: StopOpt = None,
    filter_file: FilterOpt = None,
    api_key: Annotated[
        Optional[list[str]],
        typer.Option(
            "--api-key",
            metavar="KEY",
            show_default=False,
            help="A key clients must send (Bearer or x-api-key); repeatable. Never logged. "
            "Prefer --api-key-file (a command line is visible to other users).",
        ),
    ] = None,
    api_key_file: Annotated[
        Optional[Path],
        file_option("--api-key-file", "Keys, one a line."),
    ] = None,
    rate_limit: Annotated[
        Optional[int],
        typer.Option(
            "--rate-limit",
            metavar="N",
            show_default=False,
            help=defaults.ranged("Requests a minute, per key.", "rate_limit"),
        ),
    ] = None,
    token_limit: Annotated[
        Optional[int],
        typer.Option(
            "--token-limit",
            metavar="N",
            show_default=False,
            help=defaults.ranged(
                "Prompt + reply tokens a minute, per key; a request reserves its prompt + max_tokens.",
                "token_limit",
            ),
        ),
    ] = None,
    max_body: Annotated[
        int,
        typer.Option(
            "--max-body", metavar="BYTES", help=defaults.ranged("Largest request body.", "max_body")
        ),
    ] = defaults.MAX_BODY,
    max_queue: Annotated[
        int,
        typer.Option(
            "--max-queue",
            metavar="N",
            help=defaults.ranged("Requests waiting for a sequence; past it, 503.", "max_queue"),
        ),
    ] = defaults.MAX_QUEUE,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            metavar="SECONDS",
            help=defaults.ranged("Longest a request may take, its body included.", "timeout"),
        ),
    ] = defaults.TIMEOUT,
    header_timeout: Annotated[
        float,
        typer.Option(
            "--header-timeout",
            metavar="SECONDS",
            help=defaults.ranged(
                "Longest a connection may take to send a request's head, or stay idle; then it is closed.",
                "header_timeout",
            ),
        ),
    ] = defaults.HEADER_TIMEOUT,
    max_connections: Annotated[
        Optional[int],
        typer.Option(
            "--max-connections",
            metavar="N",
            show_default="min(1024, ulimit -n - 64)",
            help="Open connections at most; past it the slowest are closed first.",
        ),
    ] = None,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            metavar="SECONDS",
            help=defaults.ranged("After SIGTERM, time for requests in flight.", "grace"),
        ),
    ] = defaults.GRACE,
    cors_origin: Annotated[
        Optional[list[str]],
        typer.Option(
            "--cors-origin",
            metavar="ORIGIN",
            show_default=False,
            help="A browser origin allowed to call the server (https://app.example:8443, or *); repeatable.",
        ),
    ] = None,
    chat_template: ChatTemplateOpt = None,
    alias: Annotated[
        Optional[list[str]],
        typer.Option(
            "--alias",
            metavar="NAME=MODEL",
            show_default=False,
            help="Answer requests for NAME with MODEL (NAME may be a glob: 'claude-*=qwen3'); repeatable.",
        ),
    ] = None,
    keep_alive: Annotated[
        str,
        typer.Option(
            "--keep-alive",
            metavar="DURATION",
            help="How long an idle model stays loaded (5m, 1h30m, 10s; negative: for ever; 0: unload at "
            "once); a request's keep_alive overrides it.",
        ),
    ] = defaults.KEEP_ALIVE,
    max_models: Annotated[
        Optional[int],
        typer.Option(
            "--max-models",
            metavar="N",
            show_default="as many as --max-memory holds",
            help=defaults.ranged(
                "Models loaded at once; the least recently used idle one makes room.", "max_models"
            ),
        ),
    ] = None,
    max_memory: Annotated[
        Optional[str],
        typer.Option(
            "--max-memory",
            metavar="SIZE",
            show_default="the memory free at start, less 10%",
            help="Memory the loaded models may take (weights + KV cache), e.g. 8G.",
        ),
    ] = None,
    read_only: Annotated[
        bool,
        typer.Option(
            "--read-only", help="Refuse /api/pull, /api/delete and /api/copy (403): the store stays as it is."
        ),
    ] = False,
    no_ui: Annotated[
        bool, typer.Option("--no-ui", help="No chat page at /ui (docs/serve.md#the-chat-page).")
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    # First, before anything can load llama.cpp: OpenMP reads its settings once, when it loads.
    import json
    import signal

    from llmcli.engine.postprocess import WordFilter
    from llmcli.engine.templates.choice import read_template_file
    from llmcli.errors import Interrupted
    from llmcli.offload import EVERY_LAYER
    from llmcli.serve.budget import parse_duration_option, parse_size_option
    from llmcli.serve.catalog import Catalog, Served
    from llmcli.serve.config import ServeConfig, read_key_file
    from llmcli.serve.run import find_model
    from llmcli.serve.run import serve as run
    from llmcli.store import Store
    from llmcli.ui.download import pull_report
    from llmcli.usecases.embed import choosable_pooling

    env = environment(context)
    keys = list(api_key or []) + (read_key_file(api_key_file) if api_key_file else [])
    config = ServeConfig(
        model_name="",
        host=host,
        port=port,
        parallel=parallel,
        ctx=ctx,
        threads=threads,
        gpu_layers=gpu_layers or EVERY_LAYER,
        pooling=choosable_pooling(pooling),
        system=system,
        params=params,
        stops=stop or [],
        filter_words=WordFilter.from_file(filter_file).words if filter_file else [],
        api_keys=keys,
        rate_limit=rate_limit,
        token_limit=token_limit,
        max_body=max_body,
        max_queue=max_queue,
        timeout=timeout,
        header_timeout=header_timeout,
        max_connections=max_connections,
        grace=grace,
        cors_origins=cors_origin or [],
        chat_template=read_template_file(chat_template) if chat_template else None,
        read_only=read_only,
        ui=not no_ui,
        keep_alive=parse_duration_option(keep_alive, "--keep-alive"),
        max_models=max_models,
        max_memory=parse_size_option(max_memory, "--max-memory") if max_memory is not None else None,
    )  # checked as it is made: before a model is looked for, let alone pulled
    aliases = parse_aliases(alias or [])
    store = Store(env.store_root)
    if model is None:
        catalog = Catalog(store=store, aliases=aliases)
        name = path = None
    else:
        entry = find_model(
            store, model, env.default_model, env.home, lambda: pull_report(env.stderr, env.stderr_isatty)
        )
        config.model_name = entry.name
        name, path = entry.name, entry.path
        catalog = Catalog(one=Served(entry.name, Path(entry.path)), aliases=aliases)

    def listening(url: str) -> None:
        if json_out:  # the address (with --port 0, the port chosen) for a script that started it
            env.stdout.write(json.dumps({"url": url, "model": name, "path": path}) + "\n")
            env.stdout.flush()
        what = (
            f"{name} on {url} (loading; /health answers 200 when ready)"
            if name
            else (f"the store's models on {url} (each loads on its first request)")
        )
        # One line (scripts and tests read the address from it): the chat page's URL at its end.
        page = "" if no_ui else f"; chat in a browser at {url}/ui"
        env.stderr.write(f"llmcli: serving {what}{page}\n")
        env.stderr.flush()

    def status(now) -> None:  # one line, rewritten in place
        line = (
            "loading the model..."
            if now.loading
            else f"{now.running} running · {now.waiting} waiting · {now.tokens_per_s:,.1f} tok/s · "
            f"{now.finished:,} done · KV {now.kv_used:.0%}"
        )
        env.stderr.write(f"\r\x1b[K{line}")
        env.stderr.flush()

    def warning(text: str) -> None:
        env.stderr.write(("\r\x1b[K" if env.stderr_isatty else "") + f"llmcli: warning: {text}\n")
        env.stderr.flush()

    try:
        stopped_by = run(
            config,
            catalog,
            listening,
            status if env.stderr_isatty else None,
            debug=env.debug,
            on_warning=warning,
        )
    finally:
        if env.stderr_isatty:
            env.stderr.write("\r\x1b[K")
    if stopped_by == signal.SIGINT:
        raise Interrupted("stopped; the requests in flight were given their grace period")
    env.stderr.write("llmcli: stopped\n")


serve.__doc__ = HELP


def parse_aliases(given: list[str]) -> list[tuple[str, str]]:
    """--alias NAME=MODEL values as (pattern, model) pairs, in the order given."""
    from llmcli.errors import UsageError

    pairs = []
    for text in given:
        name, sep, model = text.partition("=")
        if not sep or not name.strip() or not model.strip():
            raise UsageError(f"--alias {text[:80]!r} is not NAME=MODEL; give e.g. --alias 'claude-*=qwen3'")
        pairs.append((name.strip(), model.strip()))
    return pairs
