"""`llmcli list`: the models in the store (and the embedded default)."""

from __future__ import annotations

from dataclasses import asdict

import typer

from llmcli.commands.options import JsonOpt, ServerOptions, environment, with_server


@with_server
def list_models(
    context: typer.Context,
    *,
    json_out: JsonOpt = False,
    server_options: ServerOptions,  # --endpoint, --api-key, --timeout (with_server)
) -> None:
    """List the models in the store: name, size, quantization, architecture, parameters, source.

    With --endpoint (or $LLMCLI_ENDPOINT): the models the server serves (its /v1/models).
    """
    from llmcli.display import printable
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.units import format_bytes, format_params
    from llmcli.usecases.models import list_models

    env = environment(context)
    out = Output(env)
    server = server_options.endpoint(env)
    if server is not None:
        list_remote(server, out, json_out)
        return
    store = Store(env.store_root)
    rows = list_models(store)
    if json_out:
        out.json([asdict(e) for e in rows])
        return
    if not rows:
        out.info(f"no models in {store.root}; get one with `llmcli pull REPO[:QUANT]`")
        return
    # Every string here comes from the manifest or a file's header: shown escaped, never raw.
    out.table(
        ["NAME", "SIZE", "QUANT", "ARCH", "PARAMS", "SOURCE", "ADDED"],
        [
            [
                printable(e.name),
                "missing" if e.missing else format_bytes(e.size),
                printable(e.quant or "-", 40),
                printable(e.arch or "-", 40),
                format_params(e.n_params),
                printable(e.source or "-"),
                "built in" if e.builtin else printable(e.created[:10] if e.created else "-"),
            ]
            for e in rows
        ],
    )


def list_remote(server, out, json_out: bool) -> None:
    from llmcli.usecases.models import list_remote_models

    models = list_remote_models(server)
    if json_out:
        out.json([asdict(m) for m in models])
        return
    if not models:
        out.info(f"the server at {server} lists no models")
        return
    out.table(
        ["MODEL", "OWNED BY", "CONTEXT"],
        [[m.id, m.owned_by or "-", str(m.max_model_len) if m.max_model_len else "-"] for m in models],
    )
    out.info(
        f"{len(models)} model{'s' if len(models) != 1 else ''} at {server}; "
        f"chat with one: llmcli chat --endpoint {server} -m MODEL"
    )
