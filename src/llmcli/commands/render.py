"""`llmcli render MODEL`: print the prompt `chat` would feed the model (llama-server's /apply-template)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Annotated, Optional

import typer

from llmcli.commands.options import (
    ChatTemplateOpt,
    JsonOpt,
    RequiredModelArg,
    ThinkOpt,
    environment,
    file_option,
)
from llmcli.errors import UsageError


def render(
    context: typer.Context,
    model: RequiredModelArg,
    messages: Annotated[
        Optional[str],
        file_option(
            "--messages",
            'OpenAI-style JSON: [{"role": "user", "content": "..."}]; \'-\' reads stdin. '
            "\\[stdin when it is piped]",
        ),
    ] = None,
    tools: Annotated[
        Optional[Path],
        file_option(
            "--tools",
            'OpenAI-style JSON tools the template shows the model: [{"type": "function", '
            '"function": {"name": ..., "description": ..., "parameters": {...}}}].',
        ),
    ] = None,
    chat_template: ChatTemplateOpt = None,
    think: ThinkOpt = None,
    ids: Annotated[
        bool, typer.Option("--ids", help="Print the token ids and their pieces, not the text.")
    ] = False,
    continue_final: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="End the prompt inside the last message, as a reply continuing it sees it "
            "(transformers' continue_final_message).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Print exactly the prompt `chat` would feed the model for these messages: text, or ids."""
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.usecases.render import RenderOptions, read_messages_file, read_tools_file, render_prompt

    env = environment(context)
    if messages is None and env.stdin_isatty:
        raise UsageError("no messages: give --messages FILE (OpenAI-style JSON) or pipe them in")
    if messages in (None, "-"):
        from llmcli.limits import limit, read_bounded

        fix = "give fewer or shorter messages"
        stdin = env.stdin if env.stdin is not None else io.StringIO()
        text, source = read_bounded(stdin, limit("prompt_bytes"), "stdin", fix), "stdin"
    else:
        text, source = read_messages_file(Path(messages)), messages
    tools_text = read_tools_file(tools) if tools is not None else None
    view = render_prompt(
        Store(env.store_root),
        RenderOptions(
            model, text, source, chat_template, think, env.home, continue_final, tools_text, str(tools or "")
        ),
    )
    out = Output(env)
    if json_out:
        out.json(
            {
                "model": view.model_name,
                "template": {"origin": view.template.origin, "why": view.template.why},
                "thinking": view.thinking,
                "text": view.text,
                "n_tokens": len(view.ids),
                "ids": view.ids,
                "pieces": view.pieces,
            }
        )
    elif ids:
        from llmcli.ui.token_table import token_table

        out.data(token_table(view.ids, view.pieces))
    else:
        out.write(view.text)
    out.info(f"{len(view.ids)} tokens · template: {view.template.why}")
