"""`llmcli embed MODEL [TEXT...]`: each text's vector, one JSON line each (or one --json document)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from llmcli.commands.options import JsonOpt, PoolingOpt, RequiredModelArg, ThreadsOpt, environment

DimensionsOpt = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--dimensions", help="Keep the first N values of each vector, normalized again.", show_default=False
    ),
]


def embed(
    context: typer.Context,
    model: RequiredModelArg,
    texts: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Argument(
            metavar="[TEXT]...", help="The texts; without any, stdin's lines.", show_default=False
        ),
    ] = None,
    dimensions: DimensionsOpt = None,
    pooling: PoolingOpt = None,
    threads: ThreadsOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Print the embedding vector of each TEXT (or of each line of stdin) as one JSON line."""
    import json

    from llmcli.model_ref import model_ref
    from llmcli.store import Store
    from llmcli.usecases.embed import choosable_pooling, embed_texts

    env = environment(context)
    if not texts:
        texts = stdin_lines(env)
    result = embed_texts(
        Store(env.store_root),
        model_ref(model, env.home),
        texts,
        dimensions=dimensions,
        pooling=choosable_pooling(pooling),
        threads=threads,
    )
    if json_out:
        from llmcli.ui.output import Output

        Output(env).json(
            {
                "model": result.model_name,
                "dimensions": result.dimensions,
                "pooling": result.pooling,
                "data": [
                    {"index": i, "n_tokens": n, "embedding": v}
                    for i, (n, v) in enumerate(zip(result.n_tokens, result.vectors, strict=True))
                ],
            }
        )
        return
    env.stdout.write("".join(json.dumps(v) + "\n" for v in result.vectors))
    env.stdout.flush()


def stdin_lines(env) -> list[str]:
    """Piped stdin's non-empty lines; nothing on a terminal (the use case then asks for a text)."""
    if env.stdin is None or env.stdin_isatty:
        return []
    return [line.rstrip("\r\n") for line in env.stdin if line.strip()]
