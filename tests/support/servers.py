"""One way to start a server for a test or a benchmark: a child process on 127.0.0.1, ready once a GET
of its ready path answers 200, stopped with SIGTERM (then SIGKILL). Output goes to a log file (a full
pipe would stall a chatty server such as llama-server), whose tail a failure shows.

- tests/serve/server.py's ServeProcess: `llmcli serve` on port 0 (it says which), its stderr read;
- tests/engine/openai/conftest.py: llama-cpp-python's real server (`llama_cpp_server`);
- benchmarks/serve_sides.py: llmcli, llama-server and llama-cpp-python side by side.

Standard library only: the benchmarks import it outside pytest.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

HOST = "127.0.0.1"


def free_port() -> int:
    """A port that was free a moment ago, for the benchmarks' servers that cannot bind port 0 and say
    which (llama-server). Another process may take it before the server binds it: tests use port 0
    (ServerProcess's port_line) or refused_port instead."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where a connection is refused, for as long as the block runs: bound and
    held, never listening, so no other process can take it meanwhile (a port looked up free and then
    let go could be)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        yield sock.getsockname()[1]


def die_with_parent(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A child's preexec_fn: the kernel kills the child (SIGKILL) when the process that started it
    dies (Linux's PR_SET_PDEATHSIG), so a server outlives no crashed or killed test worker (one was
    still listening 55 minutes after its worker died). `then`: another preexec_fn to run after.
    Where there is no prctl (macOS), the parent's `stop` is all there is."""
    parent = os.getpid()

    def setup() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before the line above: nobody will stop us
                os._exit(1)
        if then is not None:
            then()

    return setup


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ServerFailed(AssertionError):
    """The server exited, or never became ready; the message ends with its output's tail."""


def answers(url: str, path: str, headers: dict[str, str] | None = None, timeout: float = 2.0) -> int:
    """The status of GET url+path; 0 when nothing answers."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


class ServerProcess:
    """One server process; `with` starts it (and waits until it is ready) and stops it."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        port: int,
        ready_path: str,
        env: dict[str, str] | None = None,
        api_key: str | None = None,
        port_line: re.Pattern[str] | None = None,
    ) -> None:
        """port 0: the server binds a port of its own and says which in a line of its output that
        port_line matches (its group 1), so no other process can take the port between a look-up and
        the bind."""
        self.name, self.cmd, self.port, self.ready_path = name, cmd, port, ready_path
        self.env, self.api_key, self.port_line = env, api_key, port_line
        self.proc: subprocess.Popen | None = None
        self.log_path = ""

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def launch(self) -> subprocess.Popen:
        fd, self.log_path = tempfile.mkstemp(prefix=f"server-{self.name}-", suffix=".log")
        with os.fdopen(fd, "wb") as log:
            return subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                preexec_fn=die_with_parent(),
            )

    def output_tail(self) -> str:
        return Path(self.log_path).read_text(errors="replace")[-3000:] if self.log_path else ""

    def start(self, timeout: float) -> ServerProcess:
        self.proc = self.launch()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float) -> None:
        """Poll the ready path until it answers 200; ServerFailed if the process exits or time runs out
        (a hang guard, never a measure of speed)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise self.failed(f"exited with status {self.proc.returncode} before it was ready")
            if self.port == 0 and self.port_line is not None:
                found = self.port_line.search(self.output_tail())
                if found is None:
                    time.sleep(0.1)
                    continue
                self.port = int(found.group(1))
            if answers(self.url, self.ready_path, self.headers()) == 200:
                return
            time.sleep(0.1)
        self.stop()
        raise self.failed(f"was not ready after {timeout:.0f} s")

    def failed(self, what: str) -> ServerFailed:
        return ServerFailed(f"{self.name} {what}: {' '.join(self.cmd)}\n{self.output_tail()}")

    def stop(self, grace: float = 40.0) -> int | None:
        """SIGTERM (a server drains and exits), SIGKILL if it does not within `grace`; its status."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
        code = proc.wait()
        if self.log_path:
            Path(self.log_path).unlink(missing_ok=True)
        return code

    def __enter__(self) -> ServerProcess:
        return self.start(READY_TIMEOUT)

    def __exit__(self, *exc: object) -> None:
        self.stop()


READY_TIMEOUT = 300.0  # seconds: a model loading on a loaded machine; a hang guard


def llama_cpp_server(
    model: str,
    *,
    threads: int,
    ctx: int,
    api_key: str | None = None,
    alias: str | None = None,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ServerProcess:
    """`python -m llama_cpp.server` on a free port. Requests queue (interrupt_requests off): by default
    it ends a running stream early, with [DONE], as soon as another request waits."""
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--n_ctx", str(ctx)]
    cmd += ["--n_threads", str(threads), "--n_threads_batch", str(threads), "--interrupt_requests", "false"]
    cmd += ["--host", HOST, "--port", "0", *extra]  # uvicorn binds a free port and logs it
    if alias:
        cmd += ["--model_alias", alias]
    if api_key:
        cmd += ["--api_key", api_key]
    return ServerProcess("llama-cpp-python", cmd, 0, "/v1/models", env, api_key, UVICORN_PORT)


UVICORN_PORT = re.compile(r"Uvicorn running on http://[^\s:]+:(\d+)")
