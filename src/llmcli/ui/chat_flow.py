"""What `llmcli chat` does with its options: pick the model and the mode, run, render."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.engine.sampling import SamplingParams
from llmcli.environment import env
from llmcli.errors import UsageError
from llmcli.store import ModelEntry, Store, is_file
from llmcli.ui.output import Output


@dataclass
class ChatOptions:
    model: str | None = None
    prompt: str | None = None
    model_opt: str | None = None
    system: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    ctx: int | None = None
    threads: int | None = None
    draft: str | None = None  # --draft: "lookup" or "none" (None: not given, plain decoding)
    stops: list[str] = field(default_factory=list)
    filter_file: Path | None = None
    json_out: bool = False
    stats: bool | None = None
    markdown: bool = False
    endpoint: str | None = None  # --endpoint; $LLMCLI_ENDPOINT is read when the session opens
    api_key: str | None = None
    timeout: float | None = None


def names_a_model(store: Store, arg: str) -> bool:
    """Whether a lone positional argument is the MODEL rather than the prompt (exact names only)."""
    from llmcli import hub

    if arg in {m.name for m in store.list()}:
        return True
    return arg.lower().endswith(".gguf") or is_file(arg) or hub.looks_like_repo(arg)


def split_arguments(is_model: Callable[[str], bool], opts: ChatOptions) -> tuple[str | None, str | None]:
    """[MODEL] [PROMPT] (or -m MODEL [PROMPT]) -> (model spec, prompt)."""
    if opts.model_opt:
        if opts.model is not None and opts.prompt is not None:
            raise UsageError("give the model once: either -m MODEL or the first argument, not both")
        return opts.model_opt, opts.model
    if opts.prompt is not None:
        return opts.model, opts.prompt
    if opts.model is not None and not is_model(opts.model):
        return None, opts.model
    return opts.model, None


def read_piped_input(prompt: str | None) -> str | None:
    """Piped material first, then the argument's instruction after a blank line (as llm and Ollama do).

    Putting the document first keeps it at the start of the prompt, where a later request on the
    same document can reuse its KV cache.
    """
    if env.stdin_isatty:
        return prompt
    piped = env.stdin.read()
    if not piped.strip():
        if prompt is None:
            raise UsageError("the piped input is empty; pipe some text or give a prompt argument")
        return prompt
    piped = piped.rstrip("\n")
    return f"{piped}\n\n{prompt}" if prompt else piped


def load_session(entry: ModelEntry, opts: ChatOptions):
    from llmcli.engine.chat import ChatSession
    from llmcli.engine.postprocess import WordFilter
    from llmcli.engine.runtime import Runtime, RuntimeConfig

    word_filter = WordFilter.from_file(opts.filter_file) if opts.filter_file else None
    runtime = Runtime(entry.path, RuntimeConfig(n_ctx=opts.ctx, n_threads=opts.threads))
    return ChatSession(runtime, system=opts.system, params=opts.params, stops=opts.stops,
                       word_filter=word_filter, draft=opts.draft or "none")


def resolve_model(store: Store, spec: str | None) -> ModelEntry:
    """A model in the store, or REPO[:QUANT] pulled first (with progress on stderr), as Ollama does."""
    from llmcli import hub

    if spec and hub.looks_like_repo(spec):  # an existing path is never taken for a repo
        from llmcli.ui.download import download_report, hub_warnings_to

        with download_report(env.stderr, env.stderr_isatty) as report, hub_warnings_to(report):
            return hub.find_or_pull(spec, store, progress=report)
    return store.resolve(spec)


@dataclass
class Opened:
    """A session ready to talk, the name to show for its model, and the prompt (None: the REPL)."""

    session: object  # llmcli.engine.session.Session
    model_name: str
    prompt: str | None


def check_prompt(prompt: str | None, opts: ChatOptions) -> None:
    interactive = prompt is None
    if interactive and not (env.stdin_isatty and env.stdout_isatty):
        raise UsageError("no prompt: give one as an argument or pipe it in (the REPL needs a terminal)")
    if interactive and opts.json_out:
        raise UsageError("--json answers one prompt: give a prompt argument or pipe it in")
    if prompt is not None and not prompt.strip():
        raise UsageError("the prompt is empty; give some text to answer")


def open_local(store: Store, opts: ChatOptions) -> Opened:
    spec, prompt = split_arguments(lambda arg: names_a_model(store, arg), opts)
    prompt = read_piped_input(prompt)
    check_prompt(prompt, opts)
    entry = resolve_model(store, spec)
    # Fail on a bad filter file or a bad model before anything else is shown.
    return Opened(load_session(entry, opts), entry.name, prompt)


# Options that tune llama.cpp in this process; a server has its own settings.
LOCAL_ONLY = {"--ctx": lambda o: o.ctx, "--threads": lambda o: o.threads, "--draft": lambda o: o.draft}


def open_remote(endpoint, opts: ChatOptions) -> Opened:
    from llmcli.engine.openai_http import list_models, pick_model
    from llmcli.engine.postprocess import WordFilter
    from llmcli.engine.remote import RemoteChatSession

    given = [name for name, value in LOCAL_ONLY.items() if value(opts) is not None]
    if given:
        raise UsageError(f"{' and '.join(given)} set the local engine; the server at {endpoint} "
                         "has its own (leave them out with --endpoint)")
    word_filter = WordFilter.from_file(opts.filter_file) if opts.filter_file else None
    models = list_models(endpoint)  # also proves the address and the key before any prompt is read
    ids = {m.id for m in models}
    spec, prompt = split_arguments(lambda arg: arg in ids, opts)
    prompt = read_piped_input(prompt)
    check_prompt(prompt, opts)
    model = pick_model(endpoint, models, spec)
    session = RemoteChatSession(endpoint, model, system=opts.system, params=opts.params, stops=opts.stops,
                                word_filter=word_filter)
    return Opened(session, model, prompt)


def run_chat(opts: ChatOptions) -> None:
    from llmcli.engine.openai_http import Endpoint

    store = Store()
    endpoint = Endpoint.from_options(opts.endpoint, opts.api_key, opts.timeout)
    opened = open_remote(endpoint, opts) if endpoint is not None else open_local(store, opts)
    if opened.prompt is None:
        from llmcli.ui.repl import Repl

        Repl(opened.session, opened.model_name, store, opts).run()
    else:
        one_shot(opened.session, opened.model_name, opened.prompt, opts)


def one_shot(session, model_name: str, prompt: str, opts: ChatOptions) -> None:
    from llmcli.engine.events import drain, json_document

    out = Output()
    try:
        reply = drain(session.ask(prompt, keep_cache=False),
                      on_text=None if opts.json_out else out.write, on_notice=out.warn)
    finally:
        session.close()  # ⑦ release: nothing follows a one-shot request
    stats = reply.stats
    if opts.json_out:
        out.json(json_document(reply.text, model_name, stats))
    elif reply.text and not reply.text.endswith("\n"):
        out.write("\n")
    show_stats = opts.stats if opts.stats is not None else env.stderr_isatty
    if show_stats and stats is not None:
        from llmcli.ui.stats import stats_panel

        out.err.print(stats_panel(stats, model_name))
