"""Stage ①: render the model's chat template safely and tokenize it without injection.

Chat templates come from the model file, so they are untrusted code: they render only inside
Jinja2's immutable sandbox (CVE-2024-34359 was code execution through an unsandboxed one).

Message text must never turn into control tokens, so contents are rendered as placeholders; the
rendered markup around them is tokenized with special-token parsing on, and each message's own
text with it off. An assistant turn that llmcli generated keeps the exact ids it was sampled as,
so re-rendering the history reproduces the KV cache's tokens and the prefix match holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from llmcli.errors import TemplateError

# Used when a GGUF carries no template: ChatML, the most common format among open models.
FALLBACK_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
    "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Private-use code points: no tokenizer or template has a reason to produce them.
_OPEN, _CLOSE = "\ue000", "\ue001"
_PLACEHOLDER = re.compile(f"{_OPEN}(\\d+){_CLOSE}")


@dataclass
class Message:
    role: str
    content: str
    token_ids: list[int] | None = None  # the ids an assistant reply was generated as
    cancelled: bool = False

    def as_dict(self) -> dict:
        data = {"role": self.role, "content": self.content}
        if self.cancelled:
            data["cancelled"] = True
        return data


@dataclass
class RenderedPrompt:
    tokens: list[int]
    text: str  # the rendered prompt, for /stats and debugging


def _raise_exception(message: str) -> None:
    raise TemplateError(f"the model's chat template refused the conversation: {message}")


class ChatTemplate:
    def __init__(self, source: str | None, *, bos_token: str = "", eos_token: str = "") -> None:
        from jinja2.exceptions import TemplateSyntaxError
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        self.source = source or FALLBACK_TEMPLATE
        self.is_fallback = source is None
        # The same environment options as transformers' apply_chat_template, so output matches HF.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        env.filters["tojson"] = _tojson
        try:
            self._template = env.from_string(self.source)
        except TemplateSyntaxError as exc:
            raise TemplateError(f"the model's chat template does not parse (line {exc.lineno}: {exc.message}); "
                                "use a model with a valid template") from None
        self.bos_token, self.eos_token = bos_token, eos_token

    def render(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        from jinja2.exceptions import SecurityError
        from jinja2.exceptions import TemplateError as JinjaError

        try:
            return self._template.render(
                messages=messages, add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token, eos_token=self.eos_token,
            )
        except TemplateError:
            raise
        except SecurityError as exc:
            raise TemplateError(f"the model's chat template tried something unsafe and was stopped ({exc}); "
                                "do not trust this model file") from None
        except (JinjaError, TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
            raise TemplateError(f"the model's chat template failed to render ({type(exc).__name__}: {exc}); "
                                "use a model with a valid template") from None

    def tokenize(self, runtime, messages: list[Message], add_generation_prompt: bool = True) -> RenderedPrompt:
        """Render with placeholders, then tokenize markup and contents with the right rules."""
        placeholders = [{"role": m.role, "content": f"{_OPEN}{i}{_CLOSE}"} for i, m in enumerate(messages)]
        rendered = self.render(placeholders, add_generation_prompt)
        tokens: list[int] = []
        text_parts: list[str] = []
        pos = 0
        for match in _PLACEHOLDER.finditer(rendered):
            markup = rendered[pos:match.start()]
            if markup:
                ids = runtime.tokenize(markup, parse_special=True)
                tokens += ids
                text_parts.append(markup)
            message = messages[int(match.group(1))]
            ids = message.token_ids if message.token_ids is not None else runtime.tokenize(message.content)
            tokens += ids
            text_parts.append(message.content)
            pos = match.end()
        if tail := rendered[pos:]:
            ids = runtime.tokenize(tail, parse_special=True)
            tokens += ids
            text_parts.append(tail)
        # Models that want a BOS get one, unless their template already wrote it.
        if runtime.add_bos and (not tokens or tokens[0] != runtime.bos_id):
            tokens.insert(0, runtime.bos_id)
        return RenderedPrompt(tokens=tokens, text="".join(text_parts))


def _tojson(value, indent=None) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, indent=indent)
