"""The stats panel at 60, 80 and 120 columns: a line that does not fit breaks between two numbers,
never between a label and its value, nor between a value and its unit."""

from __future__ import annotations

import io
import re

import pytest

from llmcli.engine.events import Stats
from llmcli.stages import STAGES, StageRecord
from llmcli.ui.stats import stats_panel

MS = {"prefill": 8193.4, "decode": 56283.7}
# What the README's run showed: long numbers, a load, a prefix from the cache.
TOKENS = {"prompt_tokens": 41, "prefill_tokens": 41, "cached_tokens": 0, "completion_tokens": 81}
TIMES = {"load_ms": 1736.3, "total_ms": 64685.8, "ttft_ms": 8290.9, "decode_ms": 56283.7}
STATS = Stats(
    **TOKENS,
    **TIMES,
    n_ctx=4096,
    decode_steps=80,
    ctx_used=122,
    finish_reason="stop",
    stages=[StageRecord(s.key, MS.get(s.key, 1.0), "local", "") for s in STAGES],
)
# Each label with its value and unit, as one line must hold them.
ITEMS = [
    r"prompt 41 tok \(41 new, 0 cached\)",
    r"prefill 8,193\.4 ms",
    r"TTFT 8,290\.9 ms",
    r"decode 81 tok",
    r"1\.4 tok/s · 703\.55 ms/tok",
    r"ctx 122/4096",
    r"load 1,736\.3 ms",
    r"total 64,685\.8 ms",
]


def render(width: int) -> list[str]:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(stats_panel(STATS, "smollm2-135m-instruct"))
    return console.file.getvalue().splitlines()


@pytest.mark.parametrize("width", [60, 80, 120])
def test_each_label_and_its_value_share_one_line(width):
    lines = render(width)
    assert all(len(line) <= width for line in lines), lines
    for item in ITEMS:
        assert any(re.search(item, line) for line in lines), (item, "\n".join(lines))


def test_a_wide_terminal_shows_each_group_on_one_line():
    inside = [line for line in render(200) if line.startswith("│")]
    assert len(inside) == 2 and "TTFT" in inside[0] and "total" in inside[1]
