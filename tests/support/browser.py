"""A real browser for the chat page's tests: Debian's chromium, driven by Playwright.

`playwright install` downloads its browsers from a CDN these machines cannot reach, so the tests
launch the system's chromium by path. `make test` installs it when missing (Makefile `browser`);
so does this, once per machine, for a pytest run started by hand as root on apt. Otherwise the
browser is a missing dependency: skipped, or failed in strict mode (tests/support/deps.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.support.deps import unavailable
from tests.support.locks import cache_lock

NAMES = ("chromium", "chromium-browser")
INSTALL_TIMEOUT_S = 900  # apt-get update + the package and its libraries on a slow mirror


def _found() -> str | None:
    return next((path for name in NAMES if (path := shutil.which(name)) is not None), None)


def chromium() -> str:
    """The chromium executable's path, installed with apt-get first if it is missing and we may."""
    path = _found()
    if path is not None:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise unavailable("no chromium for the chat page's tests: apt-get install chromium (as root)")
    with cache_lock(Path(tempfile.gettempdir()), ".llmcli-chromium.lock"):  # one worker installs
        if (path := _found()) is None:
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            for step in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"]):
                done = subprocess.run(
                    step, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
                )
                if done.returncode != 0:
                    raise unavailable(f"{' '.join(step)} failed: {done.stderr.strip()[-300:]}")
            path = _found()
    if path is None:
        raise unavailable("apt-get installed chromium, but no chromium is on PATH")
    return path
