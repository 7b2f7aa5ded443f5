"""Stage ①: render the model's chat template exactly as transformers does, and tokenize it safely.

The prompt is transformers' prompt. The template renders over the REAL message text, so `|trim`,
`.strip()`, `.split('</think>')`, `'</think>' in content`, `|length` and `|tojson` act on what the
user wrote, and the text equals `apply_chat_template(..., tokenize=False)` character for character.
The environment (template_env.py) is transformers' own, inside Jinja's immutable sandbox and a
time and size budget.

Text a user types or pipes never becomes a control token. Three steps keep that promise:

1. Defuse. Before rendering, every occurrence of a control token's text inside a message string
   (the vocabulary's control and unknown tokens, read once from llama.cpp: exactly the tokens that
   special-token parsing switches on) is replaced, character by character, with private-use
   stand-ins: one code point per (token, position), so the text keeps its length and a template
   that slices, measures, strips or splits
   it sees the same shape. Private-use characters already in the text are escaped the same way.
   transformers' `mark_control_tokens` does the same job with markers around each token; stand-ins
   keep `|length` and slicing exact.
2. Locate. A second render wraps each message string in markers. When that render, markers
   removed, equals the first, the markers give each message's span exactly. When a template edits
   the text (trims it, drops earlier thinking) the markers no longer line up, so each message's
   text, or its trimmed form, or its answer after `</think>`, is searched for in order instead.
3. Tokenize. Template markup is tokenized with special-token parsing on; message spans and every
   stand-in run (wherever a template moved it) are restored to the original text and tokenized
   with it off. A reply llmcli generated, found verbatim, keeps the exact ids it was sampled as,
   so the KV cache's prefix still matches next turn; where a template rewrites history (drops
   earlier thinking), reuse holds up to that point.

What is left: a template that rewrites ordinary message characters into control-token text (say,
lower-casing "<|IM_END|>") could still form one outside a located span; no real template does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from llmcli.engine.messages import Message
from llmcli.engine.templates.sandbox import RENDER_CHARS, Budget, compile_template, render, told_of_file
from llmcli.errors import ContextOverflow, TemplateError

# Used when a GGUF carries no template: ChatML, the most common format among open models.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Stand-ins come from the private-use areas; span markers are Unicode noncharacters. Both are
# escaped when they occur in message text, so neither can be forged.
_STAND_IN_RANGES = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))
_MARK_OPEN, _MARK_SEP, _MARK_CLOSE = "\ufdd0", "\ufdd1", "\ufdd2"
_ESCAPED = re.compile("[\ue000-\uf8ff\ufdd0-\ufdef\U000f0000-\U0010ffff]")
_MARKS = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_SEP}|{_MARK_CLOSE}")

_CONTROL_ATTRS = (1 << 0) | (1 << 3)  # LLAMA_TOKEN_ATTR_UNKNOWN | CONTROL: what parse_special toggles


@dataclass
class RenderedPrompt:
    tokens: list[int]
    text: str  # the rendered prompt, for /stats and debugging


class PromptTooLong(ContextOverflow):
    """Tokenizing stopped early: the prompt holds at least `at_least` tokens, past the limit."""

    def __init__(self, at_least: int, limit: int) -> None:
        super().__init__(
            f"the prompt is over {limit} tokens, more than the context holds; shorten it or raise --ctx"
        )
        self.at_least = at_least


@dataclass
class _Defuser:
    """Length-preserving stand-ins for control-token text (and private-use text) in message strings."""

    original: dict[int, str] = field(default_factory=dict)  # stand-in code point -> original character
    _allocated: dict[tuple, str] = field(default_factory=dict)
    _next: int = 0
    _runs: tuple[int, re.Pattern] | None = None  # the stand-in pattern, for how many stand-ins

    def stand_in(self, key: tuple, char: str) -> str:
        if key not in self._allocated:
            point = self._code_point(self._next)
            self._next += 1
            self._allocated[key] = chr(point)
            self.original[point] = char
        return self._allocated[key]

    @staticmethod
    def _code_point(n: int) -> int:
        for lo, hi in _STAND_IN_RANGES:
            if n <= hi - lo:
                return lo + n
            n -= hi - lo + 1
        raise TemplateError(
            "the conversation holds too many distinct special-token strings to render safely; "
            "remove them from the messages"
        )

    def defuse(self, text: str, controls: list[tuple[int, int]]) -> str:
        """Replace the control-token text at `controls` (spans) and escape private-use characters."""
        parts, pos = [], 0
        for start, end in controls:
            parts.append(self._escape(text[pos:start]))
            token = text[start:end]
            parts.append("".join(self.stand_in((token, i), ch) for i, ch in enumerate(token)))
            pos = end
        parts.append(self._escape(text[pos:]))
        return "".join(parts)

    def _escape(self, text: str) -> str:
        return _ESCAPED.sub(lambda m: self.stand_in(("char", m.group()), m.group()), text)

    def restore(self, text: str) -> str:
        return text.translate(self.original) if self.original else text

    def runs(self, text: str) -> list[tuple[int, int]]:
        """The [start, end) runs of stand-ins in text."""
        if not self.original:
            return []
        if self._runs is None or self._runs[0] != len(self.original):
            chars = "".join(map(chr, self.original))
            self._runs = (len(self.original), re.compile(f"[{re.escape(chars)}]+"))
        return [m.span() for m in self._runs[1].finditer(text)]


@dataclass
class _ControlTexts:
    """The vocabulary's control-token texts (what parse_special toggles), found in text without tokenizing."""

    vocab: object
    texts: frozenset[str]
    lengths: tuple[int, ...]  # longest first
    starts: re.Pattern | None  # any first character of a control text

    @classmethod
    def of(cls, runtime) -> _ControlTexts:
        ll, vocab = runtime.ll, runtime.vocab
        texts = set()
        for tid in range(runtime.n_vocab):
            if ll.llama_vocab_get_attr(vocab, tid) & _CONTROL_ATTRS:
                raw = ll.llama_vocab_get_text(vocab, tid)
                if raw:
                    texts.add(raw.decode("utf-8", "replace"))
        starts = re.compile("[" + "".join(sorted({re.escape(t[0]) for t in texts})) + "]") if texts else None
        return cls(vocab, frozenset(texts), tuple(sorted({len(t) for t in texts}, reverse=True)), starts)

    def find(self, text: str) -> list[tuple[int, int]]:
        """Leftmost-longest, non-overlapping. A control text overlapping a found one is broken by defusing."""
        found: list[tuple[int, int]] = []
        if self.starts is None:
            return found
        end = 0
        for match in self.starts.finditer(text):
            at = match.start()
            if at < end:
                continue
            for length in self.lengths:
                if text[at : at + length] in self.texts:
                    end = at + length
                    found.append((at, end))
                    break
        return found


