"""`llmcli rm MODEL`: remove a model from the store."""

from __future__ import annotations

from llmcli.commands.options import RequiredModelArg


def rm(model: RequiredModelArg) -> None:
    """Remove a model from the store (files llmcli made go with it; the HF cache is left alone)."""
    from llmcli.environment import current
    from llmcli.models import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output

    env = current()
    entry = Store(env.store_root).remove(model_ref(model))
    Output(env).info(f"removed {entry.name}")
