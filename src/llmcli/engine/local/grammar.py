"""llama.cpp's grammar sampler: a GBNF grammar parsed by llama.cpp, and when it starts to apply.

The backend-neutral half (the options into an OutputConstraint, the check of the reply) is
engine/structured.py; this half needs llama.cpp itself.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from llmcli.engine.local.backend import LOG_LINES
from llmcli.engine.local.backend import llama as _llama
from llmcli.engine.local.gbnf_bounds import check_shape
from llmcli.engine.local.gbnf_chars import check_chars, check_text
from llmcli.engine.local.sampler import GrammarCheck
from llmcli.engine.schema_check import short
from llmcli.engine.templates.thinking import CLOSE, OPEN
from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.engine.local.runtime import Runtime
    from llmcli.engine.structured import OutputConstraint


# -- GBNF: parsed by llama.cpp before the model loads -------------------------------------------
_FD2 = threading.RLock()


@contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """llama.cpp's grammar parser writes its error to fd 2 itself; keep it off the user's stderr.
    fd 2 is the process's: one capture at a time (serve checks tools' grammars in worker threads
    while its engine thread builds others), or one's restore would leave fd 2 on another's sink."""
    lines: list[str] = []
    with _FD2, tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines += sink.read().decode("utf-8", "replace").splitlines()


def grammar_sampler(vocab, gbnf: str, source: str, *, from_schema: bool = False):
    """llama.cpp's grammar sampler, or UsageError with the parser's reason (never a silent no-op).
    `from_schema`: llmcli wrote the grammar from the user's schema, so no message blames a grammar."""
    fix = "simplify the schema" if from_schema else "fix the grammar"
    what = f"{source}: the grammar made from it" if from_schema else source
    check_shape(gbnf, what, fix)  # llama.cpp's recursive parser must never see what overflows it
    check_text(gbnf, what, fix)
    ll = _llama()
    if not gbnf.strip():
        raise UsageError(f"{source} is empty; it needs at least a root rule (root ::= ...)")
    with _stderr_captured() as printed:
        sampler = ll.llama_sampler_init_grammar(vocab, gbnf.encode("utf-8"), b"root")
    if sampler:
        try:  # well formed: now what it demands (llama.cpp aborts on a grammar no token can continue)
            check_chars(gbnf, what, fix)
        except UsageError:
            ll.llama_sampler_free(sampler)
            raise
        return sampler
    reason = _parse_error(printed, gbnf) or (LOG_LINES[-1].strip() if LOG_LINES else "llama.cpp refused it")
    if vocab is None and "no vocab" in reason:
        return None  # token references (<[id]>, <token>) need the model: checked again once it loads
    if from_schema:
        raise UsageError(f"{what} is refused by llama.cpp ({short(reason)}); {fix}")
    raise UsageError(f"{source} is not a valid GBNF grammar ({short(reason)}); {fix}")


PARSE_ERROR = "error parsing grammar: "


def _parse_error(printed: list[str], gbnf: str) -> str | None:
    """llama.cpp's parse error, with where it happened. llama.cpp writes '<reason> at <the rest of
    the grammar>', a blank line, then the whole grammar: the rest is a suffix of the grammar, which
    gives the line and column (an empty rest would otherwise leave a dangling 'at')."""
    text = "\n".join(printed)
    start = text.find(PARSE_ERROR)
    if start < 0:
        return None
    what = text[start + len(PARSE_ERROR) :]
    for dump in ("\n\n" + gbnf, "\n\n" + gbnf.rstrip("\n")):  # splitlines may drop the final newline
        if what.endswith(dump):
            what = what[: len(what) - len(dump)]
            break
    at = what.find(" at ")
    while at >= 0:
        rest = what[at + 4 :]
        if gbnf.endswith(rest):
            if not rest.strip():
                where = f"the end of the grammar (line {gbnf.rstrip().count(chr(10)) + 1})"
            else:
                pos = len(gbnf) - len(rest)
                line, column = gbnf.count("\n", 0, pos) + 1, pos - (gbnf.rfind("\n", 0, pos) + 1) + 1
                where = f"line {line}, column {column}: {short(rest, 30)}"
            return f"{what[:at]} at {where}"
        at = what.find(" at ", at + 1)
    first = what.split("\n", 1)[0].strip()
    return first[:-3] if first.endswith(" at") else first


def check_gbnf(gbnf: str, source: str, *, from_schema: bool = False) -> None:
    """Parse a grammar without a model (llama.cpp needs no vocabulary for that), then free it."""
    sampler = grammar_sampler(None, gbnf, source, from_schema=from_schema)
    if sampler:
        _llama().llama_sampler_free(sampler)


