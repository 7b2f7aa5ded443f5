"""Rich renderings of a request's stats: the compact panel after each reply, and /stats in full."""

from __future__ import annotations

from llmcli.engine.events import RemoteStats, Stats


def _n(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def stats_panel(stats: Stats, model: str):
    """The compact panel: what a person wants to glance at after every reply."""
    from rich.panel import Panel
    from rich.text import Text

    if isinstance(stats, RemoteStats):
        return remote_stats_panel(stats, model)

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

    if isinstance(stats, RemoteStats):
        return remote_stats_table(stats, model)

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


def _count(n: int | None) -> str:
    return "?" if n is None else str(n)


def remote_stats_panel(stats: RemoteStats, model: str):
    """A server's request: its own report where it sent one, our clock for TTFT and the stream."""
    from rich.panel import Panel
    from rich.text import Text

    text = Text()
    text.append("prompt ", style="dim").append(f"{_count(stats.prompt_tokens)} tok")
    if stats.cached_tokens is not None:
        text.append(f" ({_count(stats.prefill_tokens)} new, {stats.cached_tokens} cached)", style="dim")
    elif not stats.usage_reported:
        text.append(" (the server sent no usage)", style="dim")
    if stats.prefill_ms is not None:
        text.append("  prefill ", style="dim").append(f"{_n(stats.prefill_ms)} ms")
        if stats.prefill_tps:
            text.append(f" · {_n(stats.prefill_tps)} tok/s", style="dim")
        text.append(" (server)", style="dim")
    text.append("  TTFT ", style="dim").append(f"{_n(stats.ttft_ms)} ms", style="bold")
    text.append(" (here)", style="dim")
    text.append("\n")
    counted = "" if stats.usage_reported else " (counted as stream chunks)"
    text.append("decode ", style="dim").append(f"{stats.completion_tokens} tok").append(counted, style="dim")
    text.append("  ").append(f"{_n(stats.decode_tps)} tok/s", style="bold green")
    text.append(f" · {_n(stats.ms_per_token, 2)} ms/tok (here)", style="dim")
    if stats.server_decode_tps:
        text.append("  server ", style="dim").append(f"{_n(stats.server_decode_tps)} tok/s")
    text.append("  total ", style="dim").append(f"{_n(stats.total_ms)} ms")
    title = f"{model} · {stats.finish_reason} · {stats.endpoint}"
    return Panel(text, title=title, title_align="left", border_style="dim", expand=False)


# Where each stage of a remote request runs, and what we can say about it from here.
REMOTE_STAGE_NOTES = {
    "① tokenize": ("server", "the server renders its template and tokenizes"),
    "② schedule": ("server", "the server batches the request and plans its KV cache"),
    "③ prefill": ("server", "the server computes the prompt"),
    "④ decode": ("server", "the server generates, token by token"),
    "⑤ post-process": ("both", "detokenize on the server; stop strings and filter here"),
    "⑥ return": ("here", "SSE stream -> terminal / pipe"),
    "⑦ release": ("server", "the server keeps or frees its KV cache"),
}


def remote_stats_table(stats: RemoteStats, model: str):
    """/stats for a remote request: server stages stay 'remote' unless the server reported them."""
    from rich.table import Table

    table = Table(title=f"last request · {model} · {stats.finish_reason} · {stats.endpoint}", title_justify="left",
                  show_edge=False, pad_edge=False)
    for name, right in (("stage", False), ("where", False), ("ms", True), ("what happened", False)):
        table.add_column(name, justify="right" if right else "left")
    timings = stats.server_timings or {}
    details = {
        "① tokenize": f"{_count(stats.prompt_tokens)} prompt tokens" + ("" if stats.usage_reported else
                                                                        " (the server sent no usage)"),
        "② schedule": (f"{stats.cached_tokens} cached, {_count(stats.prefill_tokens)} to prefill"
                       if stats.cached_tokens is not None else REMOTE_STAGE_NOTES["② schedule"][1]),
        "③ prefill": (f"{_n(stats.prefill_tps or 0)} tok/s (server timings)" if stats.prefill_ms is not None
                      else REMOTE_STAGE_NOTES["③ prefill"][1]),
        "④ decode": (f"{timings.get('predicted_n', '?')} tokens · {_n(stats.server_decode_tps or 0)} tok/s "
                     "(server timings)" if timings.get("predicted_ms") is not None
                     else REMOTE_STAGE_NOTES["④ decode"][1]),
        "⑤ post-process": (f"{stats.masked_words} words masked here" if stats.masked_words
                           else REMOTE_STAGE_NOTES["⑤ post-process"][1]),
    }
    for stage, ms in stats.stages.items():
        where, note = REMOTE_STAGE_NOTES.get(stage, ("", ""))
        table.add_row(stage, where, "remote" if ms is None else _n(ms, 2), details.get(stage, note))
    table.add_row("connect", "here", _n(stats.connect_ms, 2), "request sent -> first stream event")
    table.add_row("TTFT", "here", _n(stats.ttft_ms, 2), "request sent -> first text: network, queue, prefill")
    table.add_row("stream", "here", _n(stats.decode_ms, 2),
                  f"{stats.completion_tokens} tokens · {_n(stats.decode_tps)} tok/s · {_n(stats.ms_per_token, 2)} "
                  f"ms/tok" + ("" if stats.usage_reported else " (a chunk counted as a token)"))
    table.add_row("total", "here", _n(stats.total_ms, 2), f"finish: {stats.finish_reason}", style="bold")
    return table
