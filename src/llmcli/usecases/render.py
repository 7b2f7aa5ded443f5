"""`llmcli render`: the prompt `chat` would feed the model, as text or as ids, built by the same code.

Like llama-server's /apply-template: the messages go through the session's own template choice
(--chat-template, the GGUF's, its family's built-in, ChatML) and its own tokenizer path, so what
this prints is what a chat with that conversation prefills.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from llmcli.engine.messages import Message
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.engine.tools.definitions import TOOL_SHAPE
from llmcli.errors import UsageError
from llmcli.limits import check, limit
from llmcli.store import Store

ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True)
class RenderOptions:
    model: str
    messages_text: str  # the OpenAI-style JSON, already read from the file or stdin
    source: str  # where it came from, for messages
    chat_template: Path | None = None
    think: bool | None = None
    home: Path | None = None  # $HOME: what a leading `~` in MODEL's path names
    continue_final: bool = False  # the prompt ends inside the last message, which a reply continues
    tools_text: str | None = None  # --tools: OpenAI-style JSON, already read from the file
    tools_source: str = ""  # its file, for messages


@dataclass
class RenderedView:
    model_name: str
    text: str
    ids: list[int]
    pieces: list[str]
    template: TemplateChoice
    thinking: str  # what the template and tokens say about reasoning


def read_messages_file(path: Path) -> str:
    """--messages FILE: a regular file of bounded size, strict UTF-8 (parse_messages checks the rest)."""
    from llmcli.fsutil import read_text_file

    return read_text_file(
        path,
        what="messages file",
        fix='give OpenAI-style JSON: [{"role": ..., "content": ...}]',
        limit=limit("prompt_bytes"),  # chat's bound on one prompt
    )


def read_tools_file(path: Path) -> str:
    """--tools FILE: a regular file of bounded size, strict UTF-8 (parse_tools checks the rest)."""
    from llmcli.fsutil import read_text_file

    return read_text_file(
        path, what="tools file", fix=f"give OpenAI-style JSON: {TOOL_SHAPE}", limit=limit("tools_bytes")
    )


def parse_tools(text: str, source: str) -> list[dict]:
    """OpenAI-style `[{"type": "function", "function": {"name": ...}}]`, checked as serve checks a
    request's tools; anything else is refused naming the field (`tools[0].function.name`)."""
    from llmcli.engine.tools.definitions import BadTool, check_tools

    bad, fix = f"{source} is not a list of tools", f"give {TOOL_SHAPE}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{bad} (not JSON: {exc.msg} at line {exc.lineno}); {fix}") from None
    except RecursionError:  # a schema nests a few levels; thousands are not a tool
        raise UsageError(f"{bad} (its JSON nests too deeply to read); {fix}") from None
    _refuse_deep(data, source)
    try:
        return check_tools(data)
    except BadTool as exc:
        raise UsageError(f"{source}: {exc}") from None


def parse_messages(text: str, source: str) -> list[Message]:
    """OpenAI-style `[{"role": ..., "content": ...}]`; anything else is refused with the reason."""
    bad = f"{source} is not a list of messages"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(
            f'{bad} (not JSON: {exc.msg} at line {exc.lineno}); give [{{"role": "user", "content": "..."}}]'
        ) from None
    except RecursionError:  # a message list is four levels deep; thousands are not messages
        raise UsageError(
            f'{bad} (its JSON nests too deeply to read); give [{{"role": "user", "content": "..."}}]'
        ) from None
    _refuse_deep(data, source)
    if not isinstance(data, list) or not data:
        raise UsageError(f'{bad} (want a non-empty JSON list); give [{{"role": "user", "content": "..."}}]')
    from llmcli.engine.messages import BadMessage, check_message

    check(f"{source}: a message count of", len(data), "messages", "give fewer messages")
    messages = []
    for i, item in enumerate(data, 1):
        try:
            checked = check_message(item, i, ROLES, content_parts=True, tool_use=True)
        except BadMessage as exc:
            raise UsageError(f"{bad} ({exc})") from None
        messages.append(replace(checked, cancelled=False))  # a messages file marks nothing cancelled
    return messages


def _refuse_deep(data: object, source: str) -> None:
    """One nesting limit for every JSON handed in (json_depth.py), a call's string of arguments
    included: the checks and the template after this recurse per level."""
    from llmcli.json_depth import depth_message, text_too_deep, too_deep

    where = too_deep(data)
    if where is not None:
        raise UsageError(f"{source}: {depth_message(where or 'the file')}")
    for i, item in enumerate(data if isinstance(data, list) else ()):
        calls = item.get("tool_calls") if isinstance(item, dict) else None
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            raw = function.get("arguments") if isinstance(function, dict) else None
            if isinstance(raw, str) and text_too_deep(raw):
                where = f"[{i}].tool_calls[{j}].function.arguments"
                raise UsageError(f"{source}: {depth_message(where)}")


def render_prompt(store: Store, opts: RenderOptions, *, n_threads: int | None = 1) -> RenderedView:
    from llmcli.engine.local.chat import ChatSession
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.engine.templates.choice import read_template_file
    from llmcli.model_ref import model_ref

    messages = parse_messages(opts.messages_text, opts.source)
    tools = parse_tools(opts.tools_text, opts.tools_source) if opts.tools_text is not None else None
    override = read_template_file(opts.chat_template) if opts.chat_template else None
    entry = store.resolve(model_ref(opts.model, opts.home))
    with Runtime(entry.path, RuntimeConfig(n_ctx=64, n_threads=n_threads)) as rt:
        session = ChatSession(rt, chat_template=override)
        session.think = opts.think
        # The path `ask` takes: the same template variables, the same tokenizer rules.
        prompt = session.template.tokenize(
            rt,
            messages,
            continue_final=opts.continue_final,
            tools=tools,
            **session.thinking.variables(opts.think),
        )
        pieces = [rt.piece(i, special=True).decode("utf-8", "replace") for i in prompt.tokens]
        return RenderedView(
            entry.name, prompt.text, prompt.tokens, pieces, session.template_choice, session.thinking.why
        )


def template_choice_for(path: str, own: str | None, arch: str | None) -> TemplateChoice:
    """Which template `chat` would use for this GGUF, and why (loads the vocabulary only when needed)."""
    from llmcli.engine.templates.choice import choose_template

    if own:
        return choose_template(own, arch, lambda _: False)
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    with Runtime(path, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        return choose_template(None, arch, rt.has_token)
