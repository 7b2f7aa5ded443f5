"""`llmcli doctor`: does llama.cpp's build fit this machine, and does it decode?

The build's features, the CPU's, the devices and one decoded token all come from a child process
(engine/local/probe.py): a llama.cpp that cannot run here kills the process that loads it, and a crash
must be one line in the parent, not the parent's death. The test suite's preflight runs the same check
(tests/conftest.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from llmcli.machine import Cpu, Fit, fit, parse_system_info, this_cpu

FIX = "run `make install` again to rebuild it for this machine (docs/build.md)"
TIMEOUT_S = 300  # a one-token decode of a 135M model takes a second; a loaded machine, far more


def probe_command(model_path: str) -> list[str]:
    """The child that decodes one token of model_path (engine/local/probe.py)."""
    return [sys.executable, "-m", "llmcli.engine.local.probe", model_path]


@dataclass
class DecodeCheck:
    """What the child did: every JSON record it printed, and how it ended."""

    returncode: int  # negative: killed by that signal (subprocess's convention)
    records: list[dict] = field(default_factory=list)
    stderr_tail: str = ""
    seconds: float = 0.0
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.step("decoded") is not None

    @property
    def signal_name(self) -> str | None:
        if self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def step(self, name: str) -> dict | None:
        return next((r for r in self.records if r.get("step") == name), None)

    def line(self) -> str:
        """One line: what the decode gave, or how the child died and the fix."""
        if self.ok:
            decoded = self.step("decoded") or {}
            return f"ok: token {decoded.get('token')} {decoded.get('piece', '')!r} in {self.seconds:.1f} s"
        where = "loading llama.cpp" if self.step("loaded") is None else "a one-token decode"
        if self.timed_out:
            return f"llama.cpp did not finish {where} in {TIMEOUT_S} s on this machine; {FIX}"
        if self.signal_name:
            return f"llama.cpp itself crashes on this CPU ({self.signal_name} in {where}); {FIX}"
        detail = self.stderr_tail or f"exit code {self.returncode}"
        return f"llama.cpp failed in {where} ({detail}); {FIX}"


def decode_check(
    model_path: str, command: Sequence[str] | None = None, timeout: float = TIMEOUT_S
) -> DecodeCheck:
    """Run the probe child (or `command`, which tests make crash) and read what it printed."""
    argv = list(command) if command is not None else probe_command(model_path)
    t0 = time.perf_counter()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return DecodeCheck(-1, _records(out), "", time.perf_counter() - t0, timed_out=True)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return DecodeCheck(
        done.returncode, _records(done.stdout), lines[-1] if lines else "", time.perf_counter() - t0
    )


def _records(stdout: str) -> list[dict]:
    found = []
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            found.append(record)
    return found


@dataclass
class Report:
    version: str  # llama-cpp-python's
    cpu: Cpu
    check: DecodeCheck
    model: str  # the GGUF decoded

    @property
    def system_info(self) -> str | None:
        loaded = self.check.step("loaded")
        return loaded.get("system_info") if loaded else None

    @property
    def devices(self) -> list[dict]:
        loaded = self.check.step("loaded")
        return list(loaded.get("devices", [])) if loaded else []

    @property
    def fit(self) -> Fit | None:
        info = self.system_info
        return fit(parse_system_info(info), self.cpu) if info is not None else None

    @property
    def ok(self) -> bool:
        verdict = self.fit
        return self.check.ok and verdict is not None and verdict.ok

    def problem(self) -> str | None:
        """The one line naming what is wrong and the fix; None when all is well. A build for
        instructions the CPU lacks is named first: it says why the decode died."""
        verdict = self.fit
        if verdict is not None and not verdict.ok:
            return f"llama.cpp's build does not fit this CPU: {verdict.text().removeprefix('no: ')}"
        return None if self.check.ok else self.check.line()

    def as_json(self) -> dict:
        verdict = self.fit
        return {
            "llama_cpp_python": self.version,
            "system_info": self.system_info,
            "cpu": {"arch": self.cpu.arch, "model": self.cpu.model, "flags": self.cpu.relevant_flags()},
            "devices": self.devices,
            "fits": None
            if verdict is None
            else {
                "ok": verdict.ok,
                "missing": list(verdict.missing),
                "amx_guarded": verdict.amx_guarded,
                "text": verdict.text(),
            },
            "decode": {
                "ok": self.check.ok,
                "model": self.model,
                "line": self.check.line(),
                "signal": self.check.signal_name,
                "returncode": self.check.returncode,
            },
            "ok": self.ok,
        }


def doctor(model_path: str, command: Sequence[str] | None = None) -> Report:
    """The whole check: this CPU, and what a child process made of llama.cpp and model_path."""
    from llmcli import llama_lib

    try:
        version = llama_lib.version()
    except Exception:  # not installed: the child's failure says so
        version = "-"
    return Report(version=version, cpu=this_cpu(), check=decode_check(model_path, command), model=model_path)
