"""`llmcli doctor` and the test run's preflight: the build, the CPU, the devices, whether they fit, and
a one-token decode of the embedded model in a child process, whose crash is one line naming the fix.
The crashes are children that kill themselves (the check takes the child's command); the decode that
works is the real embedded model on this machine's llama.cpp."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from llmcli.engine.local.backend import build, init_backends
from llmcli.machine import this_cpu
from llmcli.usecases import doctor as doctor_module
from llmcli.usecases.doctor import FIX, decode_check
from tests.support import machines as m
from tests.support.cli import cli

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
SEGV = [PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"]
# Says what it loaded (an AMX Xeon's native build), then dies of an illegal instruction mid-decode.
LOADED = json.dumps({"step": "loaded", "system_info": m.NATIVE_SAPPHIRE_RAPIDS, "devices": []})
SIGILL_AFTER_LOAD = [
    PY,
    "-c",
    f"import os, signal; print({LOADED!r}, flush=True); os.kill(os.getpid(), signal.SIGILL)",
]


def test_doctor_reports_this_machine_and_decodes_one_token():
    result = cli("doctor")
    assert result.exit_code == 0 and result.stderr == "", result.stderr
    init_backends()
    lines = result.stdout.splitlines()
    assert any(line.startswith("build ") and line.endswith(build().line) for line in lines)
    assert any(line.startswith("fits the cpu  yes") for line in lines), lines
    decode = next(line for line in lines if line.startswith("decode "))
    assert "smollm2-135m-instruct: ok: token " in decode


def test_doctor_json_is_one_document():
    result = cli("doctor", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["decode"]["ok"] is True and report["decode"]["signal"] is None
    assert report["system_info"] == build().line
    assert report["cpu"]["flags"] == this_cpu().relevant_flags()
    assert report["fits"] == {"ok": True, "missing": [], "amx_guarded": False, "text": "yes"}
    assert [d["type"] for d in report["devices"]].count("CPU") == 1


def test_a_child_killed_by_a_signal_is_one_line_naming_the_fix(embedded_path):
    check = decode_check(embedded_path, SEGV)
    assert not check.ok and check.signal_name == "SIGSEGV"
    assert check.line() == f"llama.cpp itself crashes on this CPU (SIGSEGV in loading llama.cpp); {FIX}"
    died = decode_check(embedded_path, SIGILL_AFTER_LOAD)
    assert died.line() == f"llama.cpp itself crashes on this CPU (SIGILL in a one-token decode); {FIX}"


def test_a_child_that_fails_or_hangs_is_one_line_too(embedded_path):
    failed = decode_check(embedded_path, [PY, "-c", "import sys; sys.exit('no libllama.so here')"])
    assert failed.line() == f"llama.cpp failed in loading llama.cpp (no libllama.so here); {FIX}"
    hung = decode_check(embedded_path, [PY, "-c", "import time; time.sleep(60)"], timeout=0.5)
    assert hung.timed_out and not hung.ok and "did not finish loading llama.cpp" in hung.line()


def test_doctor_says_a_crash_in_one_line_and_exits_1(monkeypatch):
    monkeypatch.setattr(doctor_module, "probe_command", lambda path: SEGV)
    result = cli("doctor")
    assert result.exit_code == 1
    assert (
        result.stderr
        == f"llmcli: error: llama.cpp itself crashes on this CPU (SIGSEGV in loading llama.cpp); {FIX}\n"
    )
    assert "decode        smollm2-135m-instruct: llama.cpp itself crashes" in result.stdout


def test_doctor_on_an_amx_build_that_dies_says_guarded_and_the_crash(monkeypatch):
    monkeypatch.setattr(doctor_module, "probe_command", lambda path: SIGILL_AFTER_LOAD)
    result = cli("doctor", "--json")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    report = json.loads(result.stdout)
    assert report["decode"]["signal"] == "SIGILL" and report["ok"] is False
    if not this_cpu().has_amx:  # this machine: an AMX Xeon's build asks for instructions it lacks,
        assert "AMX_INT8" in report["fits"]["missing"]  # and that is the cause the line names
        assert result.stderr.startswith("llmcli: error: llama.cpp's build does not fit this CPU: built for ")
        assert "AMX_INT8, which this CPU lacks; run `make install` again on this machine" in result.stderr


def test_a_test_run_whose_preflight_crashes_stops_at_once_with_one_line():
    env = {**os.environ, "LLMCLI_TEST_PREFLIGHT_COMMAND": shlex.join(SEGV)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    done = subprocess.run(
        [
            PY,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "tests/test_units.py",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert f"preflight: llama.cpp itself crashes on this CPU (SIGSEGV in loading llama.cpp); {FIX}" in out
    assert " passed" not in out and " failed" not in out  # no test ran
