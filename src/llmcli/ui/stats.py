"""Rich renderings of a request's stats: the compact panel after each reply, and /stats in full."""

from __future__ import annotations

from llmcli.engine.events import Stats


def _n(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def stats_panel(stats: Stats, model: str):
    """The compact panel: what a person wants to glance at after every reply."""
    from rich.panel import Panel
    from rich.text import Text

    text = Text()
    text.append("prompt ", style="dim").append(f"{stats.prompt_tokens} tok")
    text.append(f" ({stats.prefill_tokens} new, {stats.cached_tokens} reused)", style="dim")
    text.append("  prefill ", style="dim").append(f"{_n(stats.prefill_ms)} ms")
    if stats.prefill_tps:
        text.append(f" · {_n(stats.prefill_tps)} tok/s", style="dim")
    text.append("  TTFT ", style="dim").append(f"{_n(stats.ttft_ms)} ms", style="bold")
    text.append("\n")
    text.append("decode ", style="dim").append(f"{stats.completion_tokens} tok")
    text.append("  ").append(f"{_n(stats.decode_tps)} tok/s", style="bold green")
    text.append(f" · {_n(stats.ms_per_token, 2)} ms/tok", style="dim")
    text.append("  ctx ", style="dim").append(f"{stats.ctx_used}/{stats.n_ctx}")
    if stats.load_ms:
        text.append("  load ", style="dim").append(f"{_n(stats.load_ms)} ms")
    title = f"{model} · {stats.finish_reason}"
    if stats.dropped_messages:
        title += f" · {stats.dropped_messages} old messages dropped"
    return Panel(text, title=title, title_align="left", border_style="dim", expand=False)


STAGE_NOTES = {
    "① tokenize": "render the chat template, text -> token ids",
    "② schedule": "context budget, KV-cache prefix plan",
    "③ prefill": "compute the new prompt tokens (decides TTFT)",
    "④ decode": "forward -> sample -> stop check, per token",
    "⑤ post-process": "detokenize, UTF-8, stop strings, filter",
    "⑥ return": "stream to the terminal / pipe",
    "⑦ release": "keep the KV cache for the next turn, or free it",
}


def stats_table(stats: Stats, model: str):
    """/stats: the last request, all seven stages, with counts and each stage's share of the time."""
    from rich.table import Table

    table = Table(title=f"last request · {model} · {stats.finish_reason}", title_justify="left",
                  show_edge=False, pad_edge=False)
    table.add_column("stage")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    table.add_column("what happened")
    details = {
        "① tokenize": f"{stats.prompt_tokens} prompt tokens",
        "② schedule": (f"{stats.cached_tokens} reused from cache, {stats.prefill_tokens} to prefill"
                       + (f", {stats.dropped_messages} old messages dropped" if stats.dropped_messages else "")),
        "③ prefill": f"{_n(stats.prefill_tps)} tok/s · TTFT {_n(stats.ttft_ms)} ms",
        "④ decode": f"{stats.completion_tokens} tokens · {_n(stats.decode_tps)} tok/s · {_n(stats.ms_per_token, 2)} ms/tok",
        "⑤ post-process": f"{stats.masked_words} words masked" if stats.masked_words else STAGE_NOTES["⑤ post-process"],
        "⑥ return": STAGE_NOTES["⑥ return"],
        "⑦ release": f"KV cache {stats.ctx_used}/{stats.n_ctx} positions, kept for the next turn",
    }
    total = stats.total_ms or 1.0
    for stage, ms in stats.stages.items():
        table.add_row(stage, _n(ms, 2), f"{ms / total:.0%}", details.get(stage, ""))
    table.add_row("total", _n(stats.total_ms, 2), "", f"finish: {stats.finish_reason}", style="bold")
    return table
