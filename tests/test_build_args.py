"""`make install`'s llama.cpp build arguments (scripts/build_args.py): what this CPU adds, what the record
keeps, when llama.cpp is rebuilt and that pip's wheel cache is never used for it. The Makefile itself
runs against a fake venv whose pip and python log what they were asked: nothing is built."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmcli.machine import parse_cpuinfo
from tests.support import machines as m

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("build_args", ROOT / "scripts" / "build_args.py")
assert spec and spec.loader
build_args = importlib.util.module_from_spec(spec)
sys.modules["build_args"] = build_args  # dataclasses look their module up
spec.loader.exec_module(build_args)
decide, MARK = build_args.decide, build_args.REBUILT_MARK

XEON = parse_cpuinfo(m.SAPPHIRE_RAPIDS, "x86_64")
EPYC = parse_cpuinfo(m.EPYC, "x86_64")
NO_AMX = "'-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' " + (
    "'-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'"
)


def test_a_machine_without_amx_builds_what_it_always_built():
    first = decide(None, None, EPYC)
    assert first.args == "-DLLAVA_BUILD=OFF" and first.old_date  # no rebuild of an installed venv
    assert decide(None, "", EPYC).record is None  # an older Makefile's record of a plain install
    assert decide(None, "-DLLAVA_BUILD=OFF\n", EPYC).record is None


def test_an_amx_cpu_builds_without_amx_kernels_and_rebuilds_an_older_install():
    first = decide(None, None, XEON)
    assert first.args == f"-DLLAVA_BUILD=OFF {NO_AMX}" and not first.old_date
    assert decide(None, "", XEON).record == first.args  # an older Makefile's -march=native build
    assert decide(None, first.args + "\n", XEON).record is None


def test_the_users_arguments_come_last_and_stick():
    cuda = decide("-DGGML_CUDA=on", "-DLLAVA_BUILD=OFF\n", XEON)
    assert cuda.args == f"-DLLAVA_BUILD=OFF {NO_AMX} -DGGML_CUDA=on" and cuda.record == cuda.args
    assert decide(None, cuda.args + "\n", XEON).record is None  # a plain install keeps the GPU build
    assert decide("  ", cuda.args + "\n", XEON).args == cuda.args
    vulkan = decide("-DGGML_VULKAN=on", cuda.args + "\n", XEON)
    assert vulkan.args.endswith("-DGGML_VULKAN=on") and "CUDA" not in vulkan.args
    # An older Makefile's record held the user's arguments alone.
    assert decide(None, "-DGGML_CUDA=on\n", EPYC) == build_args.Decision(
        "-DLLAVA_BUILD=OFF -DGGML_CUDA=on", None
    )
    assert decide(None, "-DGGML_CUDA=on\n", XEON).args == cuda.args


def test_an_installed_amx_build_on_an_amx_cpu_is_rebuilt_once():
    args = decide(None, None, XEON).args
    once = decide(None, args + "\n", XEON, installed_amx=True)
    assert once.record == f"{args}\n{MARK}"
    assert decide(None, once.record + "\n", XEON, installed_amx=True).record is None
    assert decide(None, "-DLLAVA_BUILD=OFF\n", EPYC, installed_amx=True).record is None  # no AMX here


FAKE_PIP = """#!/bin/sh
echo "pip CMAKE_ARGS=[$CMAKE_ARGS] $*" >>"$LOG"
"""
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *llama_print_system_info*) echo "$SYSTEM_INFO" ;;
  *importlib.metadata*) echo 0.3.36 ;;
esac
"""


