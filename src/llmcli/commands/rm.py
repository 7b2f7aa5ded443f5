"""`llmcli rm MODEL`: remove a model from the store."""

from __future__ import annotations

from llmcli.commands.options import RequiredModelArg


def rm(model: RequiredModelArg) -> None:
    """Remove a model from the store (files llmcli made go with it; the HF cache is left alone)."""
    from llmcli.models import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output

    entry = Store().remove(model_ref(model))
    Output().info(f"removed {entry.name}")
