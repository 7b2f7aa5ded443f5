"""`llmcli cache [list|clear]`: the disk prefix cache's entries, and emptying it."""

from __future__ import annotations

from typing import Annotated

import typer

from llmcli.commands.options import JsonOpt

ACTIONS = ("list", "clear")


def _check_action(value: str) -> str:
    if value not in ACTIONS:
        raise typer.BadParameter(f"'{value}' is not one of {', '.join(ACTIONS)}")
    return value


def cache(
    action: Annotated[
        str,
        typer.Argument(
            metavar="ACTION",
            callback=_check_action,
            help="'list' the entries (default), or 'clear' them all.",
        ),
    ] = "list",
    json_out: JsonOpt = False,
) -> None:
    """The disk prefix cache: KV states of piped documents and conversation tips, reused by `chat`.

    Each entry shows its model, the length of its prefix in tokens, its size and when it was last
    used. The total is capped by $LLMCLI_CACHE_MAX (default 2G; 0 turns the cache off); the least
    recently used entries go first.
    """
    import time

    from llmcli.display import printable
    from llmcli.engine.prefix_cache import PrefixCache, resolve_root
    from llmcli.environment import current
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.units import format_bytes

    env = current()
    out = Output(env)
    store = Store(env.store_root)
    root = store.cache_dir
    # Links resolved, and refused when they lead out of the store: a clear deletes only in the store.
    cache = PrefixCache(resolve_root(root, store.root), max_bytes=0)  # the cap matters only to writers
    if action == "clear":
        cleared = cache.clear()
        if json_out:
            out.json(
                {
                    "removed_entries": cleared.entries,
                    "removed_damaged": cleared.damaged,
                    "freed_bytes": cleared.bytes,
                    "cache": str(root),
                }
            )
        damaged = (
            f" and {cleared.damaged} damaged file{'s' if cleared.damaged != 1 else ''}"
            if cleared.damaged
            else ""
        )
        out.info(
            f"removed {cleared.entries} entr{'y' if cleared.entries == 1 else 'ies'}{damaged} "
            f"({format_bytes(cleared.bytes)}) from {root}"
        )
        return
    entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)
    damaged = len(cache.skipped)

    def when(ts: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))  # as an entry's `created`

    if json_out:
        out.json(
            [
                {
                    "file": e.path.name,
                    "model": e.model_name,
                    "tokens": len(e.tokens),
                    "size": e.size,
                    "last_used": when(e.last_used),
                    "created": e.created,
                    "llama_cpp": e.key.get("llama_cpp"),
                    "n_ctx": e.key.get("n_ctx"),
                }
                for e in entries
            ]
        )
    elif entries:
        out.table(
            ["MODEL", "TOKENS", "SIZE", "LAST USED", "CTX", "FILE"],
            [
                [
                    printable(e.model_name, 60),
                    str(len(e.tokens)),
                    format_bytes(e.size),
                    when(e.last_used).replace("T", " ")[:16],
                    printable(str(e.key.get("n_ctx", "-")), 12),
                    e.path.name,
                ]
                for e in entries
            ],
        )
    if not entries and not json_out:
        out.info(f"the prefix cache {root} is empty")
    elif not json_out:
        total = sum(e.size for e in entries)
        out.info(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, {format_bytes(total)} in {root}")
    if damaged:
        out.warn(
            f"{damaged} damaged file{'s' if damaged != 1 else ''} in {root}; `llmcli cache clear` removes them"
        )
