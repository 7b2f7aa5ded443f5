"""Rows -> text: llama-bench's Markdown table, JSON, JSONL, CSV, and a bar chart.

Everything returns a string; the command decides which stream it goes to.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Generic, TypeGuard, TypeVar

from llmcli.bench.chat import ChatRow
from llmcli.bench.records import BenchRow
from llmcli.bench.serve_stats import ServeRow
from llmcli.units import format_bytes, format_params

Row = BenchRow | ChatRow | ServeRow
R = TypeVar("R")

FORMATS = ("md", "json", "jsonl", "csv")


def human_bytes(n: int | None) -> str:
    return "-" if n is None else format_bytes(n)


@dataclass(frozen=True)
class Column(Generic[R]):
    title: str
    right: bool  # numbers align right, as in llama-bench's table
    cell: Callable[[R], str]
    when: Callable[[list[R]], bool] = lambda rows: True


def _are(rows: list[Row], kind: type[R]) -> TypeGuard[list[R]]:
    """A report's rows are all of one kind, so the first row tells which table and chart it gets."""
    return bool(rows) and isinstance(rows[0], kind)


def _bench_rows(rows: list[Row]) -> list[BenchRow]:
    """llama-bench's rows: what a report that is neither a chat nor a serving one holds."""
    return [r for r in rows if isinstance(r, BenchRow)]


# llama-bench's columns first (model, size, params, backend, threads, test, t/s), then ours.
COLUMNS: list[Column[BenchRow]] = [
    Column("model", False, lambda r: r.model_type),
    Column("size", True, lambda r: human_bytes(r.model_size)),
    Column("params", True, lambda r: format_params(r.model_n_params)),
    Column("backend", False, lambda r: r.backend),
    Column("threads", True, lambda r: str(r.n_threads)),
    Column("n_batch", True, lambda r: str(r.n_batch), lambda rows: len({r.n_batch for r in rows}) > 1),
    Column("test", True, lambda r: r.test),
    Column("t/s", True, lambda r: f"{r.avg_ts:.2f} ± {r.stddev_ts:.2f}"),
    Column(
        "speedup",
        True,
        lambda r: f"{r.speedup:.2f}x" if r.speedup is not None else "-",
        lambda rows: any(r.speedup is not None for r in rows),
    ),
    Column(
        "accepted",
        True,
        lambda r: f"{r.draft_acceptance:.0%}" if r.draft_acceptance is not None else "-",
        lambda rows: any(r.draft_acceptance is not None for r in rows),
    ),
    Column(
        "TTFT ms",
        True,
        lambda r: f"{r.ttft_ms:.1f}" if r.ttft_ms is not None else "-",
        lambda rows: any(r.ttft_ms is not None for r in rows),
    ),
    Column(
        "KV cache",
        True,
        lambda r: f"{human_bytes(r.kv_cache_bytes)} @ {r.n_ctx}" if r.kv_cache_bytes else "-",
    ),
    Column("peak RSS", True, lambda r: human_bytes(r.peak_rss_bytes)),
]


def _ms(value: float, spread: float) -> str:
    return f"{value:.1f} ± {spread:.1f}"


# The chat latency table: one row per turn of the script.
CHAT_COLUMNS: list[Column[ChatRow]] = [
    Column("model", False, lambda r: r.model),
    Column("threads", True, lambda r: str(r.n_threads)),
    Column("turn", True, lambda r: str(r.turn)),
    Column("prompt", True, lambda r: str(r.prompt_tokens)),
    Column("reused", True, lambda r: str(r.cached_tokens)),
    Column("TTFT cold ms", True, lambda r: _ms(r.ttft_cold_ms, r.ttft_cold_stddev_ms)),
    Column("TTFT reused ms", True, lambda r: _ms(r.ttft_reused_ms, r.ttft_reused_stddev_ms)),
    Column("gain", True, lambda r: f"{r.ttft_speedup:.2f}x"),
    Column("reply", True, lambda r: str(r.completion_tokens)),
    Column("decode t/s", True, lambda r: f"{r.decode_tps:.2f} ± {r.decode_stddev_tps:.2f}"),
    Column("raw tg t/s", True, lambda r: f"{r.raw_tg_tps:.2f}"),
    Column("overhead", True, lambda r: f"{r.overhead_pct:+.1f}%"),
]


def _pcts(r: ServeRow, name: str) -> str:
    return " / ".join(f"{getattr(r, f'p{p}_{name}_ms'):.1f}" for p in (50, 90, 99))


def _goodput(r: ServeRow) -> str:
    """Good requests per second, and how many of the completed ones were good."""
    if r.request_goodput is None:
        return "-"
    return f"{r.request_goodput:.2f} ({r.good_requests}/{r.completed})"


# bench --endpoint: one row per concurrency level, the columns of vLLM's serving benchmark.
SERVE_COLUMNS: list[Column[ServeRow]] = [
    Column("model", False, lambda r: r.model),
    Column("backend", False, lambda r: r.backend),
    Column("test", True, lambda r: r.test),
    Column("reqs", True, lambda r: f"{r.completed}" + (f" ({r.failed} failed)" if r.failed else "")),
    Column("req/s", True, lambda r: f"{r.request_throughput:.2f}"),
    Column("out tok/s", True, lambda r: f"{r.output_throughput:.2f}"),
    Column("decode t/s", True, lambda r: f"{r.decode_tps:.2f}"),
    Column(
        "goodput req/s",
        True,
        _goodput,
        lambda rows: any(r.request_goodput is not None for r in rows),  # an SLO was given
    ),
    Column("TTFT ms p50/p90/p99", True, lambda r: _pcts(r, "ttft")),
    Column("ITL ms p50/p90/p99", True, lambda r: _pcts(r, "itl")),
    Column("latency ms p50/p90/p99", True, lambda r: _pcts(r, "e2el")),
]


