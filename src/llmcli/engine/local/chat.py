"""A conversation with one model: each request runs through the seven stages and yields events.

① template + tokenize → ② schedule (context budget, KV prefix plan) → ③ prefill → ④ decode loop
→ ⑤ post-process → ⑥ return (the caller consumes the events) → ⑦ release (keep or free the KV).
The session holds the conversation; each stage of one request is a method of Turn (turn.py). Each
request is one sequence of the session's scheduler (scheduler.py): with one sequence (n_seq_max 1,
chat's default) the cells it keeps between turns are the conversation's KV cache.
"""

from __future__ import annotations

from collections.abc import Iterator

from llmcli.engine.events import Event, Stats
from llmcli.engine.local.cells import SeqCells
from llmcli.engine.local.grammar import grammar_check, think_token
from llmcli.engine.local.lookup import parse_draft
from llmcli.engine.local.prefix_cache import common_prefix
from llmcli.engine.local.runtime import Runtime
from llmcli.engine.local.sampler import GrammarCheck
from llmcli.engine.local.scheduler import Scheduler, SchedulerConfig
from llmcli.engine.local.session_cache import SessionCache
from llmcli.engine.local.turn import Turn
from llmcli.engine.messages import Message
from llmcli.engine.postprocess import WordFilter
from llmcli.engine.sampling import SamplingParams
from llmcli.engine.session import SessionInfo
from llmcli.engine.structured import THINK_OPEN, OutputConstraint
from llmcli.engine.templates.budget import TemplateLimit
from llmcli.engine.templates.choice import TemplateChoice, choose_template
from llmcli.engine.templates.render import ChatTemplate, PromptTooLong, RenderedPrompt
from llmcli.engine.templates.thinking import ThinkingForm
from llmcli.errors import Interrupted


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
        self.tools: list[dict] | None = None  # --tools: rendered into every prompt (OpenAI's shape)
        self.template_choice = choose_template(
            runtime.chat_template, runtime.arch, runtime.has_token, override=chat_template
        )
        self.template = ChatTemplate(
            self.template_choice.source,
            bos_token=runtime.piece(runtime.bos_id, special=True).decode("utf-8", "replace"),
            eos_token=runtime.piece(runtime.eos_id, special=True).decode("utf-8", "replace"),
            file=self.template_choice.file,
        )
        self.thinking = ThinkingForm.of(self.template_choice.source, runtime.has_token)
        self.think: bool | None = None  # --think/--no-think, /set think: None leaves the template's default
        self.system = system
        self.params = params or SamplingParams()
        self.stops = list(stops or [])
        self.word_filter_words = word_filter.words if word_filter else []
        self.draft = parse_draft(draft)  # "lookup": speculative decoding from prompt n-grams
        self.messages: list[Message] = []  # the conversation, without the system prompt
        self.last_stats: Stats | None = None
        self.last_prompt: RenderedPrompt | None = None
        # The disk prefix cache (set by the use-case unless --no-cache), and the start of the next
        # user text that later requests will share (a piped document): the prefill splits there.
        self.disk_cache: SessionCache | None = None
        self.stable_text: str | None = None
        self.cache_warning: str | None = None  # why the tip could not be saved at close, if it could not
        self._kept = False  # the last request kept its KV cache (a REPL turn): close saves it
        self._cancel = False
        self._load_reported = False
        self._noted: str | None = None

    # -- conversation ------------------------------------------------------------------------
    def conversation(self, extra: list[Message] | None = None) -> list[Message]:
        head = [Message("system", self.system)] if self.system else []
        return head + self.messages + (extra or [])

    def clear(self) -> None:
        """Forget the conversation; the KV cache stays, so a shared system prompt is still reused."""
        self.messages = []

    def cancel(self) -> None:
        """Ask the running request to stop after the current token (safe from a signal handler)."""
        self._cancel = True

    def describe(self) -> SessionInfo:
        rt = self.runtime
        return SessionInfo(
            banner=f"{rt.description} · ctx {rt.n_ctx} · {rt.n_threads} threads · "
            f"loaded in {rt.load_ms:.0f} ms",
            details=[
                ("file", f"{rt.path} ({rt.description})"),
                (
                    "context",
                    f"{len(rt.kv_tokens)}/{rt.n_ctx} tokens in the KV cache (trained {rt.n_ctx_train})",
                ),
                ("threads", str(rt.n_threads)),
            ],
        )

    def close(self) -> None:
        # What the KV cache still holds (the REPL's conversation) goes to the disk prefix cache, so a
        # later `chat -c` prefills only its new turn; a one-shot request saved and freed it at release.
        sched = self.scheduler
        if self.disk_cache is not None and self._kept and sched.idle:
            self._kept = False
            slot = next(reversed(sched.idle))  # the prefix kept last: the conversation
            cells = SeqCells(self.runtime, slot, list(sched.idle[slot]), sched.n_ctx_seq)
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
            rt.kv_tokens[:] = sched.idle.get(0, [])
        elif 0 in sched.idle and sched.idle[0] != rt.kv_tokens:
            sched.forget(0)

    def _tokenize_within_context(
        self,
        user: Message | None,
        start: int = 0,
        limit: int | None = None,
    ) -> RenderedPrompt | None:
        """The prompt with the history from `start` on, or None once it is known not to fit `limit`
        (it is not tokenized to the end). A long history that runs the template past its budget
        does not fit either, while there is history left to drop."""
        if self._cancel:
            raise Interrupted(
                "stopped while fitting the conversation into the context; the conversation is unchanged"
            )
        messages = self.messages[start:]
        head = [Message("system", self.system)] if self.system else []
        try:
            return self.template.tokenize(
                self.runtime,
                head + messages + ([user] if user is not None else []),
                limit=self.scheduler.n_ctx_seq if limit is None else limit,
                tools=self.tools,
                **self.thinking.variables(self.think),
            )
        except PromptTooLong:
            return None
        except TemplateLimit:
            if not messages:
                raise
            return None

    def _fit_history(self, user: Message | None, limit: int) -> tuple[int, RenderedPrompt | None]:
        """The oldest turn to keep so that the prompt fits `limit` tokens, and that prompt.

        Called once the whole history is known not to fit. It gallops back from the newest turn
        (1, 2, 4… turns), then bisects: each probe renders only the turns it keeps, so the work
        follows what is kept, not the length of the history. A turn starts at a user message;
        the system prompt is never dropped.
        """
        # starts[k]: where the history begins when k turns are kept; starts[0] is no history.
        starts = (
            [len(self.messages)]
            + [i for i in range(len(self.messages) - 1, 0, -1) if self.messages[i].role == "user"]
            + [0]
        )
        fits: dict[int, RenderedPrompt] = {}

        def probe(k: int) -> bool:
            prompt = self._tokenize_within_context(user, starts[k], limit) if limit > 0 else None
            if prompt is not None:
                fits[k] = prompt
            return prompt is not None

        good, bad = 0, len(starts) - 1  # the whole history (bad) is known not to fit
        k = 1
        while k < bad and probe(k):
            good, k = k, 2 * k
        bad = min(bad, k)
        while bad - good > 1:
            mid = (good + bad) // 2
            good, bad = (mid, bad) if probe(mid) else (good, mid)
        if good in fits:
            return starts[good], fits[good]
        return starts[0], self._tokenize_within_context(user, starts[0])

    def _grammar_check(self, prompt: RenderedPrompt) -> GrammarCheck | None:
        """The constraint's grammar, applied from the start, after the model's thinking block, or
        from its trigger on (tool_choice auto)."""
        if self.constraint is None:
            return None
        opens = prompt.text.rstrip().endswith(THINK_OPEN)
        return grammar_check(self.runtime, self.constraint, opens, think_token(self.runtime))

    def _stable_length(self, prompt: RenderedPrompt, text: str) -> int:
        """How many of the prompt's tokens later requests will share: those of the prompt rendered with
        the user text cut to its stable start (`stable_text`, else nothing), up to where they differ.
        Never the whole prompt: the last token is computed again for its logits."""
        cut = self.stable_text if self.stable_text and text.startswith(self.stable_text) else ""
        try:
            shorter = self._tokenize_within_context(Message("user", cut))
        except Interrupted:
            raise
        except Exception:  # a template that refuses the cut message: no split, no cache
            return 0
        if shorter is None:
            return 0
        return min(common_prefix(shorter.tokens, prompt.tokens), len(prompt.tokens) - 1)

    # -- one request -------------------------------------------------------------------------
    def ask(self, text: str | None, *, keep_cache: bool = True) -> Iterator[Event]:
        """One reply to `text` as the next user message; None answers the conversation as it stands
        (`chat --messages` ending with a tool result)."""
        self._cancel = False
        turn = Turn(self, text, keep_cache)
        if not self._load_reported:
            turn.stats.load_ms, self._load_reported = self.runtime.load_ms, True
        self._runtime_view(after=False)
        try:
            turn.tokenize()  # ① template + tokenize
            yield from turn.schedule()  # ② the context budget, the sequence and its KV prefix
            turn.prefill()  # ③ up to the first sampled token
            yield from turn.decode()  # ④ decode, ⑤ post-process, ⑥ each event returned as it comes
            self.messages += turn.messages()
            yield from turn.release()  # ⑦ keep the KV cache for the next turn, or free it
        finally:
            turn.end(keep=False)  # a request stopped part-way frees its sequence
            self._runtime_view(after=True)
        self.last_stats = turn.stats
        yield turn.stats
