"""The conversation and how it becomes a prompt that fits the context: what a Turn (turn.py) asks of it.

A ChatSession (chat.py) holds one and reads its conversation through it; a Turn tokenizes the
request with it (①), fits the history into the context and drops what does not fit (②), and asks
how much of the prompt later requests will share. A CancelFlag is the one bit a signal handler
sets and both check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from llmcli.engine.local.prefix_cache import common_prefix
from llmcli.engine.messages import Message
from llmcli.engine.templates.budget import TemplateLimit
from llmcli.engine.templates.render import ChatTemplate, PromptTooLong, RenderedPrompt
from llmcli.engine.templates.thinking import ThinkingForm
from llmcli.errors import Interrupted

if TYPE_CHECKING:
    from llmcli.engine.local.runtime import Runtime


class CancelFlag:
    """Set from a signal handler (a plain attribute write: no lock to deadlock on), read between tokens."""

    def __init__(self) -> None:
        self.is_set = False

    def set(self) -> None:
        self.is_set = True

    def clear(self) -> None:
        self.is_set = False


@dataclass
class ConversationPrompt:
    runtime: Runtime
    template: ChatTemplate
    thinking: ThinkingForm
    limit: int  # the tokens one sequence can hold: a prompt's ceiling
    cancel: CancelFlag
    system: str | None = None
    messages: list[Message] = field(default_factory=list)  # the conversation, without the system prompt
    think: bool | None = None  # --think/--no-think, /set think: None leaves the template's default
    # The start of the next user text that later requests will share (a piped document).
    stable_text: str | None = None
    noted: str | None = None  # the thinking note last shown, so that it is shown once
    tools: list[dict] | None = None  # --tools: rendered into every prompt (OpenAI's shape)

    def conversation(self, extra: list[Message] | None = None) -> list[Message]:
        head = [Message("system", self.system)] if self.system else []
        return head + self.messages + (extra or [])

    def thinking_note(self) -> str | None:
        """What --think/--no-think cannot do with this template, when it was not said last turn."""
        note = self.thinking.note(self.think)
        shown, self.noted = self.noted, note
        return note if note and note != shown else None

    def tokenize(
        self, user: Message | None, start: int = 0, limit: int | None = None
    ) -> RenderedPrompt | None:
        """The prompt with the history from `start` on, or None once it is known not to fit `limit`
        (it is not tokenized to the end). A long history that runs the template past its budget
        does not fit either, while there is history left to drop."""
        if self.cancel.is_set:
            raise Interrupted(
                "stopped while fitting the conversation into the context; the conversation is unchanged"
            )
        messages = self.messages[start:]
        head = [Message("system", self.system)] if self.system else []
        try:
            return self.template.tokenize(
                self.runtime,
                head + messages + ([user] if user is not None else []),
                limit=self.limit if limit is None else limit,
                tools=self.tools,
                **self.thinking.variables(self.think),
            )
        except PromptTooLong:
            return None
        except TemplateLimit:
            if not messages:
                raise
            return None

    def fit_history(self, user: Message | None, limit: int) -> tuple[int, RenderedPrompt | None]:
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
            prompt = self.tokenize(user, starts[k], limit) if limit > 0 else None
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
        return starts[0], self.tokenize(user, starts[0])

    def drop(self, start: int) -> None:
        """Forget the messages before `start` (what fit_history found does not fit)."""
        self.messages = self.messages[start:]

    def stable_length(self, prompt: RenderedPrompt, text: str) -> int:
        """How many of the prompt's tokens later requests will share: those of the prompt rendered with
        the user text cut to its stable start (`stable_text`, else nothing), up to where they differ.
        Never the whole prompt: the last token is computed again for its logits."""
        cut = self.stable_text if self.stable_text and text.startswith(self.stable_text) else ""
        try:
            shorter = self.tokenize(Message("user", cut))
        except Interrupted:
            raise
        except Exception:  # a template that refuses the cut message: no split, no cache
            return 0
        if shorter is None:
            return 0
        return min(common_prefix(shorter.tokens, prompt.tokens), len(prompt.tokens) - 1)