def to_markdown(rows: list[Row]) -> str:
    if _are(rows, ServeRow):
        return _table(rows, [c for c in SERVE_COLUMNS if c.when(rows)])
    if _are(rows, ChatRow):
        return _table(rows, CHAT_COLUMNS)
    return _bench_table(_bench_rows(rows))


def _bench_table(rows: list[BenchRow]) -> str:
    columns = [c for c in COLUMNS if c.when(rows)]
    # If two different models share a model_type (two files of one quant), show their names too.
    if len({r.model for r in rows}) > len({r.model_type for r in rows}):
        columns.insert(0, Column("name", False, lambda r: r.model))
    return _table(rows, columns)


def _table(rows: list[R], columns: list[Column[R]]) -> str:
    cells = [[c.cell(r) for c in columns] for r in rows]
    widths = [max([len(c.title)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return (
            "| "
            + " | ".join(
                v.rjust(w) if c.right else v.ljust(w) for v, w, c in zip(values, widths, columns, strict=True)
            )
            + " |"
        )

    rule = (
        "| "
        + " | ".join(
            ("-" * (w - 1) + ":") if c.right else "-" * w for w, c in zip(widths, columns, strict=True)
        )
        + " |"
    )
    return "\n".join([line([c.title for c in columns]), rule] + [line(r) for r in cells]) + "\n"


def to_json(rows: list[Row]) -> str:
    # llama-bench -o json writes one array of objects
    return json.dumps([r.to_dict() for r in rows], indent=2) + "\n"


def to_jsonl(rows: list[Row]) -> str:
    return "".join(json.dumps(r.to_dict()) + "\n" for r in rows)


def to_csv(rows: list[Row]) -> str:
    dicts = [r.to_dict() for r in rows]
    names = list(dicts[0]) if dicts else [f.name for f in fields(BenchRow)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(names)
    for d in dicts:
        # lists (samples) become one cell, a dict (placement) one JSON cell; None an empty cell
        writer.writerow(
            [
                ";".join(str(x) for x in v)
                if isinstance(v, list)
                else json.dumps(v)
                if isinstance(v, dict)
                else ("" if v is None else v)
                for v in (d[n] for n in names)
            ]
        )
    return buf.getvalue()


RENDERERS: dict[str, Callable[[list[Row]], str]] = {
    "md": to_markdown,
    "json": to_json,
    "jsonl": to_jsonl,
    "csv": to_csv,
}


def render(rows: list[Row], fmt: str) -> str:
    return RENDERERS[fmt](rows)


def bar_chart(rows: list[Row], width: int = 40) -> str:
    """Horizontal bars of t/s, one group per test (pp and tg live on different scales)."""
    if _are(rows, ServeRow):
        return _serve_chart(rows, width)
    if _are(rows, ChatRow):
        return _chat_chart(rows, width)
    return _bench_chart(_bench_rows(rows), width)


def _bench_chart(rows: list[BenchRow], width: int) -> str:
    if not rows:
        return ""
    eighths = " ▏▎▍▌▋▊▉█"
    labels = [f"{r.model} {r.backend} t={r.n_threads}" for r in rows]
    label_w = max(len(s) for s in labels)
    out: list[str] = []
    for test in dict.fromkeys(r.test for r in rows):
        group = [(label, r) for label, r in zip(labels, rows, strict=True) if r.test == test]
        top = max(r.avg_ts for _, r in group) or 1.0
        out.append(f"{test} (tokens/s)")
        for label, r in group:
            units = round(r.avg_ts / top * width * 8)
            bar = "█" * (units // 8) + (eighths[units % 8] if units % 8 else "")
            out.append(f"  {label.ljust(label_w)} {bar.ljust(width)} {r.avg_ts:9.2f}")
    return "\n".join(out) + "\n"


def _bar(value: float, top: float, width: int) -> str:
    eighths = " ▏▎▍▌▋▊▉█"
    units = round(value / (top or 1.0) * width * 8)
    return ("█" * (units // 8) + (eighths[units % 8] if units % 8 else "")).ljust(width)


def _chat_chart(rows: list[ChatRow], width: int) -> str:
    """TTFT per turn, cold against reused: the cache's effect at a glance."""
    top = max(max(r.ttft_cold_ms, r.ttft_reused_ms) for r in rows)
    out = ["TTFT per turn (ms)"]
    for r in rows:
        who = f"t={r.n_threads} turn {r.turn}"
        out.append(f"  {who} cold   {_bar(r.ttft_cold_ms, top, width)} {r.ttft_cold_ms:8.1f}")
        out.append(f"  {' ' * len(who)} reused {_bar(r.ttft_reused_ms, top, width)} {r.ttft_reused_ms:8.1f}")
    return "\n".join(out) + "\n"


def _serve_chart(rows: list[ServeRow], width: int) -> str:
    """Output tokens/s per concurrency level: how far batching carries the server."""
    top = max(r.output_throughput for r in rows)
    labels = [f"{r.model[-24:]} {r.test}" for r in rows]
    label_w = max(len(s) for s in labels)
    out = ["output tokens/s by concurrency"]
    for label, r in zip(labels, rows, strict=True):
        out.append(
            f"  {label.ljust(label_w)} {_bar(r.output_throughput, top, width)} {r.output_throughput:9.2f}"
        )
    return "\n".join(out) + "\n"
