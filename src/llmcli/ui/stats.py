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


class Items:
    """Lines of items (a label with its value): a line wider than the space breaks between two items,
    never inside one, so `TTFT 2,472.8 ms` stays whole at any width the items fit."""

    GAP = "  "

    def __init__(self, lines: list[list]) -> None:
        self.lines = [line for line in lines if line]

    def __rich_measure__(self, console, options):
        from rich.measure import Measurement

        widest = max(item.cell_len for line in self.lines for item in line)
        full = max(
            sum(item.cell_len for item in line) + len(self.GAP) * (len(line) - 1) for line in self.lines
        )
        return Measurement(widest, full).clamp(max_width=options.max_width)

    def __rich_console__(self, console, options):
        from rich.text import Text

        width = options.max_width
        for line in self.lines:
            out, used = Text(), 0
            for item in line:
                if used and used + len(self.GAP) + item.cell_len > width:
                    yield out
                    out, used = Text(), 0
                if used:
                    out.append(self.GAP)
                    used += len(self.GAP)
                out.append_text(item)
                used += item.cell_len
            yield out


def _item(label: str, value: str, style: str = "", after: str = ""):
    from rich.text import Text

    item = Text()
    if label:
        item.append(label + " ", style="dim")
    item.append(value, style=style)
    if after:
        item.append(after, style="dim")
    return item


def stats_panel(stats: Stats, model: str):
    """The compact panel: what a person wants to glance at after every reply."""
    from rich.panel import Panel

    remote = stats.remote
    first: list = []
    counted = ""
    if stats.cached_tokens is not None:
        source = " from disk" if stats.cache_source == "disk" else ""
        counted = f" ({_count(stats.prefill_tokens)} new, {stats.cached_tokens} cached{source})"
    elif remote and not remote.usage_reported:
        counted = " (the server sent no usage)"
    first.append(_item("prompt", f"{_count(stats.prompt_tokens)} tok", after=counted))
    prefill = stats.stage("prefill")
    if prefill is not None and prefill.ms is not None:
        rate = f" · {num(stats.prefill_tps)} tok/s" if stats.prefill_tps else ""
        first.append(_item("prefill", f"{num(prefill.ms)} ms", after=rate + _place(stats, prefill.where)))
    first.append(_item("TTFT", f"{num(stats.ttft_ms)} ms", "bold", _place(stats, "local")))
    if stats.reasoning_tokens:
        first.append(_item("first answer", f"{num(stats.ttfa_ms)} ms", "bold"))
    second: list = []
    detail = ""
    if stats.reasoning_tokens:
        answer = stats.completion_tokens - stats.reasoning_tokens
        detail = f" ({stats.reasoning_tokens} thinking in {num(stats.reasoning_ms)} ms, {answer} answer)"
    if remote and not remote.usage_reported:
        detail += " (counted as stream chunks)"
    second.append(_item("decode", f"{stats.completion_tokens} tok", after=detail))
    per_token = f" · {num(stats.ms_per_token, 2)} ms/tok{_place(stats, 'local')}"
    second.append(_item("", f"{num(stats.decode_tps)} tok/s", "bold green", per_token))
    if remote and remote.decode_tps:
        second.append(_item("server", f"{num(remote.decode_tps)} tok/s"))
    if stats.ctx_used is not None:
        second.append(_item("ctx", f"{stats.ctx_used}/{_count(stats.n_ctx)}"))
    if stats.load_ms:
        layers = ""
        if stats.placement and stats.placement["offloaded"]:  # a CPU-only load says nothing new
            layers = f" · {stats.placement['offloaded']}/{stats.placement['layers']} layers on GPU"
        second.append(_item("load", f"{num(stats.load_ms)} ms", after=layers))
    second.append(_item("total", f"{num(stats.total_ms)} ms"))
    lines = [first, second]
    if stats.cache_note:
        from llmcli.display import printable

        lines.append([_item("", "", after=f"cache: {printable(stats.cache_note, 200)}")])
    items = Items(lines)
    return Panel(items, title=_title(stats, model), title_align="left", border_style="dim", expand=False)


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
