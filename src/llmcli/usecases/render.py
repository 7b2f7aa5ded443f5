"""`llmcli render`: the prompt `chat` would feed the model, as text or as ids, built by the same code.

Like llama-server's /apply-template: the messages go through the session's own template choice
(--chat-template, the GGUF's, its family's built-in, ChatML) and its own tokenizer path, so what
this prints is what a chat with that conversation prefills.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from llmcli.engine.template import Message
from llmcli.engine.template_choice import TemplateChoice
from llmcli.errors import UsageError
from llmcli.limits import check
from llmcli.store import Store

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class RenderOptions:
    model: str
    messages_text: str  # the OpenAI-style JSON, already read from the file or stdin
    source: str  # where it came from, for messages
    chat_template: Path | None = None
    think: bool | None = None


@dataclass
class RenderedView:
    model_name: str
    text: str
    ids: list[int]
    pieces: list[str]
    template: TemplateChoice
    thinking: str  # what the template and tokens say about reasoning


def _content(value: object) -> str | None:
    """A message's text: a string, or OpenAI content parts that are all text."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in value
    ):
        return "".join(p["text"] for p in value)
    return None


def parse_messages(text: str, source: str) -> list[Message]:
    """OpenAI-style `[{"role": ..., "content": ...}]`; anything else is refused with the reason."""
    bad = f"{source} is not a list of messages"
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f'{bad} (not JSON: {exc.msg} at line {exc.lineno}); give [{{"role": "user", "content": "..."}}]'
        ) from None
    except RecursionError:  # a message list is four levels deep; thousands are not messages
        raise UsageError(
            f'{bad} (its JSON nests too deeply to read); give [{{"role": "user", "content": "..."}}]'
        ) from None
    if not isinstance(data, list) or not data:
        raise UsageError(f'{bad} (want a non-empty JSON list); give [{{"role": "user", "content": "..."}}]')
    check(f"{source}: a message count of", len(data), "messages", "give fewer messages")
    messages = []
    for i, item in enumerate(data, 1):
        content = _content(item.get("content")) if isinstance(item, dict) else None
        if not isinstance(item, dict) or item.get("role") not in ROLES or content is None:
            raise UsageError(f"{bad} (message {i} needs a role {'/'.join(ROLES)} and text content)")
        messages.append(Message(item["role"], content))
    return messages


def render_prompt(store: Store, opts: RenderOptions, *, n_threads: int | None = 1) -> RenderedView:
    from llmcli.engine.chat import ChatSession
    from llmcli.engine.runtime import Runtime, RuntimeConfig
    from llmcli.engine.template_choice import read_template_file
    from llmcli.models import model_ref

    messages = parse_messages(opts.messages_text, opts.source)
    override = read_template_file(opts.chat_template) if opts.chat_template else None
    entry = store.resolve(model_ref(opts.model))
    with Runtime(entry.path, RuntimeConfig(n_ctx=64, n_threads=n_threads)) as rt:
        session = ChatSession(rt, chat_template=override)
        session.think = opts.think
        # The path `ask` takes: the same template variables, the same tokenizer rules.
        prompt = session.template.tokenize(rt, messages, **session.thinking.variables(opts.think))
        pieces = [rt.piece(i, special=True).decode("utf-8", "replace") for i in prompt.tokens]
        return RenderedView(
            entry.name, prompt.text, prompt.tokens, pieces, session.template_choice, session.thinking.why
        )


def template_choice_for(path: str, own: str | None, arch: str | None) -> TemplateChoice:
    """Which template `chat` would use for this GGUF, and why (loads the vocabulary only when needed)."""
    from llmcli.engine.template_choice import choose_template

    if own:
        return choose_template(own, arch, lambda _: False)
    from llmcli.engine.runtime import Runtime, RuntimeConfig

    with Runtime(path, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        return choose_template(None, arch, rt.has_token)
