"""Log-probabilities and several choices on OpenAI's routes: the request fields and the response shapes.

`logprobs` / `top_logprobs` (chat) and `logprobs` as a count (completions) ask the engine for the
model's log-probabilities of each reply token (engine/local/logprobs.py); `n` asks for n choices of
one prompt, prefilled once. Each choice's tokens come back in OpenAI's shape, chunk by chunk when
streamed: chat `{"content": [{token, logprob, bytes, top_logprobs}]}`, completions `{tokens,
token_logprobs, top_logprobs, text_offset}`.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any

from llmcli.engine.local.logprobs import MAX_TOP, Candidate, TokenLogprob
from llmcli.serve.errors import bad
from llmcli.serve.protocol import checked, refuse

MAX_CHOICES = 8  # n: each choice is a sequence of its own, holding a place of --parallel
MAX_COMPLETION_LOGPROBS = 5  # OpenAI's bound on the completions route's logprobs


def _count(low: int, high: int):
    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise refuse(f"must be an integer in {low}..{high}")
        if not low <= value <= high:
            raise refuse(f"must be in {low}..{high}, not {value}")
        return value

    return check


def _schema(low: int, high: int, text: str) -> dict:
    counted = {"type": "integer", "minimum": low, "maximum": high, "description": text}
    return {"anyOf": [counted, {"type": "null"}]}


Choices = checked(_count(1, MAX_CHOICES), _schema(1, MAX_CHOICES, "choices of the one prompt"))
TopLogprobs = checked(_count(0, MAX_TOP), _schema(0, MAX_TOP, "most likely tokens given at each position"))
CompletionLogprobs = checked(
    _count(0, MAX_COMPLETION_LOGPROBS),
    _schema(0, MAX_COMPLETION_LOGPROBS, "log-probabilities of each token and of this many most likely ones"),
)


def chat_logprobs(logprobs: bool | None, top_logprobs: int | None) -> int | None:
    """Chat's two fields -> the number of most likely tokens to give (None: no log-probabilities)."""
    if top_logprobs and not logprobs:  # 0 asks for nothing
        raise bad(
            "top_logprobs",
            "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled; "
            'send "logprobs": true with it',
        )
    return (top_logprobs or 0) if logprobs else None


def token_text(piece: bytes) -> str:
    """A token's text; a token that is only part of a UTF-8 character is written as OpenAI writes it,
    `bytes:\\xe2\\x80`, and its `bytes` carry the raw bytes."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in piece)


def _chat_candidate(c: Candidate) -> dict:
    return {"token": token_text(c.piece), "logprob": c.logprob, "bytes": list(c.piece)}


class ChoiceLogprobs:
    """One choice's log-probabilities in its route's shape, a chunk at a time (a completion's
    text_offset carries on from one chunk to the next)."""

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.offset = 0  # characters of the choice's text before the next token
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def shape(self, entries: Sequence[TokenLogprob]) -> dict:
        if self.chat:
            return {
                "content": [
                    {**_chat_candidate(e.chosen), "top_logprobs": [_chat_candidate(c) for c in e.top]}
                    for e in entries
                ]
            }
        shaped: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            shaped["tokens"].append(token_text(e.chosen.piece))
            shaped["token_logprobs"].append(e.chosen.logprob)
            # the chosen token is among them, as OpenAI gives "the most likely ... as well the chosen"
            top = {token_text(c.piece): c.logprob for c in e.top}
            top.setdefault(token_text(e.chosen.piece), e.chosen.logprob)
            shaped["top_logprobs"].append(top)
            shaped["text_offset"].append(self.offset)
            self.offset += len(self._decoder.decode(e.chosen.piece))
        return shaped
