"""Stage ① on the engine thread: a request's messages rendered with the model's own chat template
(the template choice and renderer `llmcli chat` uses), then tokenized."""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.messages import Message
from llmcli.engine.templates.choice import choose_template
from llmcli.engine.templates.render import ChatTemplate
from llmcli.engine.templates.thinking import ThinkingForm, opens_thinking


@dataclass
class Prompt:
    tokens: list[int]
    opens_thinking: bool  # the reply starts inside a reasoning block


class PromptMaker:
    def __init__(self, runtime) -> None:
        self.rt = runtime
        choice = choose_template(runtime.chat_template, runtime.arch, runtime.has_token)
        special = lambda token: runtime.piece(token, special=True).decode("utf-8", "replace")  # noqa: E731
        self.template = ChatTemplate(
            choice.source, bos_token=special(runtime.bos_id), eos_token=special(runtime.eos_id)
        )
        self.source = choice.source
        self.thinking = ThinkingForm.of(choice.source, runtime.has_token)

    def chat(self, messages: list[Message], limit: int) -> Prompt:
        """PromptTooLong (stops early) past `limit` tokens; TemplateError for a template that fails."""
        rendered = self.template.tokenize(self.rt, messages, limit=limit)
        return Prompt(rendered.tokens, self.thinking.parses and opens_thinking(rendered.text))

    def warm_up(self, limit: int) -> None:
        """Render once at load, so that the first request does not pay for the renderer's first run."""
        from llmcli.errors import LlmcliError

        try:
            self.chat([Message("user", "Hello.")], limit)
        except LlmcliError:  # a template that fails is reported to the request that meets it
            pass

    def raw(self, text: str) -> Prompt:
        """A completion prompt: the text as is (a typed `<|im_end|>` stays text), with the BOS
        the model wants."""
        return Prompt(self.rt.tokenize(text, add_special=True), False)
