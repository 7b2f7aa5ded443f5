"""`llmcli ps`: what a running server has loaded (its /api/ps), like `ollama ps`."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone

import typer

from llmcli.commands.options import JsonOpt, ServerOptions, environment, with_server

FOREVER_AFTER = 100 * 365 * 86400  # seconds: an expiry further off is a model kept for ever


@with_server
def ps(
    context: typer.Context,
    *,
    json_out: JsonOpt = False,
    server_options: ServerOptions,  # --endpoint, --api-key, --timeout (with_server)
) -> None:
    """List the models a running `llmcli serve` has loaded: size, processor, context, until when.

    The server: --endpoint (or $LLMCLI_ENDPOINT), else http://127.0.0.1:8080.
    """
    from llmcli.display import printable
    from llmcli.ui.output import Output
    from llmcli.units import format_bytes
    from llmcli.usecases.ps import loaded_models, server_endpoint

    env = environment(context)
    out = Output(env)
    server = server_endpoint(
        server_options.url or env.endpoint, server_options.api_key or env.api_key, server_options.timeout
    )
    models = loaded_models(server)
    if json_out:
        out.json([{**asdict(m), "expires_at": m.expires_at and m.expires_at.isoformat()} for m in models])
        return
    if not models:
        out.info(f"no model is loaded at {server.parts.scheme}://{server.parts.netloc}")
        return
    now = datetime.now(timezone.utc)
    out.table(
        ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"],
        [
            [
                printable(m.name),
                printable(m.digest[:12]) or "-",
                format_bytes(m.size),
                processor(m.size, m.size_vram),
                str(m.context_length or "-"),
                until(m.expires_at, now),
            ]
            for m in models
        ],
    )


def processor(size: int, vram: int) -> str:
    """Where the model is, as `ollama ps` says it."""
    if not vram or not size:
        return "100% CPU"
    gpu = round(100 * vram / size)
    return "100% GPU" if gpu >= 100 else f"{100 - gpu}%/{gpu}% CPU/GPU"


def until(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "-"
    left = (when - now).total_seconds()
    if left > FOREVER_AFTER:
        return "Forever"
    if left <= 0:
        return "Stopping..."
    for unit, seconds in (("hour", 3600), ("minute", 60), ("second", 1)):
        if left >= seconds:
            n = int(left // seconds)
            return f"{n} {unit}{'s' if n != 1 else ''} from now"
    return "now"
