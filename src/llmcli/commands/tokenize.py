"""`llmcli tokenize MODEL TEXT`: the learner's view of stage ①."""

from __future__ import annotations

from typing import Annotated

import typer

from llmcli.commands.options import JsonOpt, RequiredModelArg, environment


def tokenize(
    context: typer.Context,
    model: RequiredModelArg,
    text: Annotated[
        str, typer.Argument(metavar="TEXT", help="The text; '-' reads stdin.", show_default=False)
    ],
    special: Annotated[
        bool,
        typer.Option(
            "--special",
            help="Parse control tokens such as <|im_end|> (as a chat template does; user text never is).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Show the token ids and pieces a model's tokenizer makes of TEXT."""
    from llmcli.model_ref import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.usecases.models import tokenize as split

    env = environment(context)
    if text == "-":
        text = env.stdin.read() if env.stdin is not None else ""  # None: started with stdin closed
    out = Output(env)
    tokens = split(Store(env.store_root), model_ref(model, env.home), text, special)
    ids, pieces = tokens.ids, tokens.pieces
    if json_out:
        out.json(
            {
                "model": tokens.model_name,
                "n_tokens": len(ids),
                "ids": ids,
                "pieces": [p.decode("utf-8", "replace") for p in pieces],
            }
        )
        return
    from llmcli.ui.token_table import token_table

    out.data(token_table(ids, pieces))
    out.info(f"{len(ids)} tokens, {len(text.encode('utf-8'))} bytes")
