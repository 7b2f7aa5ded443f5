"""The test servers' own guarantees (tests/support/servers.py): a server dies with the process that
started it, and a refused port stays refused while it is held."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.servers import HOST, refused_port

ROOT = Path(__file__).resolve().parents[1]
# A parent that starts a long child as the test servers are started, says its pid, and dies at once,
# as a crashed pytest-xdist worker does.
PARENT = """
import os, signal, subprocess
from tests.support.servers import die_with_parent
child = subprocess.Popen(["sleep", "600"], preexec_fn=die_with_parent())
print(child.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie waiting for its new parent to reap it is dead


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_dies_with_the_process_that_started_it():
    done = subprocess.run(
        [sys.executable, "-c", PARENT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    pid = int(done.stdout.split()[0])
    deadline = time.monotonic() + 30  # a hang guard: the kernel kills it as the parent exits
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid)


def test_a_refused_port_refuses_while_it_is_held():
    with refused_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((HOST, port), timeout=5)
        with socket.socket() as other, pytest.raises(OSError):  # nobody else can take it meanwhile
            other.bind((HOST, port))
