"""Pulls over the API from a hub that lies (tests/hub's loopback stand-in, declaring 1 MB): a body
without end is stopped at the declared size, a stall ends the pull at --timeout, a trickle is stopped
by SIGTERM within --grace, and a delete or copy waits for a pull no longer than --timeout. The
server keeps answering other clients all the while."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from llmcli.model_ref import EMBEDDED_NAME
from tests.hub.fake_hub import FakeHub, FakeRepo, one_file_repo
from tests.serve.server import HANG_GUARD_S, ServeProcess
from tests.serve.test_store_routes import hub_env

REPO = "llmcli-test/Lying-GGUF"
FILE = "Lying-Q4_K_M.gguf"
SIZE = 1_000_000
TIMEOUT_S, GRACE_S = 3, 2


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> FakeRepo:
    return one_file_repo(REPO, FILE, SIZE, tmp_path_factory.mktemp("lying"))


@pytest.fixture
def hub(repo: FakeRepo):
    with FakeHub([repo]) as fake:
        yield fake


def serve(root: Path, hub: FakeHub) -> ServeProcess:
    with pytest.MonkeyPatch.context() as mp:
        hub_env(mp, hub, root)
        return ServeProcess(root / "store", "--timeout", str(TIMEOUT_S), "--grace", str(GRACE_S), model=None)


@pytest.fixture
def server(tmp_path: Path, hub: FakeHub):
    srv = serve(tmp_path, hub)
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.stop()


def call(srv: ServeProcess, method: str, path: str, body: object) -> httpx.Response:
    return httpx.request(method, srv.url + path, json=body, timeout=HANG_GUARD_S)


def partials(root: Path) -> list[Path]:
    return sorted((root / "hf").rglob("*.incomplete"))


def still_serving(srv: ServeProcess) -> None:
    r = httpx.get(srv.url + "/api/tags", timeout=HANG_GUARD_S)
    assert r.status_code == 200 and EMBEDDED_NAME in r.text, r.text
    assert httpx.get(srv.url + "/health", timeout=HANG_GUARD_S).status_code == 200


def downloading(hub: FakeHub) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not hub.requests("GET", "/cdn/"):
        assert time.monotonic() < deadline, "the pull never reached the file"
        time.sleep(0.05)
    time.sleep(0.3)  # a few bytes in


@pytest.mark.parametrize("name", [REPO, f"{REPO}:latest"])
def test_a_body_without_end_is_a_500_at_the_declared_size(server, hub, tmp_path, name) -> None:
    """`REPO:latest` is REPO (Ollama's tag), not a quant named latest."""
    hub.faults.endless = True
    r = call(server, "POST", "/api/pull", {"model": name, "stream": False})
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert f"the hub sent more than the 1.0 MB it declared for {FILE}" in error and "removed" in error
    assert partials(tmp_path) == []
    still_serving(server)


def test_a_body_announced_longer_is_refused_in_the_stream_as_its_last_line(server, hub, tmp_path) -> None:
    hub.faults.advertise = 5 * SIZE
    r = call(server, "POST", "/api/pull", {"model": REPO})
    assert r.status_code == 200  # the stream had begun
    last = json.loads(r.text.splitlines()[-1])
    assert last["error"].startswith(f"the hub announced 5.0 MB for {FILE}, which its listing declared"), last
    assert partials(tmp_path) == []
    still_serving(server)


def test_a_stall_ends_the_pull_at_the_timeout_and_keeps_the_bytes(server, hub, tmp_path) -> None:
    hub.faults.stall_after = 300_000
    t0 = time.monotonic()
    r = call(server, "POST", "/api/pull", {"model": REPO, "stream": False})
    assert r.status_code == 500, r.text
    assert f"the hub sent no byte of {FILE} for {TIMEOUT_S} s" in r.json()["error"]
    assert time.monotonic() - t0 < HANG_GUARD_S
    assert [p.stat().st_size for p in partials(tmp_path)] == [300_000]  # for a resume
    # The change lock was let go: a copy goes through at once.
    r = call(server, "POST", "/api/copy", {"source": EMBEDDED_NAME, "destination": "after"})
    assert r.status_code == 200, r.text
    still_serving(server)


def test_delete_copy_and_pull_wait_for_a_trickling_pull_only_until_the_timeout(server, hub) -> None:
    assert (
        call(server, "POST", "/api/copy", {"source": EMBEDDED_NAME, "destination": "mine"}).status_code == 200
    )
    hub.faults.trickle_s = 0.2
    pulling = threading.Thread(target=call, args=(server, "POST", "/api/pull", {"model": REPO}), daemon=True)
    pulling.start()
    downloading(hub)

    def timed(method: str, path: str, body: object) -> tuple[httpx.Response, float]:
        t0 = time.monotonic()
        return call(server, method, path, body), time.monotonic() - t0

    # The three wait side by side (each on its own clock), so the test waits one timeout, not three.
    with ThreadPoolExecutor(3) as pool:
        waits = [
            pool.submit(timed, method, path, body)
            for method, path, body in (
                ("POST", "/api/copy", {"source": EMBEDDED_NAME, "destination": "other"}),
                ("DELETE", "/api/delete", {"model": "mine"}),
                ("POST", "/api/pull", {"model": f"{REPO}:Q8_0", "stream": False}),
            )
        ]
        still_serving(server)  # while they wait
        for wait in waits:
            r, took = wait.result()
            assert r.status_code == 409, r.text
            assert r.json()["error"].startswith(
                "another change to the store (a pull) ran through this server's"
            )
            assert r.headers["Retry-After"]
            assert TIMEOUT_S - 0.5 <= took < HANG_GUARD_S
    still_serving(server)
    assert server.stop() == 0
    pulling.join(HANG_GUARD_S)


@pytest.mark.parametrize("fault", ["trickle", "stall"])
def test_sigterm_stops_a_pull_within_the_grace_period(server, hub, tmp_path, fault) -> None:
    if fault == "trickle":
        hub.faults.trickle_s = 0.2
    else:
        hub.faults.stall_after = 300_000
    answers: list[httpx.Response] = []
    pulling = threading.Thread(
        target=lambda: answers.append(call(server, "POST", "/api/pull", {"model": REPO})), daemon=True
    )
    pulling.start()
    downloading(hub)
    t0 = time.monotonic()
    assert server.stop() == 0
    # Before, the trickle kept the process alive for as long as it trickled; a generous bound.
    assert time.monotonic() - t0 < GRACE_S + 20
    pulling.join(HANG_GUARD_S)
    assert answers and "the server is shutting down; pull again to resume" in answers[0].text
    assert partials(tmp_path), "the bytes fetched so far are kept"


def test_copy_to_name_latest_is_the_same_name(server) -> None:
    """Ollama lists `mine` as `mine:latest`: a copy to `mine:latest` replaces `mine`, never a second one."""
    assert (
        call(server, "POST", "/api/copy", {"source": EMBEDDED_NAME, "destination": "mine"}).status_code == 200
    )
    r = call(server, "POST", "/api/copy", {"source": EMBEDDED_NAME, "destination": "mine:latest"})
    assert r.status_code == 200, r.text
    names = [m["name"] for m in call(server, "GET", "/api/tags", None).json()["models"]]
    assert names.count("mine:latest") == 1, names
    r = call(server, "POST", "/api/copy", {"source": "mine", "destination": "mine:latest"})
    assert r.status_code == 400 and "source and destination are both 'mine'" in r.json()["error"], r.text
    r = call(server, "DELETE", "/api/delete", {"model": "mine:latest"})
    assert r.status_code == 200, r.text
    assert "mine:latest" not in [m["name"] for m in call(server, "GET", "/api/tags", None).json()["models"]]


def test_ps_lists_a_loaded_model_whose_file_is_gone(server, tmp_path, embedded_path) -> None:
    """After `llmcli rm` of a loaded model, /api/ps answered 500 and `llmcli ps` exited 1."""
    import shutil

    from llmcli.store import ModelEntry, Store
    from tests.support.cli import cli_process

    copy = tmp_path / "doomed.gguf"
    shutil.copyfile(embedded_path, copy)
    Store(server.home).register(ModelEntry(name="doomed", path=str(copy), files=[str(copy)], source="test"))
    ask = {
        "model": "doomed",
        "prompt": "Hi",
        "stream": False,
        "options": {"num_predict": 1},
        "keep_alive": "5m",
    }
    assert call(server, "POST", "/api/generate", ask).status_code == 200
    copy.unlink()
    r = call(server, "GET", "/api/ps", None)
    assert r.status_code == 200, r.text
    assert [m["name"] for m in r.json()["models"]] == ["doomed:latest"]
    result = cli_process("ps", "--endpoint", server.url, timeout=HANG_GUARD_S)
    assert result.exit_code == 0 and "doomed" in result.stdout, result.stderr
    still_serving(server)


def test_an_unexpected_pull_failure_says_what_it_was() -> None:
    """It said "see the server's log", and the log held nothing."""
    from llmcli.serve.library import pull_error

    error = pull_error(OSError("Consistency check failed:\nfile should be of size 1"))
    assert error.status == 500
    assert error.message == (
        "the pull failed (OSError: Consistency check failed: file should be of size 1); "
        "pull again to resume it"
    )