class ChatTemplate:
    def __init__(
        self, source: str | None, *, bos_token: str = "", eos_token: str = "", file: str | None = None
    ) -> None:
        """file: the --chat-template file the source came from, named in its errors (None: the model's)."""
        self.source = source or FALLBACK_TEMPLATE
        self.is_fallback = source is None
        self.file = file
        with self._failures_told():
            self._template = compile_template(self.source)
        self.bos_token, self.eos_token = bos_token, eos_token
        self._defuser = _Defuser()
        self._defused: dict[str, str] = {}  # message text -> its defused form, for this vocabulary
        self._control: _ControlTexts | None = None

    @contextmanager
    def _failures_told(self) -> Iterator[None]:
        """A failure of a template from a file is told of that file, not of the model."""
        try:
            yield
        except TemplateError as exc:
            if self.file is None:
                raise
            raise type(exc)(told_of_file(str(exc), self.file)) from None

    # -- rendering -------------------------------------------------------------------------------
    def _variables(self, messages: list[dict], add_generation_prompt: bool, extra: dict) -> dict:
        # As transformers passes them: tools and documents are none, not undefined.
        return {
            "messages": messages,
            "tools": None,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
        }

    def _render(self, messages: list[dict], add_generation_prompt: bool, extra: dict) -> str:
        size = sum(len(str(m.get("content", ""))) for m in messages)
        budget = Budget(max_chars=RENDER_CHARS + 4 * size)  # room for any real prompt, not for a blow-up
        with self._failures_told():
            return render(self._template, budget, **self._variables(messages, add_generation_prompt, extra))

    def render(self, messages: list[dict], add_generation_prompt: bool = True, **extra) -> str:
        """The text transformers' apply_chat_template(tokenize=False) gives for these messages."""
        return self._render(messages, add_generation_prompt, extra)

    # -- tokenizing ------------------------------------------------------------------------------
    def tokenize(
        self,
        runtime,
        messages: list[Message],
        add_generation_prompt: bool = True,
        *,
        limit: int | None = None,
        continue_final: bool = False,
        **extra,
    ) -> RenderedPrompt:
        """Render over the real text, then tokenize markup and message text with the right rules.

        With `limit`, stop as soon as the prompt is known to exceed that many tokens (PromptTooLong).
        `continue_final`: the prompt ends inside the last message, right after its text (stripped of
        trailing whitespace), as transformers' continue_final_message cuts it; the reply continues it.
        """
        if continue_final:
            add_generation_prompt = False
        defused = [self._defuse(runtime, m.content) for m in messages]
        as_dicts = [{"role": m.role, "content": d} for m, d in zip(messages, defused, strict=True)]
        rendered = self._render(as_dicts, add_generation_prompt, extra)
        if not rendered.strip():
            with self._failures_told():
                raise TemplateError(
                    "the model's chat template rendered an empty prompt; "
                    "use a model with a working chat template"
                )
        spans = self._spans(messages, defused, rendered, add_generation_prompt, extra)
        tokens = _Tokens(runtime, limit)
        if continue_final:
            spans, rendered = _cut_after_last(spans, rendered, len(messages) - 1, self._defuser)
        pos = 0
        for start, end, index in spans:
            self._tokenize_markup(tokens, rendered[pos:start])
            text = self._defuser.restore(rendered[start:end])
            message = messages[index]
            if message.token_ids is not None and text == message.content:
                tokens.add_ids(message.token_ids)
            else:
                tokens.add(text, parse_special=False)
            pos = end
        self._tokenize_markup(tokens, rendered[pos:])
        ids = tokens.ids
        # Models that want a BOS get one, unless their template already wrote it.
        if runtime.add_bos and (not ids or ids[0] != runtime.bos_id):
            ids.insert(0, runtime.bos_id)
        return RenderedPrompt(tokens=ids, text=self._defuser.restore(rendered))

    def _tokenize_markup(self, tokens: _Tokens, markup: str) -> None:
        """Template text, except stand-in runs (message text a template moved), which stay plain text."""
        pos = 0
        for start, end in self._defuser.runs(markup):
            tokens.add(markup[pos:start], parse_special=True)
            tokens.add(self._defuser.restore(markup[start:end]), parse_special=False)
            pos = end
        tokens.add(markup[pos:], parse_special=True)

    def _defuse(self, runtime, text: str) -> str:
        cached = self._defused.get(text)
        if cached is None:
            if len(self._defused) > 4096:
                self._defused.clear()
            cached = self._defused[text] = self._defuser.defuse(
                text, self._control_matcher(runtime).find(text)
            )
        return cached

    def _control_matcher(self, runtime) -> _ControlTexts:
        if self._control is None or self._control.vocab is not runtime.vocab:
            self._control = _ControlTexts.of(runtime)
        return self._control

    def _spans(
        self,
        messages: list[Message],
        defused: list[str],
        rendered: str,
        add_generation_prompt: bool,
        extra: dict,
    ) -> list[tuple[int, int, int]]:
        """Where each message's text sits in the rendered prompt: (start, end, message index), in order."""
        marked = [
            {"role": m.role, "content": f"{_MARK_OPEN}{i}{_MARK_SEP}{d}{_MARK_CLOSE}" if d else d}
            for i, (m, d) in enumerate(zip(messages, defused, strict=True))
        ]
        try:
            with_marks = self._render(marked, add_generation_prompt, extra)
        except TemplateError:
            with_marks = ""
        exact = _spans_from_marks(with_marks, rendered)
        return exact if exact is not None else _spans_by_search(defused, rendered)


