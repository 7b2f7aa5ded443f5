"""Many fuzz cases through `llmcli`, in one bounded child instead of a Python start per case.

A child process runs the cases one after another through `llmcli.cli.main`, with its descriptors 1
and 2 pointed at each case's own files: what llama.cpp writes to stderr is that case's stderr, as in
a child per case. The child is bounded as `run_bounded`'s (tests/fuzz/bounded.py) are: an
address-space limit, SIGINT at its default, a time limit per case. A case that kills the child
(SIGABRT, SIGSEGV) or hangs it ends with that child's exit status (or None: no end in time), and
a fresh child takes the next case: one case's crash never hides another's.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.fuzz.bounded import MEMORY
from tests.support.cli import Result, environment_vars

ROOT = Path(__file__).resolve().parents[2]
CHILD = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from tests.fuzz.batch import child; child()"


def run_many(
    runs: Sequence[Sequence[str]],
    *,
    env: Mapping[str, str] | None = None,
    vars: Sequence[Mapping[str, str]] | None = None,
    cwds: Sequence[Path] | None = None,
    cwd: Path | None = None,
    timeout: float = 120,
    memory: int | None = MEMORY,
) -> list[Result | None]:
    """Each argv of `runs` as `llmcli ARGV` with empty stdin, in the environment `env` (default:
    this process's) and `cwd`: its Result, or None when it did not end within `timeout` seconds.
    vars: each run's own variables, over `env` (the child's os.environ during that run); cwds: each
    run's own working folder (default: `cwd`).
    memory: the child's address-space limit in bytes (None: none, as a plain child has)."""

    def confine() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if memory is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    results: list[Result | None] = [None] * len(runs)
    with tempfile.TemporaryDirectory(prefix="fuzz-batch-") as tmp:
        folder = Path(tmp)
        each = [dict(v) for v in vars] if vars is not None else [{} for _ in runs]
        folders = [str(c) for c in cwds] if cwds is not None else [None for _ in runs]
        cases = [
            {"argv": list(argv), "vars": v, "cwd": c} for argv, v, c in zip(runs, each, folders, strict=True)
        ]
        (folder / "runs.json").write_text(json.dumps(cases), encoding="utf-8")
        start = 0
        while start < len(runs):
            try:
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, str(folder), str(start), str(timeout)],
                    env=dict(env) if env is not None else environment_vars(),
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    preexec_fn=confine,
                    timeout=timeout * (len(runs) - start) + 30,
                )
                status: int | None = done.returncode
            except subprocess.TimeoutExpired:
                status = None
            i = start
            while i < len(runs) and (folder / f"{i}.code").exists():
                results[i] = _read(folder, i, int((folder / f"{i}.code").read_text()))
                i += 1
            if i < len(runs):  # the child ended on case i: killed by it, or out of time (None)
                results[i] = None if status is None or status == 124 else _read(folder, i, status)
            start = i + 1
    return results


def _read(folder: Path, i: int, code: int) -> Result:
    def text(name: str) -> str:
        path = folder / name
        return path.read_bytes().decode("utf-8", "replace") if path.exists() else ""

    return Result(code, text(f"{i}.out"), text(f"{i}.err"))


class _Hung(BaseException):
    pass


def _hung(signum, frame):
    raise _Hung


def child() -> None:
    """The child's loop: `python -c CHILD FOLDER START TIMEOUT` runs runs.json's cases from START,
    writing each one's stdout, stderr and exit status (the status last: its file means "ended")."""
    import io

    from llmcli.cli import main
    from llmcli.environment import Environment
    from tests.support.cli import fresh_hf_constants

    folder, start, timeout = Path(sys.argv[1]), int(sys.argv[2]), int(float(sys.argv[3]))
    runs = json.loads((folder / "runs.json").read_text(encoding="utf-8"))
    signal.signal(signal.SIGALRM, _hung)
    base, here = dict(os.environ), os.getcwd()
    for i in range(start, len(runs)):
        os.environ.clear()
        os.environ.update(base | runs[i]["vars"])  # click reads its completion variables from here
        fresh_hf_constants()  # and huggingface_hub its HF_*, as a fresh process would
        os.chdir(runs[i]["cwd"] or here)
        with open(folder / f"{i}.out", "wb") as out, open(folder / f"{i}.err", "wb") as err:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            env = Environment(
                vars=os.environ.copy(), stdin=io.StringIO(""), stdout=sys.stdout, stderr=sys.stderr
            )
            signal.alarm(timeout)
            try:
                main(runs[i]["argv"], env)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except _Hung:
                os._exit(124)  # the parent reads a missing status file and 124 as "no end in time"
            finally:
                signal.alarm(0)
                sys.stdout.flush()
                sys.stderr.flush()
        (folder / f"{i}.code").write_text(str(code), encoding="ascii")
