"""A `python -m llmcli` child under an address-space limit and a timeout, and how a fuzz case ended.

A regression (an unbounded read, a KV cache allocated whole, llama.cpp's parser overflowing its
stack) then fails one case instead of taking the machine down.
"""

from __future__ import annotations

import resource
import signal
import subprocess

from tests.support.cli import LLMCLI, Result, environment_vars

MEMORY = 4 << 30  # bytes of address space a child may take: far below what the old failures used
NO_MODEL = "/nonexistent/model.gguf"  # a check that runs before the model is looked up ends first
PASSED = f"no such file: {NO_MODEL}"  # every check before the model passed


def run_bounded(*args: str, stdin=None, input: str | None = None, timeout: float = 90) -> Result:
    def confine() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    done = subprocess.run(
        [*LLMCLI, *args],
        stdin=stdin,
        input=input,
        capture_output=True,
        text=True,
        errors="replace",
        env=environment_vars(),
        preexec_fn=confine,
        timeout=timeout,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def outcome(result: Result, *, forbidden: tuple[str, ...] = ()) -> tuple[str, str]:
    """('ok' | 'error' | 'failure', what happened) for a child run against NO_MODEL: 'ok' when
    the input passed every check and the missing model ended the run."""
    err = result.stderr
    lines = err.strip().splitlines()
    problems = []
    if not 0 <= result.exit_code < 128:
        problems.append(f"exit {result.exit_code}")
    if "Traceback" in err or "internal error" in err:
        problems.append("a traceback or an internal error")
    if len(lines) != 1 or not lines[0].startswith("llmcli: error: "):
        problems.append(f"{len(lines)} stderr lines")
    elif result.exit_code != 2:
        problems.append(f"exit {result.exit_code} for a usage error")
    problems += [f"says {word!r}" for word in forbidden if word in err and PASSED not in err]
    if problems:
        return "failure", f"{'; '.join(problems)}: {err.strip()[:300]!r}"
    return ("ok" if PASSED in err else "error"), lines[0]
