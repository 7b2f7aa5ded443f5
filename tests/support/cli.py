"""The three ways tests drive llmcli, and the one result they give.

- `cli(...)`: in this process, through `main(argv, env)` with an Environment of StringIO streams
  (or one the test builds): fast, and what a command writes to its streams is asserted exactly.
- `cli_process(...)` / `spawn_cli(...)`: `python -m llmcli` as a child, as a script runs it: what
  really reaches the file descriptors, exit codes from the interpreter, signals. `cli_process` runs
  it to the end; `spawn_cli` hands back the running child (to interrupt or kill it). Arguments and
  input may be bytes (as a shell passes them); hooks set a file-size limit, hold root to file
  permissions, run in another folder or with a whole environment of the test's making.
- `cli_pty(...)`: the child on a pseudo-terminal (pexpect), as a person at a terminal runs it.

`vars` is added to the test's os.environ (which tests/conftest.py points at a private store); a
variable given as None is removed.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmcli.environment import Environment

LLMCLI = [sys.executable, "-m", "llmcli"]
REPL_PROMPT = ">>>"  # prompt_toolkit draws ">>> " as ">>>" and a cursor move


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


class Hung(BaseException):
    """An in-process run went past its time limit (a BaseException: llmcli's `except Exception`
    boundary cannot turn it into an exit code)."""


def environment_vars(vars: Mapping[str, str | None] | None = None) -> dict[str, str]:
    merged: dict[str, str | None] = {**os.environ, **(vars or {})}
    return {name: value for name, value in merged.items() if value is not None}


def fresh_hf_constants() -> None:
    """huggingface_hub reads HF_* once, on import, as a fresh `llmcli` process does; tests that change the
    environment within this process have it read again (llmcli takes its hub settings from there)."""
    if "huggingface_hub.constants" in sys.modules:  # not yet imported: the import will read them
        import importlib

        importlib.reload(sys.modules["huggingface_hub.constants"])


# -- in this process ---------------------------------------------------------------------------------
def cli(
    *args: str,
    input: str = "",
    vars: Mapping[str, str | None] | None = None,
    env: Environment | None = None,
    time_limit: int | None = None,
) -> Result:
    """`llmcli ARGS` in this process, through its real error boundary, stdout and stderr captured apart.

    env: the Environment to run in (its stdout and stderr must be StringIO: the Result holds what they
    got); by default one of StringIO streams over os.environ and `vars`. time_limit: seconds before
    the run is stopped by raising Hung (a fuzzer's guard against a hang).
    """
    from llmcli.cli import main
    from llmcli.environment import Environment

    fresh_hf_constants()
    if env is None:
        env = Environment(
            vars=environment_vars(vars), stdin=io.StringIO(input), stdout=io.StringIO(), stderr=io.StringIO()
        )
    out, err = env.stdout, env.stderr
    assert isinstance(out, io.StringIO) and isinstance(err, io.StringIO), "cli() reads StringIO streams"
    outer = _time_limit_start(time_limit) if time_limit else None
    # click writes --help and its own messages to sys.stdout/sys.stderr, not to the Environment.
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main(list(args), env)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        if outer is not None:
            _time_limit_end(outer)
    return Result(code, out.getvalue(), err.getvalue())


# pytest-timeout's signal method (pyproject.toml) keeps the test's own timer on the same SIGALRM: a
# time limit here runs inside it, and gives it back with what it had left.
_OuterTimer = tuple[object, float, float]  # its handler, its seconds left, when it was taken


def _time_limit_start(seconds: int) -> _OuterTimer:
    previous = signal.signal(signal.SIGALRM, _hung)
    left, _ = signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_REAL, min(seconds, left) if left else seconds)
    return previous, left, time.monotonic()


def _time_limit_end(outer: _OuterTimer) -> None:
    previous, left, taken = outer
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)  # type: ignore[arg-type]
    if left:  # at least a moment: a timer due already fires at once
        signal.setitimer(signal.ITIMER_REAL, max(left - (time.monotonic() - taken), 0.001))


def _hung(signum, frame):
    raise Hung


# -- a child process ---------------------------------------------------------------------------------
def _decode(data: bytes | None) -> str:
    return (data or b"").decode("utf-8", "replace")


class CliProcess(subprocess.Popen):
    """A running `python -m llmcli` with byte pipes; `result` decodes what it wrote."""

    def result(self, input: str | bytes | None = None, timeout: float = 120) -> Result:
        data = input.encode("utf-8") if isinstance(input, str) else input
        try:
            stdout, stderr = self.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.communicate()
            raise
        return Result(self.returncode, _decode(stdout), _decode(stderr))


def _child_setup(file_size_limit: int | None, unprivileged: bool) -> Callable[[], None]:
    """What the child does between fork and exec."""

    def setup() -> None:
        # A child started from a background job inherits SIGINT ignored; the Ctrl-C tests need it back.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if file_size_limit is not None:
            import resource

            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))
        if unprivileged and os.geteuid() == 0:
            drop_permission_override()

    return setup


# Linux capabilities that let root read, write and search whatever the permission bits say.
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
PR_CAPBSET_DROP = 24


def drop_permission_override() -> None:
    """Hold this process (root) to file permissions from its next exec on: the two capabilities that
    override them leave the bounding set, so the exec'd program never gets them back. Needs
    CAP_SETPCAP, which root has; raises OSError otherwise (a test that needs this fails, never skips)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"prctl(PR_CAPBSET_DROP, {cap}): {os.strerror(errno)}")


