"""`llmcli rm MODEL`: remove a model from the store."""

from __future__ import annotations

from dataclasses import asdict

import typer

from llmcli.commands.options import JsonOpt, RequiredModelArg, environment


def rm(context: typer.Context, model: RequiredModelArg, json_out: JsonOpt = False) -> None:
    """Remove a model from the store (files llmcli made go with it; the HF cache is left alone)."""
    from llmcli.display import printable
    from llmcli.model_ref import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.usecases.models import remove_model

    env = environment(context)
    store = Store(env.store_root)
    removed = remove_model(store, model_ref(model, env.home))
    out = Output(env)
    if removed.left_alone:
        shown = ", ".join(printable(f, 120) for f in removed.left_alone[:3])
        more = f" and {len(removed.left_alone) - 3} more" if len(removed.left_alone) > 3 else ""
        out.warn(
            f"left {len(removed.left_alone)} listed file(s) alone: they lie outside {store.blobs_dir} "
            f"({shown}{more}); delete them yourself if they are really this model's"
        )
    out.info(f"removed {printable(removed.entry.name)}")
    if json_out:
        from llmcli.usecases.record import ModelRecord, cached_blob_sha256

        # Known without reading: a hub file stays in the HF cache, named by its sha256; a file llmcli
        # made is gone, and hashing it first only to print the hash is not worth the read.
        out.json(asdict(ModelRecord.of(removed.entry, cached_blob_sha256(removed.entry.path))))
