"""The model's chat template, set up one way for `llmcli chat` and `llmcli serve`: the template choice
(--chat-template, else the GGUF's, else its family's, else ChatML), its renderer with the model's own
bos/eos text, and what it says of replies, decided here once: the thinking form, and the form its tool
calls take (engine/tools/formats.py, whose grammar trigger a tool_choice's lazy grammar waits for)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.engine.templates.choice import TemplateChoice, choose_template
from llmcli.engine.templates.render import ChatTemplate
from llmcli.engine.templates.thinking import ThinkingForm
from llmcli.engine.tools.formats import ToolFormat, detect

if TYPE_CHECKING:
    from llmcli.engine.local.runtime import Runtime


@dataclass(frozen=True)
class ModelTemplate:
    choice: TemplateChoice
    template: ChatTemplate
    thinking: ThinkingForm
    tool_form: ToolFormat


def model_template(runtime: Runtime, override: TemplateChoice | None = None) -> ModelTemplate:
    """runtime's template, or `override` (--chat-template FILE, named in the renderer's errors)."""
    choice = choose_template(runtime.chat_template, runtime.arch, runtime.has_token, override=override)
    special = lambda token: runtime.piece(token, special=True).decode("utf-8", "replace")  # noqa: E731
    template = ChatTemplate(
        choice.source, bos_token=special(runtime.bos_id), eos_token=special(runtime.eos_id), file=choice.file
    )
    thinking = ThinkingForm.of(choice.source, runtime.has_token)
    return ModelTemplate(choice, template, thinking, detect(choice.source))