def _cut_after_last(
    spans: list[tuple[int, int, int]], rendered: str, last: int, defuser: _Defuser
) -> tuple[list[tuple[int, int, int]], str]:
    """The spans and text up to the end of message `last`'s text, trailing whitespace dropped."""
    found = [i for i, span in enumerate(spans) if span[2] == last]
    if not found:
        raise TemplateError(
            "the chat template does not write the final message's text, so it cannot be continued; "
            "send it without continue_final_message"
        )
    start, end, index = spans[found[-1]]
    text = defuser.restore(rendered[start:end])
    kept = end - (len(text) - len(text.rstrip()))  # stand-ins are whitespace-free, so lengths agree
    return [*spans[: found[-1]], (start, kept, index)], rendered[:kept]


def _spans_from_marks(with_marks: str, rendered: str) -> list[tuple[int, int, int]] | None:
    spans, out_len, last, open_at = [], 0, 0, None
    for match in _MARKS.finditer(with_marks):
        out_len += match.start() - last
        last = match.end()
        if match.group(1) is not None:
            if open_at is not None:
                return None
            open_at = (out_len, int(match.group(1)))
        else:
            if open_at is None:
                return None
            spans.append((open_at[0], out_len, open_at[1]))
            open_at = None
    if open_at is not None or _MARKS.sub("", with_marks) != rendered:
        return None
    return [s for s in spans if s[1] > s[0]]


def _spans_by_search(defused: list[str], rendered: str) -> list[tuple[int, int, int]]:
    spans, cursor = [], 0
    for index, text in enumerate(defused):
        answer = text.split("</think>")[-1]
        for candidate in dict.fromkeys((text, text.strip(), answer.strip())):
            at = rendered.find(candidate, cursor) if candidate else -1
            if at >= 0:
                spans.append((at, at + len(candidate), index))
                cursor = at + len(candidate)
                break
    return spans


class _Tokens:
    """Ids built piece by piece, stopping once they are known to pass the limit."""

    def __init__(self, runtime, limit: int | None) -> None:
        self.runtime, self.limit = runtime, limit
        self.ids: list[int] = []

    def add(self, text: str, *, parse_special: bool) -> None:
        if not text:
            return
        if self.limit is not None:
            room = self.limit - len(self.ids)
            # A token covers a few characters at most, so a long piece's head shows whether it fits.
            head = text[: max(64, 64 * room)]
            if len(head) < len(text):
                counted = (
                    len(self.runtime.tokenize(head, parse_special=parse_special)) - 1
                )  # the cut may split one
                if counted > room:
                    raise PromptTooLong(len(self.ids) + counted, self.limit)
        self.ids += self.runtime.tokenize(text, parse_special=parse_special)
        self._check()

    def add_ids(self, ids: list[int]) -> None:
        self.ids += ids
        self._check()

    def _check(self) -> None:
        if self.limit is not None and len(self.ids) > self.limit:
            raise PromptTooLong(len(self.ids), self.limit)
