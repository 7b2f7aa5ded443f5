"""`llmcli rm MODEL`: remove a model from the store."""

from __future__ import annotations

from llmcli.commands.options import RequiredModelArg


def rm(model: RequiredModelArg) -> None:
    """Remove a model from the store (files llmcli made go with it; the HF cache is left alone)."""
    from llmcli.display import printable
    from llmcli.models import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output

    store = Store()
    removed = store.remove(model_ref(model))
    out = Output()
    if removed.left_alone:
        shown = ", ".join(printable(f, 120) for f in removed.left_alone[:3])
        more = f" and {len(removed.left_alone) - 3} more" if len(removed.left_alone) > 3 else ""
        out.warn(f"left {len(removed.left_alone)} listed file(s) alone: they lie outside {store.blobs_dir} "
                 f"({shown}{more}); delete them yourself if they are really this model's")
    out.info(f"removed {printable(removed.entry.name)}")
