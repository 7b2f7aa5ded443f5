"""Reasoning models: what a model's template and vocabulary say about `<think>…</think>`, and the
stream splitter that separates a reply's reasoning from its answer.

Decided from the model itself, never from its name:
- a reply may hold reasoning when the template mentions `<think>` or `</think>`, or `<think>` is one
  token of the vocabulary;
- the template can switch it when it reads `enable_thinking` (Qwen3);
- a reply starts inside the reasoning when the rendered generation prompt ends with an open
  `<think>` (the DeepSeek-R1 distills), so the reply only closes it.
What the next turn keeps is the template's business: the reply joins the history as generated,
and a template that drops earlier thinking (`content.split('</think>')[-1]`) drops it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

OPEN, CLOSE = "<think>", "</think>"
TOGGLE = "enable_thinking"

REASONING, ANSWER = "reasoning", "answer"


@dataclass(frozen=True)
class ThinkingForm:
    parses: bool  # a reply may hold <think>…</think>
    toggle: bool  # the template reads enable_thinking
    why: str  # one line for show and /show

    @classmethod
    def of(cls, template_source: str, has_token: Callable[[str], bool]) -> ThinkingForm:
        mentions = OPEN in template_source or CLOSE in template_source
        toggle = TOGGLE in template_source
        token = has_token(OPEN)
        reasons = [
            text
            for text, hit in (
                ("the template writes <think>", mentions),
                (f"the template reads {TOGGLE}", toggle),
                ("<think> is a token", token),
            )
            if hit
        ]
        parses = bool(reasons)
        return cls(parses, toggle, "; ".join(reasons) if parses else "no thinking form")

    def variables(self, think: bool | None) -> dict:
        """Template variables for --think/--no-think: enable_thinking, where the template reads it."""
        return {TOGGLE: think} if think is not None and self.toggle else {}

    def note(self, think: bool | None) -> str | None:
        """What to tell the user when --think/--no-think cannot do what it says."""
        if think is None or self.toggle:
            return None
        if not self.parses:
            flag = "--think" if think else "--no-think"
            return f"{flag}: this model's template has no thinking form; it changes nothing"
        if not think:
            return (
                "--no-think: this model's template has no no-think form (no enable_thinking); "
                "it may still think"
            )
        return None


def strip_thinking(text: str) -> str:
    """The reply after its thinking block, if it has one (a constrained reply is checked without it)."""
    head, sep, tail = text.partition(CLOSE)
    if sep and (head.lstrip().startswith(OPEN) or OPEN not in head):
        return tail
    return text


def opens_thinking(prompt_text: str) -> bool:
    """Whether the generation prompt leaves a <think> open, so the reply starts inside the reasoning."""
    return prompt_text.rstrip().endswith(OPEN)


def _held_tail(text: str, tag: str) -> int:
    """The length of the longest end of `text` that could be the start of `tag`."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class ReasoningSplitter:
    """Streamed reply text in, (kind, text) pieces out: kind is REASONING or ANSWER.

    Tags split across deltas are held until they are whole; the whitespace between `</think>`
    and the answer is dropped, as the templates drop it when they keep the answer.
    """

    def __init__(self, parses: bool, opened: bool) -> None:
        self.state = "thinking" if opened else ("start" if parses else "answer")
        self._held = ""
        self.closed = False  # a </think> was seen: the answer has begun

    @property
    def thinking(self) -> bool:
        return self.state in ("start", "thinking")

    def feed(self, text: str) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        text = self._held + text
        self._held = ""
        while text:
            if self.state == "start":
                stripped = text.lstrip()
                if stripped.startswith(OPEN):
                    self.state, text = "thinking", stripped[len(OPEN) :]
                elif OPEN.startswith(stripped):  # may still become <think>
                    self._held = text
                    return out
                else:
                    self.state = "answer"
            elif self.state == "thinking":
                at = text.find(CLOSE)
                if at >= 0:
                    self._emit(out, REASONING, text[:at])
                    self.state, self.closed, text = "gap", True, text[at + len(CLOSE) :]
                else:
                    keep = _held_tail(text, CLOSE)
                    self._emit(out, REASONING, text[: len(text) - keep])
                    self._held = text[len(text) - keep :]
                    return out
            elif self.state == "gap":
                text = text.lstrip()
                if text:
                    self.state = "answer"
            else:
                self._emit(out, ANSWER, text)
                return out
        return out

    def flush(self) -> list[tuple[str, str]]:
        held, self._held = self._held, ""
        out: list[tuple[str, str]] = []
        self._emit(
            out, REASONING if self.state == "thinking" else ANSWER, held if self.state != "gap" else ""
        )
        return out

    @staticmethod
    def _emit(out: list[tuple[str, str]], kind: str, text: str) -> None:
        if text:
            out.append((kind, text))
