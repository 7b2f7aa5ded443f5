"""Open a chat session: which model (the lone-argument rule, the default, auto-pull), which prompt,
the session.

The command reads the process (terminal flags, $LLMCLI_MODEL, $HOME) into `ChatInputs` and hands
`start_chat` stdin when it is a pipe; `start_chat` reads the pipe, opens the log, the session and the
recorder, and the command renders the `Chat` it returns: a REPL when the prompt is None, else one
answer.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.model_ref import EndpointModel, ModelRef, default_model_ref, model_ref, names_a_model
from llmcli.offload import EVERY_LAYER, GpuLayers
from llmcli.store import ModelEntry, Store

if TYPE_CHECKING:
    from llmcli.chatlog import Conversation
    from llmcli.engine.messages import Message
    from llmcli.engine.openai.client import Endpoint
    from llmcli.engine.session import Session
    from llmcli.engine.structured import OutputConstraint
    from llmcli.engine.tools.use import ToolUse
    from llmcli.hub.events import ProgressScope
    from llmcli.usecases.conversation import OpenedLog, Recorder
    from llmcli.usecases.tools import ToolReader


@dataclass
class ChatOptions:
    model: str | None = None
    prompt: str | None = None
    model_opt: str | None = None
    system: str | None = None
    params: SamplingParams = field(default_factory=SamplingParams)
    ctx: int | None = None
    threads: int | None = None
    gpu_layers: GpuLayers | None = None  # --gpu-layers (None: every layer, llama.cpp's default)
    draft: str | None = None  # --draft: "lookup" or "none" (None: not given, plain decoding)
    stops: list[str] = field(default_factory=list)
    filter_file: Path | None = None
    json_out: bool = False
    stats: bool | None = None
    markdown: bool = False
    endpoint: str | None = None  # --endpoint as given; the command adds $LLMCLI_ENDPOINT
    api_key: str | None = None
    timeout: float | None = None
    constraint: OutputConstraint | None = None  # --schema / --format json / --grammar
    tool_use: ToolUse | None = None  # --tools FILE, --tool-choice
    history: list[Message] | None = None  # --messages FILE: the conversation before the prompt
    chat_template: Path | None = None  # --chat-template FILE: overrides the model's
    think: bool | None = None  # --think/--no-think: enable_thinking, where the template reads it
    show_thinking: bool = False  # --show-thinking: stream the reasoning on stderr
    no_cache: bool = False  # --no-cache: neither read nor write the disk prefix cache
    # The conversation log (usecases/conversation.py)
    continue_latest: bool = False  # -c/--continue: the most recent logged conversation
    cid: str | None = None  # --cid ID: a chosen logged conversation
    no_log: bool = False  # --no-log (the command adds $LLMCLI_NO_LOG)


@dataclass(frozen=True)
class ChatInputs:
    """What the command read from the process for this chat; the use-case reads no environment itself
    (the pipe's text it reads from the stream the command hands start_chat)."""

    piped: str | None = None  # all of stdin when it is not a terminal (start_chat reads it)
    interactive: bool = False  # stdin and stdout are terminals: the REPL is possible
    default_model: str | None = None  # $LLMCLI_MODEL
    cache_max: int = 0  # $LLMCLI_CACHE_MAX in bytes (0: no disk prefix cache)
    home: Path | None = None  # $HOME: what a leading `~` in a model's path names


@dataclass
class Opened:
    """A session ready to talk, the name to show for its model, and the prompt (None: the REPL)."""

    session: Session
    model_name: str
    prompt: str | None
    model_id: str = ""  # what finds the model again (a store name, a GGUF's path, a server's id): the log's
    tools: ToolReader | None = None  # --tools: reads the calls of each reply


def split_arguments(
    opts: ChatOptions, read: Callable[[str], ModelRef], is_model: Callable[[ModelRef], bool]
) -> tuple[ModelRef | None, str | None]:
    """[MODEL] [PROMPT] (or -m MODEL [PROMPT]) -> (model, prompt); a lone argument naming a model is MODEL."""
    if opts.model_opt:
        if opts.model is not None and opts.prompt is not None:
            raise UsageError("give the model once: either -m MODEL or the first argument, not both")
        return read(opts.model_opt), opts.model
    if opts.model is None:
        return None, opts.prompt
    ref = read(opts.model)
    if opts.prompt is not None or is_model(ref):
        return ref, opts.prompt
    return None, opts.model


def join_piped(prompt: str | None, piped: str | None) -> str | None:
    """Piped material first, then the argument's instruction after a blank line (as llm and Ollama do).

    Putting the document first keeps it at the start of the prompt, where a later request on the
    same document can reuse its KV cache.
    """
    if piped is None:
        return prompt
    if not piped.strip():
        if prompt is None:
            raise UsageError("the piped input is empty; pipe some text or give a prompt argument")
        return prompt
    piped = piped.rstrip("\n")
    return f"{piped}\n\n{prompt}" if prompt else piped


def check_prompt(prompt: str | None, opts: ChatOptions, inputs: ChatInputs) -> None:
    if opts.history is not None and prompt is None:
        last = opts.history[-1].role
        if last not in ("user", "tool"):
            raise UsageError(f"the last message of --messages is the {last}'s: give a PROMPT to answer")
        return
    interactive = prompt is None
    if interactive and not inputs.interactive:
        raise UsageError("no prompt: give one as an argument or pipe it in (the REPL needs a terminal)")
    if interactive and opts.json_out:
        raise UsageError("--json answers one prompt: give a prompt argument or pipe it in")
    if prompt is not None and not prompt.strip():
        raise UsageError("the prompt is empty; give some text to answer")


def refuse_embedding_model(runtime, name: str) -> None:
    """An embedding model (its GGUF pools) has no language-model head: it would answer noise."""
    from llmcli.engine.local.embed import CHOOSABLE, gguf_pooling

    if gguf_pooling(runtime) in CHOOSABLE:
        raise UsageError(
            f"the model {name} is an embedding model and cannot chat (it can do: embedding); "
            f"use `llmcli embed {name}`, or name a chat model"
        )


def load_session(entry: ModelEntry, opts: ChatOptions):
    from llmcli.engine.local.chat import ChatSession
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.postprocess import WordFilter
    from llmcli.engine.templates.choice import read_template_file

    word_filter = WordFilter.from_file(opts.filter_file) if opts.filter_file else None
    override = read_template_file(opts.chat_template) if opts.chat_template else None
    config = RuntimeConfig(n_ctx=opts.ctx, n_threads=opts.threads, gpu_layers=opts.gpu_layers or EVERY_LAYER)
    runtime = Runtime(entry.path, config)
    try:
        refuse_embedding_model(runtime, entry.name)
        session = ChatSession(
            runtime,
            system=opts.system,
            params=opts.params,
            stops=opts.stops,
            word_filter=word_filter,
            chat_template=override,
            constraint=opts.constraint,
            draft=opts.draft or "none",
        )
    except BaseException:
        runtime.close()
        raise
    session.think = opts.think
    return session


def open_local(
    store: Store,
    opts: ChatOptions,
    inputs: ChatInputs,
    pulling: ProgressScope,
    resumed: Conversation | None = None,
) -> Opened:
    from llmcli.usecases.pull import find_or_pull

    listed = store.list()  # the one manifest read of this chat
    names: Collection[str] = {m.name for m in listed}

    def read(text: str) -> ModelRef:
        return model_ref(text, inputs.home)

    ref, prompt = split_arguments(opts, read, lambda r: names_a_model(r, names))
    piped = inputs.piped if opts.history is None or (inputs.piped or "").strip() else None
    prompt = join_piped(prompt, piped)  # with --messages, an empty pipe is no prompt: the last is answered
    check_prompt(prompt, opts, inputs)
    # A continued conversation keeps its model unless one is given.
    ref = (
        ref
        or (read(resumed.model) if resumed else None)
        or default_model_ref(inputs.default_model, inputs.home)
    )
    entry = find_or_pull(ref, store, pulling=pulling, listed=listed)
    # Fail on a bad filter file or a bad model before anything else is shown.
    model_id = entry.name if entry.name in names else entry.path  # a GGUF outside the store: its path
    session = load_session(entry, opts)
    use_prefix_cache(session, store, entry, opts, inputs)
    if opts.history is not None:
        from llmcli.usecases.tools import use_history

        use_history(session, opts.history)
    tools = None
    if opts.tool_use is not None:
        from llmcli.usecases.tools import use_tools

        tools = use_tools(session, opts.tool_use)
    return Opened(session, entry.name, prompt, model_id, tools)


def use_prefix_cache(session, store: Store, entry: ModelEntry, opts: ChatOptions, inputs: ChatInputs) -> None:
    """Point the session at the disk prefix cache, and tell it where the shared start of the prompt
    ends: the piped document, which later questions about the same document will repeat."""
    from llmcli.engine.local.session_cache import SessionCache

    if inputs.piped is not None and inputs.piped.strip():
        session.stable_text = inputs.piped.rstrip("\n")  # as join_piped puts it first
    if opts.no_cache or inputs.cache_max <= 0:
        return
    # A one-shot reply saves its tip at release; the REPL keeps its KV cache in RAM and saves it at exit.
    # The cap applies now (a lowered one too), not only when an entry is next saved; a cache folder
    # that cannot be used costs one warning, never the reply.
    session.disk_cache = SessionCache.open(
        store.cache_dir, store.root, inputs.cache_max, session.runtime, entry.name
    )


# Options that tune llama.cpp in this process; a server has its own settings.
LOCAL_ONLY = {
    "--ctx": lambda o: o.ctx,
    "--threads": lambda o: o.threads,
    "--gpu-layers": lambda o: o.gpu_layers,
    "--chat-template": lambda o: o.chat_template,
    "--think/--no-think": lambda o: o.think,
    "--draft": lambda o: o.draft,
    "--no-cache": lambda o: True if o.no_cache else None,
}


def open_remote(
    endpoint: Endpoint, opts: ChatOptions, inputs: ChatInputs, resumed: Conversation | None = None
) -> Opened:
    from llmcli.engine.openai.models import list_models, pick_model
    from llmcli.engine.openai.session import RemoteChatSession, check_remote_constraint
    from llmcli.engine.postprocess import WordFilter
    from llmcli.usecases.endpoint import refuse_local_only

    refuse_local_only({flag: value(opts) for flag, value in LOCAL_ONLY.items()}, endpoint)
    check_remote_constraint(opts.constraint)
    word_filter = WordFilter.from_file(opts.filter_file) if opts.filter_file else None
    models = list_models(endpoint)  # also proves the address and the key before any prompt is used
    ids = {m.id for m in models}
    ref, prompt = split_arguments(opts, EndpointModel, lambda r: r.text in ids)
    prompt = join_piped(prompt, inputs.piped)
    check_prompt(prompt, opts, inputs)
    wanted = ref.text if ref else (resumed.model if resumed and resumed.model in ids else None)
    model = pick_model(endpoint, models, wanted)
    session = RemoteChatSession(
        endpoint,
        model,
        system=opts.system,
        params=opts.params,
        stops=opts.stops,
        word_filter=word_filter,
        constraint=opts.constraint,
    )
    return Opened(session, model, prompt, model)


def open_chat(
    store: Store,
    opts: ChatOptions,
    inputs: ChatInputs,
    *,
    endpoint: Endpoint | None,
    pulling: ProgressScope,
    resumed: Conversation | None = None,
) -> Opened:
    """A session on the server at `endpoint`, else on a local model (pulled first if it is a repo).

    `resumed`: a logged conversation to continue (-c/--cid): its model unless one is given, its
    system prompt unless -s is given, and its messages before the new prompt.
    """
    from llmcli.usecases.conversation import resume_session

    if endpoint is not None:
        opened = open_remote(endpoint, opts, inputs, resumed)
    else:
        opened = open_local(store, opts, inputs, pulling, resumed)
    resume_session(opened.session, resumed, system_given=opts.system is not None)
    return opened


@dataclass
class Chat:
    """A chat ready to run: its session (Opened), the log it writes to and the recorder of its
    exchanges (None with --messages: a script keeps its own conversation). The caller closes it."""

    opened: Opened
    log: OpenedLog
    recorder: Recorder | None

    def close(self) -> None:
        self.log.close()


def start_chat(
    store: Store,
    opts: ChatOptions,
    inputs: ChatInputs,
    *,
    stdin,
    endpoint: Endpoint | None,
    pulling: ProgressScope,
    warn: Callable[[str], None],
) -> Chat:
    """Read the pipe (`stdin`: None when stdin is a terminal), open the log (-c/--cid, --no-log; a
    damaged or unusable one is a `warn`ing), open the session and make the recorder of its exchanges."""
    from llmcli.usecases.conversation import ContinueFrom, open_chat_log, recorder_for

    if stdin is not None:
        inputs = replace(inputs, piped=read_piped(stdin, opts.ctx, remote=endpoint is not None))
    resume = ContinueFrom.from_options(opts.continue_latest, opts.cid)
    chat_log = open_chat_log(store.root, write=not opts.no_log, resume=resume)
    if chat_log.note:
        warn(chat_log.note)
    try:
        opened = open_chat(store, opts, inputs, endpoint=endpoint, pulling=pulling, resumed=chat_log.resumed)
    except BaseException:
        chat_log.close()
        raise
    return Chat(opened, chat_log, recorder_for(opts, opened, chat_log) if opts.history is None else None)


def check_draft(value: str) -> str:
    """--draft, checked as the options are parsed (the engine's words for a mode it does not know)."""
    from llmcli.engine.local.lookup import parse_draft

    return parse_draft(value)


def read_piped(stdin, ctx: int | None, *, remote: bool) -> str:
    """stdin, read no further than the context could hold (a pipe may be endless: /dev/zero)."""
    from llmcli.engine.local.runtime import DEFAULT_CTX
    from llmcli.limits import limit, prompt_cap, read_bounded

    n_ctx = limit("endpoint_ctx") if remote else ctx or DEFAULT_CTX
    fix = "pipe less" if remote else f"pipe less, or raise --ctx (now {n_ctx:,} tokens)"
    return read_bounded(stdin, prompt_cap(n_ctx), "stdin", fix)
