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
    from llmcli.engine.runtime import Runtime, RuntimeConfig
    from llmcli.models import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output

    env = environment(context)
    if text == "-":
        text = env.stdin.read()
    out = Output(env)
    entry = Store(env.store_root).resolve(model_ref(model, env.home))
    with Runtime(entry.path, RuntimeConfig(n_ctx=64)) as rt:
        ids = rt.tokenize(text, parse_special=special)
        pieces = [rt.piece(i, special=True) for i in ids]
    if json_out:
        out.json(
            {
                "model": entry.name,
                "n_tokens": len(ids),
                "ids": ids,
                "pieces": [p.decode("utf-8", "replace") for p in pieces],
            }
        )
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("id", justify="right")
    table.add_column("piece")
    for n, (i, p) in enumerate(zip(ids, pieces, strict=True)):
        # repr-like view: a piece may be part of a UTF-8 character, or whitespace
        shown = p.decode("utf-8", "backslashreplace").replace("\n", "\\n").replace("\t", "\\t")
        table.add_row(str(n), str(i), f"'{shown}'")
    out.out.print(table)
    out.info(f"{len(ids)} tokens, {len(text.encode('utf-8'))} bytes")