# -- when the grammar starts: after </think>, and at a lazy grammar's trigger -------------------
class ThinkGate:
    """When the grammar starts to apply: at once, after a thinking block is closed, or (a lazy
    grammar, tool_choice auto) once the reply writes the trigger.

    A reasoning model may open its reply with <think> (a single token in its vocabulary), or its
    template may open the block in the prompt. Either way the model thinks freely, and the grammar
    applies from the token after </think> (the idea of llama.cpp's lazy grammar).

    With a trigger the reply is then "waiting": free text, watched for the trigger. Once a token
    completes it, the grammar is fed the reply from the trigger on and takes over from the next
    token (GrammarCheck._wait). Unlike llama.cpp's own lazy sampler, which aborts the process when
    the text after the trigger in that token is not what the grammar accepts, such a token is drawn
    again. `at_start`: only a trigger that opens the reply (after whitespace) counts; a reply that
    starts otherwise is "free" for good.
    """

    def __init__(
        self,
        think_token: int | None,
        opened_in_prompt: bool = False,
        trigger: str | None = None,
        at_start: bool = False,
    ) -> None:
        self.think_token = think_token
        self.trigger = trigger.encode("utf-8") if trigger else None
        self.at_start = at_start
        self.state = (
            "thinking" if opened_in_prompt else ("undecided" if think_token is not None else self._after())
        )
        self._text = ""
        self._seen = b""  # while waiting: the reply's start (at_start), or the tail a trigger may end in

    def _after(self) -> str:
        return "waiting" if self.trigger else "constrained"

    @property
    def constrained(self) -> bool:
        return self.state == "constrained"

    def first(self, token: int) -> bool:
        """The first token was drawn unconstrained; True if it opens a thinking block."""
        self.state = "thinking" if token == self.think_token else self._after()
        return self.state == "thinking"

    def observe(self, piece: str) -> None:
        """Text generated while thinking; the grammar starts after the closing tag."""
        if self.state == "thinking":
            self._text = (self._text + piece)[-64:]
            if CLOSE in self._text:
                self.state = self._after()

    def verdict(self, piece: bytes) -> str:
        """While waiting, what a drawn token's bytes would do: "text" (still free), "fires" (it
        completes the trigger), or "miss" (the reply did not start with the trigger: free for good)."""
        assert self.trigger is not None
        text = self._seen + piece
        if self.at_start:
            lead = text.lstrip()
            if lead.startswith(self.trigger):
                return "fires"
            return "text" if self.trigger.startswith(lead) else "miss"
        return "fires" if self.trigger in text else "text"

    def from_trigger(self, piece: bytes) -> bytes:
        """The reply from the trigger on, once `piece` completes it: what the grammar must match."""
        assert self.trigger is not None
        text = self._seen + piece
        return text[text.find(self.trigger) :]

    def advance(self, piece: bytes, verdict: str) -> None:
        """The drawn token is taken, with its verdict."""
        if verdict == "fires":
            self.state = "constrained"
        elif verdict == "miss":
            self.state = "free"
        elif self.trigger is not None:
            seen = self._seen + piece
            keep = len(self.trigger) - 1  # a later trigger can only begin in these bytes
            self._seen = seen if self.at_start else seen[max(0, len(seen) - keep) :]


class Grammars:
    """A request's constraint as its sequence's grammar check, for chat's turns and serve's requests
    alike: parsed by llama.cpp with the model's vocabulary, applied at once, after the thinking
    block the model opens (a single <think> token) or the prompt left open, or from a lazy grammar's
    trigger on."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._think: int | None = None
        self._looked = False

    def think_token(self) -> int | None:
        """<think> as one token of the vocabulary, or None; looked up once."""
        if not self._looked:
            rt, self._looked = self.rt, True
            ids = rt.tokenize(OPEN, parse_special=True)
            one = len(ids) == 1 and rt.piece(ids[0], special=True) == OPEN.encode()
            self._think = ids[0] if one else None
        return self._think

    def check(self, constraint: OutputConstraint, opens_thinking: bool) -> GrammarCheck:
        rt, c = self.rt, constraint
        ptr = grammar_sampler(rt.vocab, c.gbnf, c.source, from_schema=c.kind != "grammar")
        gate = ThinkGate(self.think_token(), opens_thinking, trigger=c.trigger, at_start=c.trigger_at_start)
        return GrammarCheck(rt, ptr, gate)