@pytest.fixture
def checkout(tmp_path):
    """A copy of what `make install` reads, with a venv whose pip and python only log."""
    for name in ("Makefile", "pyproject.toml", "scripts/build_args.py", "src/llmcli/machine.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    for name, text in (("pip", FAKE_PIP), ("python", FAKE_PYTHON)):
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    (tmp_path / "cpuinfo").write_text(m.SAPPHIRE_RAPIDS)
    return tmp_path


def make_install(checkout: Path, system_info: str, **env: str) -> list[str]:
    """The pip commands one `make install` ran (installs of llama-cpp-python and of the project)."""
    log = checkout / "pip.log"
    log.unlink(missing_ok=True)
    variables = {k: v for k, v in os.environ.items() if k not in ("CMAKE_ARGS", "MAKEFLAGS", "MAKELEVEL")}
    variables.update(LOG=str(log), SYSTEM_INFO=system_info, LLMCLI_CPUINFO=str(checkout / "cpuinfo"), **env)
    subprocess.run(["make", "-s", "install"], cwd=checkout, env=variables, check=True, capture_output=True)
    lines = log.read_text().splitlines() if log.exists() else []
    return [line for line in lines if "-e .[test]" in line or "llama-cpp-python==" in line]


def test_make_install_on_an_amx_cpu_rebuilds_an_amx_build_once_without_the_wheel_cache(checkout):
    first = make_install(checkout, "")  # a fresh venv
    assert first == [f"pip CMAKE_ARGS=[-DLLAVA_BUILD=OFF {NO_AMX}] install -q --no-cache-dir -e .[test]"]
    assert make_install(checkout, m.NO_AMX_SAPPHIRE_RAPIDS) == []  # installed and right: nothing to do

    # llama.cpp was replaced by a -march=native build (a pip install by hand): rebuilt once, uncached.
    os.utime(checkout / ".venv" / ".installed")
    again = make_install(checkout, m.NATIVE_SAPPHIRE_RAPIDS)
    assert len(again) == 2 and "--force-reinstall" in again[1] and "--no-cache-dir" in again[1]
    assert again[1].startswith(f"pip CMAKE_ARGS=[-DLLAVA_BUILD=OFF {NO_AMX}]")
    assert make_install(checkout, m.NATIVE_SAPPHIRE_RAPIDS) == []  # still AMX (own flags?): not again


def test_make_install_after_an_older_makefiles_amx_build_rebuilds_it(checkout):
    (checkout / "cpuinfo").write_text(m.EPYC)
    make_install(checkout, "")
    (checkout / ".venv" / ".cmake-args").unlink()  # as an older Makefile left it: no record at all
    assert make_install(checkout, m.NATIVE_EPYC) == []  # no AMX: the build stays
    (checkout / ".venv" / ".cmake-args").write_text("")  # an older record, now on an AMX machine
    (checkout / "cpuinfo").write_text(m.SAPPHIRE_RAPIDS)
    rebuilt = make_install(checkout, m.NATIVE_SAPPHIRE_RAPIDS)
    assert "--force-reinstall" in rebuilt[-1] and NO_AMX in rebuilt[-1]
    cuda = make_install(checkout, m.NO_AMX_SAPPHIRE_RAPIDS, CMAKE_ARGS="-DGGML_CUDA=on")
    assert cuda[-1].startswith(f"pip CMAKE_ARGS=[-DLLAVA_BUILD=OFF {NO_AMX} -DGGML_CUDA=on]")
    assert make_install(checkout, m.NO_AMX_SAPPHIRE_RAPIDS) == []  # the GPU build stays


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
def test_the_no_amx_flags_beat_an_amx_cpus_march_in_either_order():
    """ggml's CMake puts CMAKE_C_FLAGS before its -march=native, and compiles its AMX kernels only
    where __AMX_INT8__ is defined: this compiler must leave it undefined for an AMX CPU's -march."""
    from llmcli.machine import NO_AMX

    def defines(*flags: str) -> str:
        done = subprocess.run(["gcc", *flags, "-dM", "-E", "-"], input="", capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"this gcc does not know {flags}: {done.stderr.strip()[:100]}")
        return done.stdout

    assert "__AMX_INT8__ " in defines("-march=sapphirerapids")
    for flags in ((*NO_AMX, "-march=sapphirerapids"), ("-march=sapphirerapids", *NO_AMX)):
        found = defines(*flags)
        assert "__AMX_INT8__ " not in found and "__AMX_TILE__ " not in found
        assert "__AVX512VNNI__ " in found and "__AVX512BF16__ " in found  # the rest of the CPU stays
