"""`llmcli serve` as a real child process on 127.0.0.1 and a free port (port 0: the server says which)."""

from __future__ import annotations

import os
import re
import select
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from llmcli.model_ref import EMBEDDED_NAME
from tests.support.cli import LLMCLI
from tests.support.servers import ServerProcess, die_with_parent

# Few threads and a small pool: the tests ask for a handful of tokens and run beside other workers.
CTX = 1024  # KV cells, shared by every sequence (the denominator of /metrics' kv_cache_*_perc)
BASE = ("--port", "0", "-t", "1", "--ctx", str(CTX), "--temp", "0")
# The shared server's (tests/serve/conftest.py): its one key and its body cap.
KEY = "sk-test-main"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_BODY = 4096
ORIGIN = "http://app.example:5173"  # the one browser origin the shared server allows (--cors-origin)
# The deadline server's (tests/serve/conftest.py): short deadlines, so that a test sees them pass.
HEADER_TIMEOUT, TIMEOUT, MAX_CONNECTIONS = 2, 5, 16
DEADLINE_ARGS = (
    "--header-timeout", str(HEADER_TIMEOUT), "--timeout", str(TIMEOUT),
    "--max-connections", str(MAX_CONNECTIONS), "--max-body", str(MAX_BODY),
)  # fmt: skip
URL_LINE = re.compile(r"on (http://127\.0\.0\.1:\d+) ")
# How long a wait on the server (its start, a counter reaching a value, an in-process `serve` that
# should refuse at once) may take before the test fails as hung: several times what a loaded CI
# machine needs. Never a measure of speed.
HANG_GUARD_S = 60


def limit_open_files(n: int):
    """A child's preexec_fn: at most n open files (soft and hard: the server cannot raise it)."""

    def setup() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return setup


class ServeProcess(ServerProcess):
    """`llmcli serve` on port 0: its first stderr line says the address. stdout and stderr stay pipes
    (a test reads --json's line and the warnings); the rest of stderr is drained into stderr_lines."""

    def __init__(
        self,
        home: Path,
        *args: str,
        wait: bool = True,
        open_files: int | None = None,
        model: str | None = EMBEDDED_NAME,
        pass_fds: tuple[int, ...] = (),
    ) -> None:
        """MODEL: the first of `args` when it is not a flag, else `model` (None: the store's server)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLMCLI_")}
        env.update(LLMCLI_HOME=str(home))
        given = bool(args) and not args[0].startswith("-")
        first = [model] if model is not None and not given else []
        super().__init__("llmcli serve", [*LLMCLI, "serve", *first, *BASE, *args], 0, "/health", env)
        self.home, self.open_files, self.pass_fds = home, open_files, pass_fds
        self.stderr_lines: list[str] = []
        self.proc = self.launch()
        self._url = self._read_url()
        # The rest of stderr, drained so that the pipe never fills and blocks the server.
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()
        if wait:
            self.wait_ready()

    @property
    def url(self) -> str:
        return self._url

    def launch(self) -> subprocess.Popen:
        limit = self.open_files
        return subprocess.Popen(
            self.cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.env,
            preexec_fn=die_with_parent(limit_open_files(limit) if limit is not None else None),
            pass_fds=self.pass_fds,
        )

    def output_tail(self) -> str:
        return "\n".join(self.stderr_lines[-40:])

    def _read_url(self, timeout: float = HANG_GUARD_S) -> str:
        assert self.proc is not None and self.proc.stderr is not None
        end = time.monotonic() + timeout
        buf = b""
        while time.monotonic() < end:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.5)
            if ready:
                chunk = os.read(self.proc.stderr.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                if b"\n" in buf:
                    line, _, _ = buf.partition(b"\n")
                    self.stderr_lines.append(line.decode())
                    found = URL_LINE.search(line.decode())
                    assert found, f"unexpected first line from serve: {line!r}"
                    return found.group(1)
        raise AssertionError(f"serve printed no address: {buf!r}, exit {self.proc.poll()}")

    def _read_rest(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr_lines.append(line.decode("utf-8", "replace").rstrip("\n"))

    def wait_ready(self, timeout: float = HANG_GUARD_S) -> None:
        super().wait_ready(timeout)

    def metric(self, name: str, headers: dict | None = None, absent: float | None = None) -> float:
        """One series of /metrics (`name` with its labels, as the text shows it), summed over the
        labels it does not name (a `model_name` a series has beside them). A labelled series appears
        only once it has counted something: `absent` is its value until then."""
        text = httpx.get(self.url + "/metrics", headers=headers, timeout=10).text
        family, _, labels = name.partition("{")
        wanted = set(re.findall(r'\w+="[^"]*"', labels))
        found = [
            float(value)
            for have, value in re.findall(rf"^{re.escape(family)}(?:\{{(.*)\}})? (\S+)$", text, re.MULTILINE)
            if wanted <= set(re.findall(r'\w+="[^"]*"', have))
        ]
        if not found and absent is not None:
            return absent
        assert found, f"no {name} in /metrics"
        return sum(found)

    def metric_when(
        self,
        name: str,
        holds: Callable[[float], bool],
        headers: dict | None = None,
        absent: float | None = None,
    ) -> float:
        """The series' value once `holds(value)`, polling /metrics: the server's own count says when
        what a test waits for has happened. Its last value if HANG_GUARD_S passes first."""
        end = time.monotonic() + HANG_GUARD_S
        while not holds(value := self.metric(name, headers, absent)) and time.monotonic() < end:
            time.sleep(0.05)
        return value

    def running_after(self, headers: dict | None = None) -> float:
        """llmcli:num_requests_running once it is 0 (a cancel takes a step); its value past HANG_GUARD_S."""
        return self.metric_when("llmcli:num_requests_running", lambda running: running == 0, headers)

    def __enter__(self) -> ServeProcess:
        return self  # started when made (the base class's __enter__ would start a second one)

    def stop(self, grace: float = 60) -> int:
        proc = self.proc
        code = super().stop(grace)
        assert proc is not None and code is not None, "the server was stopped already"
        self.proc = proc  # kept: a test reads its exit status and its pipes after the stop
        self._drain.join(5)
        return code
