"""A conversation with one model: each request runs through the seven stages and yields events.

① template + tokenize → ② schedule (context budget, KV prefix plan) → ③ prefill → ④ decode loop
→ ⑤ post-process → ⑥ return (the caller consumes the events) → ⑦ release (keep or free the KV).
The session holds the conversation; each stage of one request is a method of Turn (turn.py). Each
request is one sequence of the session's scheduler (scheduler.py): with one sequence (n_seq_max 1,
chat's default) the cells it keeps between turns are the conversation's KV cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from llmcli.engine.events import Event, Stats
from llmcli.engine.local.cells import SeqCells
from llmcli.engine.local.grammar import Grammars
from llmcli.engine.local.lookup import parse_draft
from llmcli.engine.local.model_template import model_template
from llmcli.engine.local.prompt import CancelFlag, ConversationPrompt
from llmcli.engine.local.runtime import Runtime
from llmcli.engine.local.scheduler import Scheduler
from llmcli.engine.local.scheduler_config import SchedulerConfig
from llmcli.engine.local.session_cache import SessionCache
from llmcli.engine.local.turn import Turn, TurnInputs
from llmcli.engine.messages import Message
from llmcli.engine.postprocess import WordFilter
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.session import SessionInfo
from llmcli.engine.structured import OutputConstraint
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.engine.templates.render import RenderedPrompt


class ChatSession:
    base_url: str | None = None  # llama.cpp answers in this process

    def __init__(
        self,
        runtime: Runtime,
        *,
        system: str | None = None,
        params: SamplingParams | None = None,
        stops: list[str] | None = None,
        word_filter: WordFilter | None = None,
        constraint: OutputConstraint | None = None,
        chat_template: TemplateChoice | None = None,
        draft: str = "none",
    ) -> None:
        self.runtime = runtime
        # Every prefix the last turn kept is worth taking over, however short.
        self.scheduler = Scheduler(runtime, SchedulerConfig(min_shared=1))
        self.constraint = constraint  # --schema / --format json / --grammar: the grammar the reply follows
        chosen = model_template(runtime, override=chat_template)
        self.template_choice, self.template, self.thinking = chosen.choice, chosen.template, chosen.thinking
        self.tool_form = chosen.tool_form  # how the model writes tool calls (chat --tools reads them by it)
        self._cancel = CancelFlag()
        # The conversation (system, messages, think, stable_text: properties below) and its prompts.
        self.prompt = ConversationPrompt(
            runtime, self.template, self.thinking, self.scheduler.n_ctx_seq, self._cancel, system
        )
        self.params = params or SamplingParams()
        self.stops = list(stops or [])
        self.word_filter_words = word_filter.words if word_filter else []
        self.draft = parse_draft(draft)  # "lookup": speculative decoding from prompt n-grams
        self.overlap = True  # decode token n before streaming it (turn.py); off only to compare
        self.last_stats: Stats | None = None
        self.last_prompt: RenderedPrompt | None = None
        # The disk prefix cache (set by the use-case unless --no-cache); the prefill splits where the
        # stable start of the user text (a piped document) ends.
        self.disk_cache: SessionCache | None = None
        self.cache_warning: str | None = None  # why the tip could not be saved at close, if it could not
        self._grammars = Grammars(runtime)
        self._kept = False  # the last request kept its KV cache (a REPL turn): close saves it
        self._load_reported = False

    # -- conversation ------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:  # the conversation, without the system prompt
        return self.prompt.messages

    @messages.setter
    def messages(self, messages: list[Message]) -> None:
        self.prompt.messages = messages

    @property
    def system(self) -> str | None:
        return self.prompt.system

    @system.setter
    def system(self, system: str | None) -> None:
        self.prompt.system = system

    @property
    def think(self) -> bool | None:  # --think/--no-think, /set think: None leaves the template's default
        return self.prompt.think

    @think.setter
    def think(self, think: bool | None) -> None:
        self.prompt.think = think

    @property
    def stable_text(self) -> str | None:  # the start of the user text later requests share
        return self.prompt.stable_text

    @stable_text.setter
    def stable_text(self, text: str | None) -> None:
        self.prompt.stable_text = text

    @property
    def tools(self) -> list[dict] | None:  # --tools: rendered into every prompt (OpenAI's shape)
        return self.prompt.tools

    @tools.setter
    def tools(self, tools: list[dict] | None) -> None:
        self.prompt.tools = tools

    def conversation(self, extra: list[Message] | None = None) -> list[Message]:
        return self.prompt.conversation(extra)

    def clear(self) -> None:
        """Forget the conversation; the KV cache stays, so a shared system prompt is still reused."""
        self.messages = []

    def cancel(self) -> None:
        """Ask the running request to stop after the current token (safe from a signal handler)."""
        self._cancel.set()

    def describe(self) -> SessionInfo:
        rt, threads = self.runtime, self.runtime.threads
        # Without --threads the count moves with the load (threads.py): the banner says its ceiling.
        banner_threads = f"{threads.given} threads" if threads.given else f"up to {threads.max} threads"
        now = "" if threads.given else f" (follows the load, at most {threads.max})"
        return SessionInfo(
            banner=f"{rt.description} · ctx {rt.n_ctx} · {banner_threads} · loaded in {rt.load_ms:.0f} ms",
            details=[
                ("file", f"{rt.path} ({rt.description})"),
                (
                    "context",
                    f"{len(rt.kv_tokens)}/{rt.n_ctx} tokens in the KV cache (trained {rt.n_ctx_train})",
                ),
                ("threads", f"{threads.n}{now}"),
            ],
        )

    def close(self) -> None:
        # What the KV cache still holds (the REPL's conversation) goes to the disk prefix cache, so a
        # later `chat -c` prefills only its new turn; a one-shot request saved and freed it at release.
        sched = self.scheduler
        if self.disk_cache is not None and self._kept and sched.admission.idle:
            self._kept = False
            slot = next(reversed(sched.admission.idle))  # the prefix kept last: the conversation
            cells = SeqCells(self.runtime, slot, list(sched.admission.idle[slot]), sched.n_ctx_seq)
            self.cache_warning = self.disk_cache.save_tip(cells).warning
            cells.close()
        sched.close()
        self.runtime.close()

    def _runtime_view(self, after: bool) -> None:
        """With one sequence, the runtime's own single-sequence view (kv_tokens, clear()) stays true
        between requests: after one, it mirrors what slot 0 kept; before the next, a kept prefix that
        no longer matches it (the runtime was cleared or used directly) is emptied, not trusted."""
        sched, rt = self.scheduler, self.runtime
        if sched.n_slots != 1:
            return
        if after:
            rt.kv_tokens[:] = sched.admission.idle.get(0, [])
        elif 0 in sched.admission.idle and sched.admission.idle[0] != rt.kv_tokens:
            sched.forget(0)

    # -- one request -------------------------------------------------------------------------
    def _turn_inputs(self) -> TurnInputs:
        grammar = None if self.constraint is None else partial(self._grammars.check, self.constraint)
        return TurnInputs(
            self.runtime,
            self.scheduler,
            self.prompt,
            self._cancel,
            grammar,
            self.params,
            self.stops,
            self.word_filter_words,
            self.draft,
            self.disk_cache,
            self.overlap,
        )

    def ask(self, text: str | None, *, keep_cache: bool = True) -> Iterator[Event]:
        """One reply to `text` as the next user message; None answers the conversation as it stands
        (`chat --messages` ending with a tool result)."""
        self._cancel.clear()
        turn = Turn(self._turn_inputs(), text, keep_cache)
        if not self._load_reported:
            turn.stats.load_ms, self._load_reported = self.runtime.load_ms, True
        turn.stats.placement = self.runtime.placement.as_dict()
        self._runtime_view(after=False)
        try:
            turn.tokenize()  # ① template + tokenize
            yield from turn.schedule()  # ② the context budget, the sequence and its KV prefix
            self.last_prompt = turn.prompt
            turn.prefill()  # ③ up to the first sampled token
            yield from turn.decode()  # ④ decode, ⑤ post-process, ⑥ each event returned as it comes
            self.messages += turn.messages()
            yield from turn.release()  # ⑦ keep the KV cache for the next turn, or free it
            self._kept = keep_cache
        finally:
            turn.end(keep=False)  # a request stopped part-way frees its sequence
            self._runtime_view(after=True)
        turn.stats.threads = self.runtime.threads.as_dict()
        self.last_stats = turn.stats
        yield turn.stats
