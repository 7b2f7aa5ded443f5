"""The three ways tests drive llmcli, and the one result they give.

- `cli(...)`: in this process, through `main(argv, env)` with an Environment of StringIO streams
  and a dict of variables: fast, and what a command writes to its streams is asserted exactly.
- `cli_process(...)` / `spawn_cli(...)`: `python -m llmcli` as a child, as a script runs it: what
  really reaches the file descriptors, exit codes from the interpreter, signals. `cli_process` runs
  it to the end; `spawn_cli` hands back the running child (to interrupt or kill it).
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
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass

LLMCLI = [sys.executable, "-m", "llmcli"]
REPL_PROMPT = ">>>"  # prompt_toolkit draws ">>> " as ">>>" and a cursor move


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


def environment_vars(vars: Mapping[str, str | None] | None = None) -> dict[str, str]:
    merged: dict[str, str | None] = {**os.environ, **(vars or {})}
    return {name: value for name, value in merged.items() if value is not None}


def fresh_hf_constants() -> None:
    """huggingface_hub reads HF_* once, on import, as a fresh `llmcli` process does; tests that change the
    environment within this process have it read again (llmcli takes its hub settings from there)."""
    if "huggingface_hub.constants" in sys.modules:  # not yet imported: the import will read them
        import importlib

        importlib.reload(sys.modules["huggingface_hub.constants"])


def cli(*args: str, input: str = "", vars: Mapping[str, str | None] | None = None) -> Result:
    """`llmcli ARGS` in this process, through its real error boundary, stdout and stderr captured apart."""
    from llmcli.cli import main
    from llmcli.environment import Environment

    fresh_hf_constants()
    out, err = io.StringIO(), io.StringIO()
    env = Environment(vars=environment_vars(vars), stdin=io.StringIO(input), stdout=out, stderr=err)
    # click writes --help and its own messages to sys.stdout/sys.stderr, not to the Environment.
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args), env)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return Result(code, out.getvalue(), err.getvalue())


def _default_sigint() -> None:
    # A child started from a background job inherits SIGINT ignored; the Ctrl-C tests need it back.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class CliProcess(subprocess.Popen):
    """A running `python -m llmcli` with text pipes."""

    def result(self, input: str | None = None, timeout: float = 120) -> Result:
        try:
            stdout, stderr = self.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.communicate()
            raise
        return Result(self.returncode, stdout, stderr)


def spawn_cli(
    *args: str, vars: Mapping[str, str | None] | None = None, stdin: int | None = None
) -> CliProcess:
    """Start `python -m llmcli ARGS` with stdout and stderr piped apart."""
    return CliProcess(
        [*LLMCLI, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",
        env=environment_vars(vars),
        preexec_fn=_default_sigint,
    )


def cli_process(
    *args: str, input: str | None = None, vars: Mapping[str, str | None] | None = None, timeout: float = 120
) -> Result:
    """Run `python -m llmcli ARGS` to its end as a script would (stdin inherited unless `input` is given)."""
    child = spawn_cli(*args, vars=vars, stdin=subprocess.PIPE if input is not None else None)
    return child.result(input, timeout)


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
        preexec_fn=_default_sigint,
    )


def cli_store():
    """The store `llmcli` would use with the test's variables (tests/conftest.py makes it private)."""
    from llmcli.environment import Environment
    from llmcli.store import Store

    return Store(Environment(vars=environment_vars()).store_root)
