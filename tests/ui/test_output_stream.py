"""Output.stream: a streamed reply reaches stdout whole, its first piece at once, later pieces
flushed at most every STREAM_FLUSH_S (one write(2) for many fast tokens), the rest by end_stream."""

from __future__ import annotations

import io

from llmcli.environment import Environment
from llmcli.ui import output as output_module
from llmcli.ui.output import Output


class CountingStdout(io.StringIO):
    """A stdout that remembers what had reached it at each flush."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        super().flush()
        self.flushed.append(self.getvalue())


def make() -> tuple[Output, CountingStdout]:
    stdout = CountingStdout()
    return Output(Environment(vars={}, stdin=io.StringIO(""), stdout=stdout, stderr=io.StringIO())), stdout


def test_fast_pieces_share_a_flush_and_end_stream_flushes_the_rest(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(output_module.time, "monotonic", lambda: now[0])
    out, stdout = make()
    out.stream("The")  # the first piece: at once
    assert stdout.flushed == ["The"]
    for piece in (" quick", " brown"):  # within the interval: written, not yet flushed
        now[0] += output_module.STREAM_FLUSH_S / 4
        out.stream(piece)
    assert stdout.flushed == ["The"]
    now[0] += output_module.STREAM_FLUSH_S  # the interval passed: this piece flushes all so far
    out.stream(" fox")
    assert stdout.flushed[-1] == "The quick brown fox"
    out.stream(" jumps")
    out.end_stream()
    assert stdout.flushed[-1] == stdout.getvalue() == "The quick brown fox jumps"
    out.stream("\n")  # a new stream after end_stream starts with a flush again
    assert stdout.flushed[-1].endswith("\n")


def test_a_slow_stream_flushes_every_piece(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(output_module.time, "monotonic", lambda: now[0])
    out, stdout = make()
    for piece in ("a", "b", "c"):
        now[0] += 1.0  # a big model: a token a second
        out.stream(piece)
    assert stdout.flushed == ["a", "ab", "abc"]
