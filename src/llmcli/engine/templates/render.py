"""Stage ①: render the model's chat template exactly as transformers does, and tokenize it safely.

The prompt is transformers' prompt. The template renders over the REAL message text, so `|trim`,
`.strip()`, `.split('</think>')`, `'</think>' in content`, `|length` and `|tojson` act on what the
user wrote, and the text equals `apply_chat_template(..., tokenize=False)` character for character.
The environment (sandbox.py) is transformers' own, inside Jinja's immutable sandbox and a
time and size budget.

Text a user types or pipes never becomes a control token. Three steps keep that promise:

1. Defuse (defuse.py). Before rendering, every occurrence of a control token's text inside a
   message string is replaced, character by character, with private-use stand-ins, so the text
   keeps its length and a template that slices, measures, strips or splits it sees the same shape.
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

Continuing the final message (continue_final_message) is transformers' rule too: the final
message renders with transformers' CONTINUE_TAG after its text, and the prompt is cut at the tag;
a template that rewrites the final message is refused, as transformers refuses it.

What is left: a template that rewrites ordinary message characters into control-token text (say,
lower-casing "<|IM_END|>") could still form one outside a located span; no real template does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from llmcli.engine.messages import Message
from llmcli.engine.templates.budget import RENDER_CHARS, Budget
from llmcli.engine.templates.defuse import ControlTexts, Defuser
from llmcli.engine.templates.sandbox import compile_template, render, told_of_file
from llmcli.errors import ContextOverflow, TemplateError

# Used when a GGUF carries no template: ChatML, the most common format among open models.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Span markers are Unicode noncharacters, which defusing escapes in message text, so none can be forged.
_MARK_OPEN, _MARK_SEP, _MARK_CLOSE = "\ufdd0", "\ufdd1", "\ufdd2"
_MARKS = re.compile(f"{_MARK_OPEN}(\\d+){_MARK_SEP}|{_MARK_CLOSE}")
# transformers' continue_final_message appends this to the final message, renders, and cuts the
# prompt at it; the same tag, so a template that tests or measures the text sees what it sees there.
CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "


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


class ChatTemplate:
    def __init__(
        self, source: str | None, *, bos_token: str = "", eos_token: str = "", file: str | None = None
    ) -> None:
        """file: the --chat-template file the source came from, named in its errors (None: the model's)."""
        self.source = source or FALLBACK_TEMPLATE
        self.file = file
        with self._failures_told():
            self._template = compile_template(self.source)
        self.bos_token, self.eos_token = bos_token, eos_token
        self._defuser = Defuser()
        self._defused: dict[str, str] = {}  # message text -> its defused form, for this vocabulary
        self._control: ControlTexts | None = None

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
    def _variables(
        self, messages: list[dict], tools: list[dict] | None, add_generation_prompt: bool, extra: dict
    ) -> dict:
        # As transformers passes them: tools as given (or none), documents none, not undefined.
        return {
            "messages": messages,
            "tools": tools,
            "documents": None,
            "add_generation_prompt": add_generation_prompt,
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            **extra,
        }

    def _render(
        self,
        messages: list[dict],
        tools: list[dict] | None,
        add_generation_prompt: bool,
        extra: dict,
        defused: bool = False,
    ) -> str:
        """`defused`: the messages and tools were defused, so `tojson` writes stand-ins as it would their
        originals."""
        size = sum(len(str(m.get("content", ""))) + len(str(m.get("tool_calls", ""))) for m in messages)
        size += len(str(tools or ""))
        budget = Budget(max_chars=RENDER_CHARS + 4 * size)  # room for any real prompt, not for a blow-up
        budget.json_text = self._defuser.json_text if defused else None
        variables = self._variables(messages, tools, add_generation_prompt, extra)
        with self._failures_told():
            return render(self._template, budget, **variables)

    def render(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        continue_final: bool = False,
        *,
        tools: list[dict] | None = None,
        **extra,
    ) -> str:
        """The text transformers' apply_chat_template(tokenize=False) gives for these messages and
        OpenAI-style `tools` (with `continue_final`: its continue_final_message=True). A message may
        carry `tool_calls` (arguments as objects), `tool_call_id` and `name`, as transformers takes them."""
        if not continue_final:
            return self._render(messages, tools, add_generation_prompt, extra)
        with self._failures_told():
            contents = _continue_tagged(self.source, [m["content"] for m in messages])
        tagged = [{**m, "content": c} for m, c in zip(messages, contents, strict=True)]
        rendered = self._render(tagged, tools, False, extra)
        with self._failures_told():
            return rendered[: _continuation_end(messages[-1]["content"], rendered)]

    # -- tokenizing ------------------------------------------------------------------------------
    def tokenize(
        self,
        runtime,
        messages: list[Message],
        add_generation_prompt: bool = True,
        *,
        limit: int | None = None,
        continue_final: bool = False,
        tools: list[dict] | None = None,
        **extra,
    ) -> RenderedPrompt:
        """Render over the real text, then tokenize markup and message text with the right rules.

        With `limit`, stop as soon as the prompt is known to exceed that many tokens (PromptTooLong).
        `continue_final`: the prompt ends inside the last message, right after its text, as
        transformers' apply_chat_template(continue_final_message=True) cuts it; the reply continues
        it. A template that does not write that text as it is raises TemplateError, as transformers does.
        `tools` and the messages' tool fields are user text too: defused like the contents, so their
        control-token text stays plain text wherever the template writes it.
        """
        defused = [self._defuse(runtime, m.content) for m in messages]
        if continue_final:
            add_generation_prompt = False
            with self._failures_told():
                defused = _continue_tagged(self.source, defused)
        fields = [self._defuse_data(runtime, m.tool_fields()) for m in messages]
        tools = self._defuse_data(runtime, tools)
        as_dicts = [
            {"role": m.role, "content": d, **f} for m, d, f in zip(messages, defused, fields, strict=True)
        ]
        rendered = self._render(as_dicts, tools, add_generation_prompt, extra, defused=True)
        if not rendered.strip():
            with self._failures_told():
                raise TemplateError(
                    "the model's chat template rendered an empty prompt; "
                    "use a model with a working chat template"
                )
        spans = self._spans(as_dicts, tools, rendered, add_generation_prompt, extra)
        tokens = _Tokens(runtime, limit)
        if continue_final:
            with self._failures_told():
                cut = _continuation_end(messages[-1].content, self._defuser.restore(rendered))
            spans, rendered = [(s, min(e, cut), i) for s, e, i in spans if s < cut], rendered[:cut]
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

    def _defuse_data(self, runtime, value):
        """A JSON value (tools, tool calls) with every string, keys too, defused."""
        if isinstance(value, str):
            return self._defuse(runtime, value)
        if isinstance(value, dict):
            return {self._defuse_data(runtime, k): self._defuse_data(runtime, v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._defuse_data(runtime, v) for v in value]
        return value

    def _control_matcher(self, runtime) -> ControlTexts:
        if self._control is None or self._control.vocab is not runtime.vocab:
            self._control = ControlTexts.of(runtime)
        return self._control

    def _spans(
        self,
        as_dicts: list[dict],
        tools: list[dict] | None,
        rendered: str,
        add_generation_prompt: bool,
        extra: dict,
    ) -> list[tuple[int, int, int]]:
        """Where each message's text sits in the rendered prompt: (start, end, message index), in order."""
        defused = [m["content"] for m in as_dicts]
        marked = [
            {**m, "content": f"{_MARK_OPEN}{i}{_MARK_SEP}{d}{_MARK_CLOSE}" if d else d}
            for i, (m, d) in enumerate(zip(as_dicts, defused, strict=True))
        ]
        try:
            with_marks = self._render(marked, tools, add_generation_prompt, extra, defused=True)
        except TemplateError:
            with_marks = ""
        exact = _spans_from_marks(with_marks, rendered)
        return exact if exact is not None else _spans_by_search(defused, rendered)


def _continue_tagged(source: str, contents: list[str]) -> list[str]:
    """The message contents with CONTINUE_TAG after the final one's, as transformers renders them."""
    if not contents:
        raise TemplateError("there is no final message to continue; send at least one message")
    if "content" not in source:  # transformers' own test of whether a template reads it at all
        raise TemplateError(
            "the chat template never reads a message's content, so the final message cannot be "
            "continued; end the conversation with a message to answer instead"
        )
    return [*contents[:-1], contents[-1] + CONTINUE_TAG]


def _continuation_end(final: str, restored: str) -> int:
    """Where a continued prompt ends in the text rendered with CONTINUE_TAG: transformers' rule.

    At the tag (the last one), keeping the final message's trailing whitespace as the template
    wrote it; where the template trimmed the tag's own space, the whitespace before it goes too.
    """
    tag = CONTINUE_TAG.strip()
    if final.strip() not in restored or tag not in restored:
        raise TemplateError(
            "the chat template does not write the final message as it is (transformers refuses it "
            "too), so a reply cannot continue it; end the conversation with a message to answer instead"
        )
    at = restored.rindex(tag)
    return at if restored.startswith(CONTINUE_TAG, at) else len(restored[:at].rstrip())


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
