"""Stage ① off the engine thread: a request's messages rendered with the model's own chat template
(the template choice and renderer `llmcli chat` uses), then tokenized, in the server's render thread.

The engine thread gets token ids only, so a long prompt's rendering never stalls the running
sequences' next step. Whether the prompt and its max_tokens fit a sequence is decided here, once,
in the dialect's words (serve/errors.py:too_long): before any rendering when its size alone says
no (more messages than a sequence holds tokens, or more text than its tokens could cover at the
vocabulary's longest piece), then on the rendered tokens.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from llmcli.engine.local.model_template import model_template
from llmcli.engine.messages import Message
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.engine.templates.render import PromptTooLong
from llmcli.engine.templates.thinking import opens_thinking
from llmcli.errors import TemplateError, UsageError
from llmcli.serve.errors import ApiError, too_long
from llmcli.serve.protocol import Generation

# model file (path, size, mtime, inode) -> its vocabulary's longest piece in bytes: a reload of the
# same file (--max-models 1 switching models) skips a llama_token_to_piece per token (0.5 s for 262k)
_LONGEST_PIECE: dict[tuple[str, int, int, int], int] = {}


def longest_piece(runtime) -> int:
    """The most bytes one token covers (at least 1), remembered per version of the model file."""
    st = os.stat(runtime.path)
    key = (runtime.path, st.st_size, st.st_mtime_ns, st.st_ino)
    if key not in _LONGEST_PIECE:
        pieces = (len(runtime.piece(t, special=False)) for t in range(runtime.n_vocab))
        _LONGEST_PIECE[key] = max(pieces, default=0) or 1
    return _LONGEST_PIECE[key]


@dataclass
class Prompt:
    tokens: list[int]
    opens_thinking: bool  # the reply starts inside a reasoning block
    max_tokens: int = 0  # the most reply tokens it gets: the request's own, or what fits up to the default


class PromptMaker:
    """Made on the engine thread at load; used by one render thread (its caches are not shared)."""

    def __init__(self, runtime, room: int, override: TemplateChoice | None = None) -> None:
        self.rt = runtime
        self.room = room  # tokens a sequence holds
        chosen = model_template(runtime, override)  # override: serve --chat-template
        self.template, self.source, self.thinking = chosen.template, chosen.choice.source, chosen.thinking
        self.tool_form = chosen.tool_form  # how the model writes tool calls: read once, at load
        # No token covers more bytes than this, so a text of more characters than room * this cannot fit.
        self.longest_piece = longest_piece(runtime)

    def prepare(self, gen: Generation) -> Prompt:
        """The request's prompt as token ids with the reply tokens it gets, or ApiError (400) naming
        what does not fit or fails."""
        what = "messages" if gen.messages is not None else "prompt"
        texts = [m.content for m in gen.messages] if gen.messages is not None else [gen.prompt or ""]
        tools = gen.tools.tools if gen.tools is not None else None
        chars = sum(len(text) for text in texts) + (len(json.dumps(tools)) if tools else 0)
        if len(texts) > self.room or chars > self.room * self.longest_piece:
            many = f"{len(texts)} messages" if len(texts) > self.room else f"{chars:,} characters"
            raise too_long(gen.dialect, self.room, f"more than {self.room}", f"{many} in the {what}", what)
        try:
            if gen.messages is not None:
                prompt = self.chat(
                    gen.messages, continue_final=gen.continue_final, tools=tools, variables=gen.template_vars
                )
            else:
                prompt = self.raw(gen.prompt or "")
        except PromptTooLong as exc:
            raise too_long(
                gen.dialect, self.room, f"at least {exc.at_least}", f"in the {what}", what
            ) from None
        except (TemplateError, UsageError) as exc:
            raise ApiError(400, str(exc), what) from None
        prompt.max_tokens = self._fit(gen, len(prompt.tokens), what)
        return prompt

    def _fit(self, gen: Generation, n_prompt: int, what: str) -> int:
        """The reply tokens the request gets: its max_tokens if prompt and reply fit a sequence (n
        reply tokens take n - 1 cells: the last is sampled, never decoded), else as many as fit up
        to the server's default; too_long when they do not."""
        room = self.room
        fits = room - n_prompt + 1
        max_tokens = gen.max_tokens if gen.max_tokens is not None else min(gen.params.max_tokens, fits)
        if n_prompt < room and max_tokens <= fits:
            return max_tokens
        param = gen.reply_field if gen.max_tokens is not None and n_prompt < room else what
        where = f"{n_prompt} in the {what}, {max_tokens} in the completion"
        raise too_long(gen.dialect, room, f"{n_prompt + max_tokens - 1}", where, param)

    def chat(
        self,
        messages: list[Message],
        continue_final: bool = False,
        tools: list[dict] | None = None,
        variables: dict | None = None,
    ) -> Prompt:
        """PromptTooLong (stops early) past the room; TemplateError for a template that fails.
        `variables`: the request's own template variables (enable_thinking, reasoning_effort)."""
        given = variables or {}
        rendered = self.template.tokenize(
            self.rt, messages, limit=self.room, continue_final=continue_final, tools=tools, **given
        )
        return Prompt(rendered.tokens, self.thinking.parses and opens_thinking(rendered.text))

    def text(self, gen: Generation) -> str:
        """The request's prompt as text, rendered as prepare renders it (llama-server's /apply-template)."""
        assert gen.messages is not None
        tools = gen.tools.tools if gen.tools is not None else None
        dicts = [m.as_dict() for m in gen.messages]
        try:
            return self.template.render(dicts, True, gen.continue_final, tools=tools, **gen.template_vars)
        except (TemplateError, UsageError) as exc:
            raise ApiError(400, str(exc), "messages") from None

    def warm_up(self) -> None:
        """Render once at load, so that the first request does not pay for the renderer's first run."""
        from llmcli.errors import LlmcliError

        try:
            self.chat([Message("user", "Hello.")])
        except LlmcliError:  # a template that fails is reported to the request that meets it
            pass

    def raw(self, text: str) -> Prompt:
        """A completion prompt: the text as is (a typed `<|im_end|>` stays text), with the BOS
        the model wants."""
        tokens = self.rt.tokenize(text, add_special=True)
        if len(tokens) >= self.room:
            raise PromptTooLong(len(tokens), self.room)
        return Prompt(tokens, False)
