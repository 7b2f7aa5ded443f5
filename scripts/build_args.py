"""The CMAKE_ARGS `make install` builds llama.cpp with here, recorded in .venv/.cmake-args.

    python3 scripts/build_args.py RECORD [VENV_PYTHON]      (CMAKE_ARGS: the user's own, if any)

The effective arguments are ours (no multimodal library; no AMX kernels on an AMX CPU:
llmcli.machine.cpu_cmake_args) followed by the user's (a GPU: docs/build.md). The user's stick: a plain
`make install` keeps the ones the record holds, so a GPU build stays one. RECORD's first line is what
pip gets; the Makefile rebuilds llama.cpp, without pip's wheel cache, whenever RECORD is newer than the
install, which this script makes it exactly when the build must change:

- the effective arguments differ from the recorded ones (a new CMAKE_ARGS; this CPU has AMX and the
  last build was made before the record knew it; a venv copied to another machine);
- this CPU has AMX and the installed llama.cpp says AMX_INT8 = 1 although the record matches (a build
  made by hand, or taken from a cache): rebuilt once, and the record says so on its second line, so a
  build that keeps its AMX kernels anyway (a CMAKE_C_FLAGS of the user's own) is not rebuilt forever.
  The load guard (llmcli.machine.guard_extra_bufts) keeps such a build from crashing.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from llmcli.machine import NO_AMX_CMAKE_ARGS, Cpu, cpu_cmake_args, parse_system_info, this_cpu  # noqa: E402

# llama-cpp-python's multimodal library (mtmd), which llmcli never loads, is a quarter of the build.
BASE = ("-DLLAVA_BUILD=OFF",)
OURS = frozenset((*BASE, *NO_AMX_CMAKE_ARGS))  # every argument this script may add, to tell the user's apart
REBUILT_MARK = "# rebuilt once: the installed llama.cpp had AMX kernels on an AMX CPU"
PLAIN = " ".join(BASE)  # what a machine without AMX and without CMAKE_ARGS builds with


@dataclass(frozen=True)
class Decision:
    args: str  # the effective CMAKE_ARGS
    record: str | None  # the record's new text; None: leave it as it is
    old_date: bool = False  # a first record that changes nothing: dated 1970, so no rebuild follows


def decide(user: str | None, recorded: str | None, cpu: Cpu, installed_amx: bool = False) -> Decision:
    """The effective CMAKE_ARGS and what becomes of the record.

    `user`: the CMAKE_ARGS given now (None or blank: none); `recorded`: the record's text (None: there
    is none; records of older Makefiles hold the user's arguments alone); `installed_amx`: the installed
    llama.cpp's system info says AMX_INT8 = 1."""
    lines = (recorded or "").splitlines()
    old = shlex.split(lines[0]) if lines else []
    if user and user.strip():
        theirs = shlex.split(user)
    else:  # a plain `make install` keeps the user's arguments of the last build
        theirs = [arg for arg in old if arg not in OURS]
    args = shlex.join([*BASE, *cpu_cmake_args(cpu), *theirs])
    if recorded is None:
        # No record: a fresh venv, or one an older Makefile installed with plain arguments (its build
        # is rebuilt only where this CPU needs something else).
        return Decision(args, args, old_date=args == PLAIN)
    if shlex.split(args) != [*BASE, *old] and shlex.split(args) != old:
        return Decision(args, args)
    if cpu.has_amx and installed_amx and REBUILT_MARK not in lines[1:]:
        return Decision(args, f"{args}\n{REBUILT_MARK}")
    return Decision(args, None)


# Run by the venv's Python with llmcli's sources first on its path: the system-info line of the
# installed llama.cpp, or nothing where there is none yet.
SYSTEM_INFO = "from llmcli import llama_lib; print(llama_lib.load().llama_print_system_info().decode())"


def installed_has_amx(venv_python: Path) -> bool:
    if not venv_python.exists():
        return False
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        done = subprocess.run(
            [str(venv_python), "-c", SYSTEM_INFO], capture_output=True, text=True, env=env, timeout=120
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and parse_system_info(done.stdout).has("AMX_INT8")


def main(argv: list[str]) -> int:
    record = Path(argv[1])
    venv_python = Path(argv[2]) if len(argv) > 2 else None
    # A recorded cpuinfo of another machine stands in for this one's in tests (tests/test_build_args.py).
    cpu = this_cpu(os.environ.get("LLMCLI_CPUINFO", "/proc/cpuinfo"))
    recorded = record.read_text(encoding="utf-8") if record.exists() else None
    # Loading llama.cpp takes a second: asked only where the answer can change something.
    installed_amx = bool(cpu.has_amx and venv_python and installed_has_amx(venv_python))
    decision = decide(os.environ.get("CMAKE_ARGS"), recorded, cpu, installed_amx)
    if decision.record is not None:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(decision.record + "\n", encoding="utf-8")
        if decision.old_date:
            os.utime(record, (0, 0))
        else:
            print(f"llama.cpp will be built with CMAKE_ARGS={decision.args}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
