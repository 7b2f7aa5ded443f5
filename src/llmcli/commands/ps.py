"""`llmcli ps`: the models a running `llmcli serve` has loaded, as `ollama ps` shows them."""

from __future__ import annotations

from typing import Annotated

import typer

import llmcli.serve.options as defaults  # serve's address: a table that imports nothing
from llmcli.commands.options import ApiKeyOpt, JsonOpt, environment


def ps(
    context: typer.Context,
    url: Annotated[
        str, typer.Option("--url", metavar="URL", help="The server's address (where `llmcli serve` listens).")
    ] = f"http://{defaults.HOST}:{defaults.PORT}",
    api_key: ApiKeyOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Show the models a running server has loaded: name, size, processor and when each unloads."""
    from datetime import datetime, timezone

    from llmcli.display import printable
    from llmcli.ui.output import Output
    from llmcli.units import format_bytes
    from llmcli.usecases.ps import base_url, loaded

    env = environment(context)
    out = Output(env)
    server = base_url(url)
    models = loaded(server, api_key or env.api_key)
    if json_out:
        out.json([m.record for m in models])
        return
    now = datetime.now(timezone.utc)
    # Names come from the server: shown escaped, never raw.
    out.table(
        ["NAME", "SIZE", "PROCESSOR", "UNTIL"],
        [[printable(m.name), format_bytes(m.size), m.processor, m.until(now)] for m in models],
    )
