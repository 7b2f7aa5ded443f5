"""One stage table, one Stats, one renderer, one --json shape: a local request and a remote one
(the fake server in this process) go through the same code and show the same seven stages."""

from __future__ import annotations

import io
import math

import pytest

from llmcli.engine.events import Notice, RemoteReport, Stats, TextDelta, drain, json_document, reported
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.openai.client import Endpoint
from llmcli.engine.openai.session import RemoteChatSession
from llmcli.engine.sampling import SamplingParams
from llmcli.stages import STAGES, UNKNOWN
from llmcli.ui.stats import stats_panel, stats_table
from tests.engine.openai.fake_server import MODEL, REPLY, FakeServer

TITLES = ["① tokenize", "② schedule", "③ prefill", "④ decode", "⑤ post-process", "⑥ return", "⑦ release"]


@pytest.fixture(scope="module")
def server():
    fake = FakeServer().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def local_stats(runtime) -> Stats:
    runtime.clear()
    session = ChatSession(runtime, params=SamplingParams(temperature=0.0, max_tokens=8))
    return drain(session.ask("Say hi.")).stats


@pytest.fixture(scope="module")
def remote_stats(server) -> Stats:
    session = RemoteChatSession(Endpoint.parse(server.endpoint(), None), MODEL)
    return drain(session.ask("Say hi.")).stats


def render(renderable) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=240, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def cells(line: str) -> list[str]:
    return [cell for cell in line.replace("┃", " ").replace("│", " ").split()]


def row(table_text: str, title: str) -> list[str]:
    return cells(next(line for line in table_text.splitlines() if line.lstrip().startswith(title)))


def test_the_table_holds_seven_numbered_stages_in_order():
    assert [stage.title for stage in STAGES] == TITLES
    assert len({stage.key for stage in STAGES}) == 7


def test_both_backends_record_the_seven_stages_in_the_table_order(local_stats, remote_stats):
    for stats in (local_stats, remote_stats):
        assert [record.name for record in stats.stages] == [stage.key for stage in STAGES]
    assert {r.where for r in local_stats.stages} == {"local"}
    # A server runs everything but post-process and return; those two are timed here.
    assert [r.where for r in remote_stats.stages] == ["remote"] * 4 + ["local"] * 2 + ["remote"]
    assert local_stats.remote is None and remote_stats.remote.endpoint.endswith("/ok/v1")


@pytest.mark.parametrize("which", ["local_stats", "remote_stats"])
def test_one_renderer_names_all_seven_stages(which, request):
    stats = request.getfixturevalue(which)
    table = render(stats_table(stats, "m"))
    header = cells(table.splitlines()[1])
    assert header == ["stage", "where", "ms", "share", "what", "happened"]
    for title in TITLES:
        assert title in table
    panel = render(stats_panel(stats, "m"))
    assert "TTFT" in panel and "tok/s" in panel and "total" in panel


def test_remote_stages_without_a_server_number_show_remote_and_a_dash(remote_stats):
    table = render(stats_table(remote_stats, "m"))
    for title in ("① tokenize", "② schedule", "⑦ release"):
        cells = row(table, title)
        assert cells[2:4] == ["remote", UNKNOWN], cells  # never a made-up 0
    # What the fake server reports (llama.cpp's timings) is shown as the server's number.
    assert row(table, "③ prefill")[2:4] == ["remote", "12.50"]
    assert row(table, "④ decode")[2:4] == ["remote", "50.00"]
    assert "0.00" not in " ".join(row(table, "① tokenize"))
    panel = render(stats_panel(remote_stats, "m"))
    assert "42 tok (32 new, 10 cached)" in panel and "(server)" in panel and "(here)" in panel


def test_a_local_panel_says_nothing_about_places(local_stats):
    panel = render(stats_panel(local_stats, "m"))
    assert "(here)" not in panel and "(server)" not in panel and UNKNOWN not in panel


def test_the_json_document_has_the_same_keys_for_both(local_stats, remote_stats):
    local = json_document("hi", "m", local_stats)
    remote = json_document("".join(REPLY), "m", remote_stats)
    assert (
        list(local)
        == list(remote)
        == [
            "text",
            "reasoning",
            "model",
            "finish_reason",
            "usage",
            "timings",
            "endpoint",
            "server",
            "stages",
            "draft",
            "placement",
            "threads",
        ]
    )
    for key in ("usage", "timings"):
        assert list(local[key]) == list(remote[key])
    assert [s["name"] for s in local["stages"]] == [s["name"] for s in remote["stages"]]
    assert all(list(s) == ["name", "ms", "where", "detail"] for s in local["stages"] + remote["stages"])
    assert local["endpoint"] is None and local["server"] is None
    assert remote["server"]["timings"]["prompt_ms"] == 12.5
    assert remote["timings"]["tokenize_ms"] is None and remote["stages"][0]["ms"] is None
    assert local["timings"]["tokenize_ms"] == local["stages"][0]["ms"] > 0


def test_drain_streams_text_passes_notices_and_keeps_the_stats(local_stats):
    seen: list[str] = []
    notices: list[str] = []
    events = [TextDelta("a"), Notice("careful"), TextDelta("b"), local_stats]
    reply = drain(iter(events), on_text=seen.append, on_notice=notices.append)
    assert reply.text == "ab" and seen == ["a", "b"] and notices == ["careful"]
    assert reply.stats is local_stats
    assert drain(iter([TextDelta("x")])).stats is None  # a stream cut short has no stats


@pytest.mark.parametrize("value", ["fast", None, True, [], {}, math.nan, math.inf])
def test_a_server_number_that_is_not_a_number_is_unknown(value):
    assert reported(value) is None
    assert RemoteReport("http://x", timings={"predicted_per_second": value}).decode_tps is None


@pytest.mark.parametrize("offloaded", [0, 31])
def test_the_panel_says_how_many_layers_a_gpu_holds_only_when_it_holds_some(offloaded):
    stats = Stats(load_ms=900.0, total_ms=1000.0, placement={"offloaded": offloaded, "layers": 31})
    panel = render(stats_panel(stats, "m"))
    assert ("31/31 layers on GPU" in panel) == bool(offloaded) and "load 900.0 ms" in panel
