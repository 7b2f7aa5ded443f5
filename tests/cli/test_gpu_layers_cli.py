"""`--gpu-layers` on chat, serve and bench, and where the layers went in every --json record."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import httpx
import pytest

from llmcli.engine.local.backend import init_backends
from llmcli.model_ref import EMBEDDED_NAME
from tests.serve.server import HANG_GUARD_S, URL_LINE
from tests.support.cli import LLMCLI, cli, cli_process

GREEDY = ["--temp", "0", "-n", "24", "--no-log"]
BENCH = ["-p", "8", "--n-gen", "4", "-t", "1"]
# What any build offloads of the embedded model's 30 + 1 layers: all of them where llama.cpp found a GPU.
HAS_GPU = any(d.type in ("GPU", "IGPU") for d in init_backends())


def offloaded(asked: int | None, layers: int = 31) -> int:
    return 0 if not HAS_GPU else (layers if asked is None else min(asked, layers))


BAD = {
    "chat": ["chat", "hi", "--gpu-layers"],
    "serve": ["serve", "--gpu-layers"],
    "bench": ["bench", *BENCH, "--gpu-layers"],
    "bench --parallel": ["bench", "--parallel", "1", *BENCH, "--gpu-layers"],
}


@pytest.mark.parametrize("value", ["-1", "x", "1.5", ""])
@pytest.mark.parametrize("args", BAD.values(), ids=BAD.keys())
def test_a_bad_value_is_one_line_and_exit_2(args, value):
    r = cli(*args, value)
    assert r.exit_code == 2, r.stderr
    assert r.stdout == ""
    assert r.stderr == (
        f"llmcli: error: --gpu-layers {value!r}: give 'all' (every layer, the default) or a whole number "
        "of layers >= 0 (0: CPU only)\n"
    )


@pytest.mark.parametrize("command", [["chat", "hi"], ["bench"]], ids=["chat", "bench"])
def test_a_server_has_its_own_layers(command):
    r = cli(*command, "--endpoint", "http://127.0.0.1:9/v1", "--gpu-layers", "0")
    assert r.exit_code == 2 and r.stdout == ""
    assert "--gpu-layers set the local engine; the server at http://127.0.0.1:9/v1 has its own" in r.stderr


def test_zero_layers_answers_as_the_default_does_at_temperature_0():
    default = cli("chat", *GREEDY, "Name a colour.")
    cpu_only = cli("chat", *GREEDY, "--gpu-layers", "0", "Name a colour.")
    assert default.exit_code == cpu_only.exit_code == 0, default.stderr + cpu_only.stderr
    assert default.stdout.strip() and cpu_only.stdout == default.stdout


@pytest.mark.parametrize("asked", [None, 0, 5], ids=["all", "0", "5"])
def test_chat_json_says_where_the_layers_went(asked):
    flag = [] if asked is None else ["--gpu-layers", str(asked)]
    r = cli("chat", *GREEDY, "--json", *flag, "Say hi.")
    assert r.exit_code == 0, r.stderr
    placement = json.loads(r.stdout)["placement"]
    assert placement["gpu_layers"] == ("all" if asked is None else str(asked))
    assert placement["layers"] == 31 and placement["offloaded"] == offloaded(asked)
    assert placement["offload_kqv"] is True and placement["kv_on_gpu"] == (offloaded(asked) > 0)
    assert {d["name"] for d in placement["devices"]} >= set(placement["layer_devices"])


def test_bench_rows_report_the_layers_llama_cpp_offloaded():
    r = cli("bench", *BENCH, "-r", "1", "--gpu-layers", "3", "--json")
    assert r.exit_code == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [row["test"] for row in rows] == ["pp8", "tg4"]
    for row in rows:
        assert row["n_gpu_layers"] == row["placement"]["offloaded"] == offloaded(3)
        assert row["placement"]["gpu_layers"] == "3" and row["placement"]["layers"] == 31
        assert row["backends"] == ("CPU" if not HAS_GPU else row["backends"])


def test_bench_parallel_rows_report_the_truth_not_zero():
    r = cli("bench", "--parallel", "1,2", *BENCH, "--json")
    assert r.exit_code == 0, r.stderr
    for row in json.loads(r.stdout):
        assert row["n_gpu_layers"] == row["placement"]["offloaded"] == offloaded(None)
        assert row["placement"]["gpu_layers"] == "all"
    csv = cli("bench", "--parallel", "1", *BENCH, "--gpu-layers", "0", "--csv")
    assert csv.exit_code == 0, csv.stderr
    header, row = csv.stdout.splitlines()[:2]
    assert header.split(",")[-1] == "placement" and '""gpu_layers"": ""0""' in row  # one JSON cell


def test_show_lists_the_devices_and_where_the_layers_would_go(embedded_path):
    r = cli("show", embedded_path, "--json")
    assert r.exit_code == 0, r.stderr
    offload = json.loads(r.stdout)["offload"]
    assert offload["layers"] == 31 and offload["offloaded"] == offloaded(None)
    assert any(d["type"] == "CPU" for d in offload["devices"]) and bool(offload["targets"]) == HAS_GPU
    text = cli("show", embedded_path)
    assert re.search(rf"gpu layers +{offloaded(None)}/31", text.stdout), text.stdout


# On CUDA a model loaded after `import numpy` crashed llama.cpp's loader: every command that loads a
# model must have initialised llama.cpp's backends (engine/local's __init__) before numpy came in.
def import_order(stderr: str) -> list[str]:
    """The modules `python -X importtime` reported, in the order their imports finished."""
    return [m[1] for m in re.finditer(r"^import time: +\d+ \| +\d+ \| +(\S+)$", stderr, re.MULTILINE)]


def backends_before_numpy(names: list[str]) -> bool:
    """Whether llama.cpp was initialised before numpy was imported, if it was (plain bench never does).
    llmcli.llama_lib is imported by the call that loads llama.cpp and initialises its backends."""
    assert "llmcli.llama_lib" in names, names[-20:]
    return "numpy" not in names or names.index("llmcli.llama_lib") < names.index("numpy")


@pytest.mark.parametrize(
    "args",
    [["chat", *GREEDY, "hi"], ["bench", *BENCH, "-r", "1"], ["bench", "--parallel", "1", *BENCH]],
    ids=["chat", "bench", "bench --parallel"],
)
def test_each_command_initialises_llama_cpp_before_numpy(args):
    r = cli_process(*args, vars={"PYTHONPROFILEIMPORTTIME": "1"})
    assert r.exit_code == 0, r.stderr[-2000:]
    assert backends_before_numpy(import_order(r.stderr))


def test_a_chat_with_a_server_never_loads_llama_cpp():
    # (opening a GPU costs its memory and a second: a command that loads no model must not)
    r = cli_process(
        "chat", "--endpoint", "http://127.0.0.1:9/v1", "hi", vars={"PYTHONPROFILEIMPORTTIME": "1"}
    )
    assert r.exit_code == 1 and "127.0.0.1:9" in r.stderr
    assert "llmcli.llama_lib" not in import_order(r.stderr)


def test_serve_initialises_llama_cpp_before_numpy(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LLMCLI_")}
    env.update(LLMCLI_HOME=str(tmp_path), PYTHONPROFILEIMPORTTIME="1")
    log = tmp_path / "stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [*LLMCLI, "serve", EMBEDDED_NAME, "--port", "0", "-t", "1", "--ctx", "256", "--gpu-layers", "0"],
            stderr=err,
            env=env,
        )
    try:
        end, ready = time.monotonic() + HANG_GUARD_S, False
        while not ready and time.monotonic() < end and proc.poll() is None:
            if found := URL_LINE.search(log.read_text(errors="replace")):
                try:
                    ready = httpx.get(found[1] + "/health", timeout=2).status_code == 200
                except httpx.TransportError:
                    pass
            time.sleep(0.1)
        assert ready, log.read_text(errors="replace")[-2000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(HANG_GUARD_S)
    assert backends_before_numpy(import_order(log.read_text(errors="replace")))
