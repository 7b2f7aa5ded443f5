"""`llmcli rerank MODEL QUERY`: stdin's lines (or --document) ranked by relevance to QUERY."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from llmcli.commands.options import CtxOpt, JsonOpt, RequiredModelArg, ThreadsOpt, environment


def rerank(
    context: typer.Context,
    model: RequiredModelArg,
    query: Annotated[str, typer.Argument(metavar="QUERY", help="What the documents are ranked against.")],
    documents: Annotated[
        Optional[list[str]],  # noqa: UP045 (typer reads the annotation)
        typer.Option(
            "--document",
            "-d",
            help="A document (repeatable); without any, stdin's lines.",
            show_default=False,
        ),
    ] = None,
    top_n: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option("--top-n", min=1, help="Show only the N most relevant.", show_default=False),
    ] = None,
    ctx: CtxOpt = None,
    threads: ThreadsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rank documents by relevance to QUERY, a chat model judging each (docs/embeddings.md)."""
    from llmcli.commands.embed import stdin_lines
    from llmcli.model_ref import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.usecases.embed import rerank_documents

    env = environment(context)
    ranking = rerank_documents(
        Store(env.store_root),
        model_ref(model, env.home),
        query,
        documents or stdin_lines(env),
        top_n=top_n,
        ctx=ctx,
        threads=threads,
    )
    out = Output(env)
    if json_out:
        out.json(
            {
                "model": ranking.model_name,
                "scorer": ranking.scorer,
                "results": [
                    {
                        "index": r.index,
                        "relevance_score": r.relevance,
                        "margin": r.margin,
                        "document": r.document,
                    }
                    for r in ranking.results
                ],
            }
        )
        return
    out.table(
        ["RANK", "SCORE", "INDEX", "DOCUMENT"],
        [
            [str(n), f"{r.relevance:.4f}", str(r.index), r.document[:80]]
            for n, r in enumerate(ranking.results, 1)
        ],
    )
