"""`llmcli show MODEL`: what the GGUF says about itself, and what its KV cache will cost."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Optional

import typer

from llmcli.commands.options import CtxOpt, JsonOpt, RequiredModelArg, environment, renamed_option


def show(
    context: typer.Context,
    model: RequiredModelArg,
    ctx: CtxOpt = None,
    json_out: JsonOpt = False,
    template: Annotated[
        Optional[bool], typer.Option("--template/--no-template", help="Print the whole chat template.")
    ] = False,
    old_c: Annotated[Optional[str], renamed_option("-c", now="--ctx")] = None,
) -> None:
    """Show a model's architecture, size, heads, vocabulary, chat template and KV-cache cost."""
    from llmcli.model_ref import model_ref
    from llmcli.store import Store
    from llmcli.ui.output import Output
    from llmcli.units import format_bytes, format_params
    from llmcli.usecases.models import show_model

    env = environment(context)
    out = Output(env)
    view = show_model(Store(env.store_root), model_ref(model, env.home), ctx)
    entry, facts, n_ctx, per_token, choice = (
        view.entry,
        view.facts,
        view.n_ctx,
        view.kv_bytes_per_token,
        view.template,
    )
    if json_out:
        data = asdict(facts)
        data["template_used"] = {"origin": choice.origin, "why": choice.why}
        data.update(
            name=entry.name,
            source=entry.source,
            kv_bytes_per_token=per_token,
            n_ctx=n_ctx,
            kv_bytes_for_ctx=per_token * n_ctx if per_token else None,
            offload=view.offload,
        )
        out.json(data)
        return
    rows = [
        ("name", entry.name),
        ("file", facts.path),
        ("source", entry.source or "-"),
        ("architecture", facts.arch),
        ("parameters", f"{format_params(facts.n_params)} ({facts.n_params:,})"),
        ("quantization", facts.quant or "-"),
        ("size", format_bytes(facts.size)),
        ("trained context", f"{facts.context_length:,}" if facts.context_length else "-"),
        ("layers", facts.n_layer),
        ("embedding", facts.n_embd),
        ("heads / KV heads", f"{facts.n_head} / {facts.n_head_kv}"),
        ("head dim", facts.head_dim_k),
        ("vocabulary", f"{facts.vocab_size:,}" if facts.vocab_size else "-"),
        (
            "KV cache / token",
            f"{per_token:,} B (f16: 2 × {facts.n_layer} layers × {facts.n_head_kv} KV heads × "
            f"{facts.head_dim_k} head dim × 2 B)"
            if per_token
            else "-",
        ),
        (f"KV cache @ {n_ctx:,}", format_bytes(per_token * n_ctx) if per_token else "-"),
        ("devices", ", ".join(f"{d['name']} ({d['description']})" for d in view.offload["devices"])),
        ("gpu layers", _offload_text(view.offload)),
    ]
    from rich.table import Table

    table = Table(box=None, show_header=False, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, str(value if value is not None else "-"))
    chat_template = choice.source
    if not template and len(chat_template) > 300:
        chat_template = chat_template[:300] + f"… ({len(choice.source):,} chars; --template shows it all)"
    table.add_row("template used", choice.why)
    table.add_row("chat template", chat_template)
    out.data(table)


def _offload_text(offload: dict) -> str:
    """`31/31 on CUDA0`, or why nothing is offloaded."""
    if offload["layers"] is None:
        return "-"
    done = f"{offload['offloaded']}/{offload['layers']}"
    if offload["targets"]:
        where = ", ".join(offload["targets"])
        return f"{done} on {where} (--gpu-layers {offload['gpu_layers']}), KV cache with them"
    return f"{done}: llama.cpp found no GPU (a CPU-only build? docs/build.md)"