def spawn_cli(
    *args: str | bytes,
    vars: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    cwd: str | Path | None = None,
    file_size_limit: int | None = None,
    unprivileged: bool = False,
) -> CliProcess:
    """Start `python -m llmcli ARGS` with stdout and stderr piped apart.

    env: the child's whole environment (instead of os.environ and `vars`). file_size_limit: RLIMIT_FSIZE
    in bytes, as on a full disk (a write past it fails with EFBIG). unprivileged: even as root, the
    child is held to file permissions (as a normal user is).
    """
    argv = [os.fsencode(a) if isinstance(a, str) else a for a in (*LLMCLI, *args)]
    return CliProcess(
        argv,
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else environment_vars(vars),
        cwd=cwd,
        preexec_fn=_child_setup(file_size_limit, unprivileged),
    )


def cli_process(
    *args: str | bytes,
    input: str | bytes | None = None,
    vars: Mapping[str, str | None] | None = None,
    timeout: float = 120,
    **hooks,
) -> Result:
    """Run `python -m llmcli ARGS` to its end as a script would (stdin inherited unless `input` is given).
    `hooks`: spawn_cli's env, cwd, file_size_limit and unprivileged. Raises TimeoutExpired after
    `timeout` seconds (the child is killed)."""
    child = spawn_cli(*args, vars=vars, stdin=subprocess.PIPE if input is not None else None, **hooks)
    return child.result(input, timeout)


# -- a pseudo-terminal -------------------------------------------------------------------------------
def cli_pty(
    *args: str, vars: Mapping[str, str | None] | None = None, timeout: float = 60, columns: int = 120
):
    """`python -m llmcli ARGS` on a 40-line pseudo-terminal (a pexpect child), as a person would start it."""
    from tests.support.deps import require

    pexpect = require("pexpect")
    terminal = {"TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1", "COLUMNS": str(columns), "LINES": "40"}
    return pexpect.spawn(
        sys.executable,
        [*LLMCLI[1:], *args],
        env=environment_vars({**terminal, **(vars or {})}),
        encoding="utf-8",
        timeout=timeout,
        dimensions=(40, columns),
        preexec_fn=_child_setup(None, False),
    )


def cli_store():
    """The store `llmcli` would use with the test's variables (tests/conftest.py makes it private)."""
    from llmcli.environment import Environment
    from llmcli.store import Store

    return Store(Environment(vars=environment_vars()).store_root)
