"""Rich renderings of a request's stats, whichever backend ran it: the compact panel after each
reply, and /stats with all seven stages.

A number nobody measured or reported shows as a dash, never as 0. When a server answered, each
number says where it was taken: "(server)" for what the server reported, "(here)" for our clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmcli.engine.events import Stats
from llmcli.stages import UNKNOWN, num

if TYPE_CHECKING:
    from rich.console import JustifyMethod

PLACE = {"remote": "server", "local": "here"}
COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (
    ("stage", "left"),
    ("where", "left"),
    ("ms", "right"),
    ("share", "right"),
    ("what happened", "left"),
)


def _count(n: int | None) -> str:
    return UNKNOWN if n is None else str(n)


def _place(stats: Stats, where: str) -> str:
    """Where a number comes from; said only when the request ran in two places."""
    return f" ({PLACE[where]})" if stats.remote else ""


def _title(stats: Stats, model: str) -> str:
    title = f"{model} · {stats.finish_reason}"
    if stats.dropped_messages:
        title += f" · {stats.dropped_messages} old messages dropped"
    return title + (f" · {stats.remote.endpoint}" if stats.remote else "")


def stats_panel(stats: Stats, model: str):
    """The compact panel: what a person wants to glance at after every reply."""
    from rich.panel import Panel
    from rich.text import Text

    remote = stats.remote
    text = Text()
    text.append("prompt ", style="dim").append(f"{_count(stats.prompt_tokens)} tok")
    if stats.cached_tokens is not None:
        source = " from disk" if stats.cache_source == "disk" else ""
        text.append(
            f" ({_count(stats.prefill_tokens)} new, {stats.cached_tokens} cached{source})", style="dim"
        )
    elif remote and not remote.usage_reported:
        text.append(" (the server sent no usage)", style="dim")
    prefill = stats.stage("prefill")
    if prefill is not None and prefill.ms is not None:
        text.append("  prefill ", style="dim").append(f"{num(prefill.ms)} ms")
        if stats.prefill_tps:
            text.append(f" · {num(stats.prefill_tps)} tok/s", style="dim")
        text.append(_place(stats, prefill.where), style="dim")
    text.append("  TTFT ", style="dim").append(f"{num(stats.ttft_ms)} ms", style="bold")
    text.append(_place(stats, "local"), style="dim")
    if stats.reasoning_tokens:
        text.append("  first answer ", style="dim").append(f"{num(stats.ttfa_ms)} ms", style="bold")
    text.append("\n")
    text.append("decode ", style="dim").append(f"{stats.completion_tokens} tok")
    if stats.reasoning_tokens:
        answer = stats.completion_tokens - stats.reasoning_tokens
        text.append(
            f" ({stats.reasoning_tokens} thinking in {num(stats.reasoning_ms)} ms, {answer} answer)",
            style="dim",
        )
    if remote and not remote.usage_reported:
        text.append(" (counted as stream chunks)", style="dim")
    text.append("  ").append(f"{num(stats.decode_tps)} tok/s", style="bold green")
    text.append(f" · {num(stats.ms_per_token, 2)} ms/tok{_place(stats, 'local')}", style="dim")
    if remote and remote.decode_tps:
        text.append("  server ", style="dim").append(f"{num(remote.decode_tps)} tok/s")
    if stats.ctx_used is not None:
        text.append("  ctx ", style="dim").append(f"{stats.ctx_used}/{_count(stats.n_ctx)}")
    if stats.load_ms:
        text.append("  load ", style="dim").append(f"{num(stats.load_ms)} ms")
        if stats.placement and stats.placement["offloaded"]:  # a CPU-only load says nothing new
            text.append(
                f" · {stats.placement['offloaded']}/{stats.placement['layers']} layers on GPU", style="dim"
            )
    text.append("  total ", style="dim").append(f"{num(stats.total_ms)} ms")
    if stats.cache_note:
        from llmcli.display import printable

        text.append(f"\ncache: {printable(stats.cache_note, 200)}", style="dim")
    return Panel(text, title=_title(stats, model), title_align="left", border_style="dim", expand=False)


def _measured_here(stats: Stats) -> list[tuple[str, float | None, str]]:
    """Rows after the stages: spans our own clock measured across them (name, ms, what)."""
    remote = stats.remote
    if remote is None:
        rows = [("TTFT", stats.ttft_ms, "request start -> first token sampled")]
        if stats.reasoning_tokens:
            rows += [
                ("thinking", stats.reasoning_ms, f"{stats.reasoning_tokens} tokens of reasoning"),
                ("first answer", stats.ttfa_ms, "request start -> first answer text, after the reasoning"),
            ]
        return rows
    counted = "" if remote.usage_reported else " (a chunk counted as a token)"
    return [
        ("connect", remote.connect_ms, "request sent -> first stream event"),
        ("TTFT", stats.ttft_ms, "request sent -> first text: network, queue, prefill"),
        (
            "stream",
            stats.decode_ms,
            f"{stats.completion_tokens} tokens · {num(stats.decode_tps)} tok/s · "
            f"{num(stats.ms_per_token, 2)} ms/tok{counted}",
        ),
    ]


def stats_table(stats: Stats, model: str):
    """/stats: the last request, all seven stages, where each ran, its time and its share."""
    from rich.table import Table

    table = Table(
        title=f"last request · {_title(stats, model)}", title_justify="left", show_edge=False, pad_edge=False
    )
    for name, justify in COLUMNS:
        table.add_column(name, justify=justify)
    total = stats.total_ms
    for record in stats.stages:
        share = f"{record.ms / total:.0%}" if record.ms is not None and total else ""
        table.add_row(record.stage.title, record.where, num(record.ms, 2), share, record.detail)
    for name, ms, what in _measured_here(stats):
        table.add_row(name, "local", num(ms, 2), "", what)
    table.add_row("total", "local", num(total, 2), "", f"finish: {stats.finish_reason}", style="bold")
    return table
