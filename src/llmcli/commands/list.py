"""`llmcli list`: the models in the store (and the embedded default)."""

from __future__ import annotations

from dataclasses import asdict

from llmcli.commands.options import JsonOpt


def human_size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def human_params(n: int | None) -> str:
    if not n:
        return "-"
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def list_models(json_out: JsonOpt = False) -> None:
    """List the models in the store: name, size, quantization, architecture, parameters, source."""
    from llmcli.gguf_check import model_facts
    from llmcli.store import Store
    from llmcli.ui.output import Output

    out = Output()
    store = Store()
    rows = []
    for entry in store.list():
        if not entry.arch or not entry.n_params:
            try:  # fill in what the manifest lacks from the file itself
                facts = model_facts(entry.path)
                entry.arch, entry.n_params = entry.arch or facts.arch, entry.n_params or facts.n_params
                entry.quant = entry.quant or facts.quant
            except Exception:  # a damaged file still gets listed, so it can be removed
                pass
        rows.append(entry)
    if json_out:
        out.json([asdict(e) for e in rows])
        return
    if not rows:
        out.info(f"no models in {store.root}; get one with `llmcli pull REPO[:QUANT]`")
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for col in ("NAME", "SIZE", "QUANT", "ARCH", "PARAMS", "SOURCE", "ADDED"):
        table.add_column(col)
    for e in rows:
        table.add_row(e.name, human_size(e.size), e.quant or "-", e.arch or "-", human_params(e.n_params),
                      e.source or "-", "built in" if e.builtin else (e.created[:10] if e.created else "-"))
    out.out.print(table)
