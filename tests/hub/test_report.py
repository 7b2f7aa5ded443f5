"""What a pull shows on stderr: plain lines for logs and pipes, rich bars on a terminal."""

from __future__ import annotations

import io

from llmcli.hub.events import Converting, FileDone, FileProgress, FileStarted, FileVerifying, Note
from llmcli.ui.download import PlainReport, RichReport, download_report

MB = 1_000_000
EVENTS = [
    Note("no quant given; picked Q4_K_M, the default"),
    FileStarted("m-Q4_K_M.gguf", 100 * MB, resumed_from=30 * MB),
    *[FileProgress("m-Q4_K_M.gguf", n * MB, 100 * MB) for n in range(40, 101, 10)],
    FileVerifying("m-Q4_K_M.gguf", 100 * MB),
    FileDone("m-Q4_K_M.gguf", 100 * MB, cached=False),
    FileDone("README.md", 120, cached=True),
    Converting("quantizing with llama.cpp", 0, 1),
    Converting("quantizing with llama.cpp", 1, 1),
]


def test_plain_report_is_a_few_lines_per_file() -> None:
    out = io.StringIO()
    with PlainReport(out) as report:
        for event in EVENTS:
            report(event)
    assert out.getvalue().splitlines() == [
        "no quant given; picked Q4_K_M, the default",
        "resuming m-Q4_K_M.gguf at 30.0 MB of 100.0 MB",
        "  m-Q4_K_M.gguf: 50% (50.0 MB)",
        "  m-Q4_K_M.gguf: 75% (80.0 MB)",
        "verifying m-Q4_K_M.gguf",
        "m-Q4_K_M.gguf: done (100.0 MB)",
        "README.md: already in the cache (120 B)",
        "quantizing with llama.cpp",
    ]


def test_rich_report_draws_bars_without_failing_on_any_event() -> None:
    out = io.StringIO()
    with RichReport(out) as report:
        for event in EVENTS + [Converting("blk.0.attn_q.weight", 5, 10)]:
            report(event)
    text = out.getvalue()
    assert "m-Q4_K_M.gguf" in text and "README.md: already in the cache" in text


def test_the_terminal_decides_which_report() -> None:
    assert isinstance(download_report(io.StringIO(), isatty=False), PlainReport)
    assert isinstance(download_report(io.StringIO(), isatty=True), RichReport)
