"""The store over the API, driven by the official `ollama` package and the `openai` SDK: `llmcli serve`
with no MODEL lists the store (/api/tags, /v1/models), describes any model from its GGUF header
(/api/show), pulls from a hub with Ollama's NDJSON progress (the loopback stand-in of tests/hub),
deletes and copies; unknown and hostile names are 404s that touch no file; a lying hub is refused;
keys and --read-only guard the changes."""

from __future__ import annotations

import json
import re
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from llmcli.model_ref import EMBEDDED_NAME
from llmcli.store import ModelEntry, Store
from tests.hub import conftest as hub_fixtures
from tests.hub.conftest import GGUF_REPO, HUGE_REPO
from tests.hub.fake_hub import FakeHub, hostile
from tests.serve.server import AUTH, KEY, ServeProcess
from tests.support.cli import cli

Q8 = f"{GGUF_REPO}:Q8_0"  # pulled by the streamed test only: its progress is a download's
Q4 = f"{GGUF_REPO}:Q4_K_M"  # pulled by the tests that need a pulled model (the first one downloads)
NOT_FOUND = "not found, try pulling it first"
# The hub tests' GGUF quants of the embedded model and their repos (made once per run).
fixtures, repos = hub_fixtures.fixtures, hub_fixtures.repos


@pytest.fixture(scope="module")
def hub(repos) -> FakeHub:
    with FakeHub(repos) as fake:
        yield fake


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("store-routes")


def hub_env(mp: pytest.MonkeyPatch, hub: FakeHub, root: Path) -> None:
    """What the server process inherits: the loopback hub, and an HF cache of its own."""
    mp.setenv("HF_ENDPOINT", hub.url)
    mp.setenv("HF_HOME", str(root / "hf"))
    mp.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE"):
        mp.delenv(var, raising=False)


@pytest.fixture(scope="module")
def store_server(root: Path, hub: FakeHub, embedded_path):
    with pytest.MonkeyPatch.context() as mp:
        hub_env(mp, hub, root)
        srv = ServeProcess(root / "store", "--api-key", KEY, model=None)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def client(store_server, ollama_module):
    return ollama_module.Client(host=store_server.url, headers=AUTH)


@pytest.fixture(scope="module")
def openai_client(store_server, openai_module):
    return openai_module.OpenAI(base_url=store_server.url + "/v1", api_key=KEY)


def post(server, path: str, body: object, method: str = "POST") -> httpx.Response:
    return httpx.request(method, server.url + path, json=body, headers=AUTH, timeout=120)


def listed(client) -> list[str]:
    return [m.model for m in client.list().models]


def pulled(client, name: str = Q4) -> str:
    """`name` pulled (a no-op once it is up to date): its store name."""
    assert client.pull(name).status == "success"
    return name


def sha256_of(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- listing and describing -------------------------------------------------------------------------
def test_the_store_is_listed_by_both_apis_without_loading_a_model(client, openai_client) -> None:
    assert f"{EMBEDDED_NAME}:latest" in listed(client)
    assert EMBEDDED_NAME in [m.id for m in openai_client.models.list().data]
    assert openai_client.models.retrieve(f"{EMBEDDED_NAME}:latest").id == EMBEDDED_NAME


def test_pull_streams_progress_then_the_model_is_listed(client, openai_client, fixtures) -> None:
    records = list(client.pull(Q8, stream=True))
    statuses = [r.status for r in records]
    assert statuses[0] == "pulling manifest" and statuses[-1] == "success", statuses
    q8 = fixtures.quants["Q8_0"]
    digest = f"sha256:{sha256_of(q8)}"
    progress = [r for r in records if r.digest == digest]
    assert progress and {r.status for r in progress} >= {f"pulling {digest[7:19]}"}, statuses
    assert all(r.total == q8.stat().st_size for r in progress if r.total is not None)
    completed = [r.completed for r in progress if r.completed is not None]
    assert completed == sorted(completed) and completed[-1] == q8.stat().st_size
    assert "verifying sha256 digest" in statuses
    assert Q8 in listed(client)
    assert Q8 in [m.id for m in openai_client.models.list().data]
    assert openai_client.models.retrieve(Q8).id == Q8


def test_pull_without_stream_answers_one_object_and_show_reads_the_file(
    store_server, client, fixtures
) -> None:
    from llmcli.gguf_check import model_facts

    r = post(store_server, "/api/pull", {"model": Q4, "stream": False})
    assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
    shown = client.show(Q4)  # never loaded: read from the GGUF's header
    facts = model_facts(fixtures.quants["Q4_K_M"])
    assert shown.template == facts.chat_template and shown.template
    assert shown.details.family == "llama" and shown.details.quantization_level == "Q4_K_M"
    assert shown.modelinfo["general.parameter_count"] == facts.n_params
    # by REPO without the quant, hf.co/, or in lower case: the same model
    assert client.show(f"hf.co/{Q4}").details.quantization_level == "Q4_K_M"
    assert client.show(Q4.lower()).details.quantization_level == "Q4_K_M"


def test_copy_names_the_same_file_and_delete_removes_one_name(store_server, client) -> None:
    name = pulled(client)
    assert client.copy(name, "mine:v1").status == "success"
    assert {name, "mine:v1"} <= set(listed(client))
    assert client.show("mine:v1").details.quantization_level == "Q4_K_M"
    assert client.delete(name).status == "success"
    names = listed(client)
    assert name not in names and "mine:v1" in names
    assert client.show("mine:v1").template  # the copy's file stayed
    assert client.delete("mine:v1").status == "success"
    assert "mine:v1" not in listed(client)
    r = post(store_server, "/api/delete", {"model": "mine:v1"}, "DELETE")
    assert r.status_code == 404 and r.json() == {"error": f"model 'mine:v1' {NOT_FOUND}"}


def test_a_pulled_model_chats_and_delete_unloads_it_first(store_server, client) -> None:
    name = pulled(client)
    reply = client.chat(model=name, messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4})
    assert reply.message.content and reply.done
    assert name in [m.model for m in client.ps().models]
    ps = cli("ps", "--endpoint", store_server.url, vars={"LLMCLI_API_KEY": KEY})
    assert ps.exit_code == 0 and re.search(
        rf"^{re.escape(name)}\s+\w+\s+\S+ \S?B\s+100% CPU\s+\S+\s+\d+ minutes? from now$", ps.stdout, re.M
    ), ps.stdout
    assert client.delete(name).status == "success"
    assert name not in [m.model for m in client.ps().models] and name not in listed(client)
    r = post(store_server, "/api/chat", {"model": name, "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 404 and r.json() == {"error": f"model '{name}' {NOT_FOUND}"}


def test_delete_takes_the_whole_name_never_a_prefix(store_server, client) -> None:
    pulled(client)
    r = post(store_server, "/api/delete", {"model": GGUF_REPO[:12]}, "DELETE")
    assert r.status_code == 404 and NOT_FOUND in r.json()["error"]
    assert Q4 in listed(client)


@pytest.mark.parametrize(
    ("path", "body", "method", "status", "says"),
    [
        ("/api/delete", {"model": EMBEDDED_NAME}, "DELETE", 400, "is the embedded model and belongs to pip"),
        ("/api/delete", {}, "DELETE", 400, "model must be a string naming the model"),
        ("/api/delete", {"model": "x"}, "POST", 405, "Method Not Allowed"),
        ("/api/copy", {"source": "nope", "destination": "b"}, "POST", 404, f"model 'nope' {NOT_FOUND}"),
        ("/api/copy", {"source": EMBEDDED_NAME}, "POST", 400, "destination must be a string naming a model"),
        ("/api/copy", {"source": EMBEDDED_NAME, "destination": "../x"}, "POST", 400, "bad model name '../x'"),
        ("/api/copy", {"source": EMBEDDED_NAME, "destination": "a.gguf"}, "POST", 400, "drop .gguf"),
        (
            "/api/copy",
            {"source": "mine", "destination": EMBEDDED_NAME},
            "POST",
            404,
            f"model 'mine' {NOT_FOUND}",
        ),
        ("/api/copy", {"source": EMBEDDED_NAME, "destination": EMBEDDED_NAME}, "POST", 400, "embedded"),
        ("/api/show", {"model": "nope:7b"}, "POST", 404, f"model 'nope:7b' {NOT_FOUND}"),
        ("/api/pull", {}, "POST", 400, "model must be a string naming the model"),
        ("/api/pull", {"model": "qwen2.5:0.5b"}, "POST", 400, "is not a Hugging Face repo; give OWNER/NAME"),
        ("/api/pull", {"model": Q4, "stream": "yes"}, "POST", 400, "stream"),
        ("/api/pull", {"model": "llmcli-test/Nope-GGUF", "stream": False}, "POST", 404, "Nope-GGUF"),
    ],
)
def test_a_bad_request_is_refused_with_its_reason(store_server, path, body, method, status, says) -> None:
    r = post(store_server, path, body, method)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert says in error, error


def test_an_unknown_model_is_a_404_in_each_apis_shape(
    client, openai_client, ollama_module, openai_module
) -> None:
    with pytest.raises(ollama_module.ResponseError) as caught:
        client.show("qwen2.5:0.5b")
    assert caught.value.status_code == 404 and caught.value.error == f"model 'qwen2.5:0.5b' {NOT_FOUND}"
    with pytest.raises(openai_module.NotFoundError) as missing:
        openai_client.models.retrieve("gpt-4o")
    assert missing.value.code == "model_not_found" and NOT_FOUND in missing.value.message


# -- hostile names ------------------------------------------------------------------------------------
HOSTILE = [
    "../manifest.json",
    "../../etc/passwd",
    "/etc/passwd",
    "{victim}",
    "{store}/manifest.json",
    f"{EMBEDDED_NAME}\x00",
    "\x00",
    "a" * 10_000,
    "ｓｍｏｌｌｍ２-135m-instruct",  # fullwidth
    "smоllm2-135m-instruct",  # a Cyrillic о
    f"{EMBEDDED_NAME}/..",
    "C:\\Windows\\win.ini",
]


@pytest.mark.parametrize("name", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_name_is_a_404_and_touches_nothing(store_server, root, embedded_path, name) -> None:
    victim = root / "victim" / "victim.gguf"  # a real GGUF outside the store: never read, copied or deleted
    victim.parent.mkdir(exist_ok=True)
    if not victim.exists():
        shutil.copy(embedded_path, victim)
    name = name.replace("{victim}", str(victim)).replace("{store}", str(root / "store"))
    before = sorted((root / "store").rglob("*"))
    for path, body, method in (
        ("/api/show", {"model": name}, "POST"),
        ("/api/delete", {"model": name}, "DELETE"),
        ("/api/copy", {"source": name, "destination": "stolen"}, "POST"),
        ("/api/chat", {"model": name, "messages": [{"role": "user", "content": "Hi"}]}, "POST"),
        ("/api/generate", {"model": name, "prompt": "Hi"}, "POST"),
    ):
        r = post(store_server, path, body, method)
        assert r.status_code == 404, (path, r.text)
        error = r.json()["error"]
        assert error.startswith("model '") and error.endswith(NOT_FOUND) and len(error) < 300, error
        assert "\x00" not in error
    chat = post(
        store_server, "/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "Hi"}]}
    )
    assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found", chat.text
    r = httpx.get(f"{store_server.url}/v1/models/{quote(name, safe='')}", headers=AUTH, timeout=30)
    assert r.status_code in (404, 414), r.text
    if r.status_code == 404:
        assert r.json()["error"]["code"] == "model_not_found"
    assert victim.exists() and sha256_of(victim) == sha256_of(Path(embedded_path))
    assert sorted((root / "store").rglob("*")) == before
    assert "stolen" not in r.text


# -- a hub that lies --------------------------------------------------------------------------------
@pytest.mark.parametrize("size", ["big", -1, 1.5])
def test_a_hub_that_lies_about_sizes_is_refused(store_server, client, hub, ollama_module, size) -> None:
    honest = hub.repos[GGUF_REPO.lower()]
    hub.add(hostile(honest, sizes={"README.md": size}))
    try:
        with pytest.raises(ollama_module.ResponseError) as caught:
            list(client.pull(f"{GGUF_REPO}:Q8_0", stream=True))
        assert (
            f"for {GGUF_REPO}" in caught.value.error
            and "is HF_ENDPOINT a Hugging Face hub" in caught.value.error
        )
        r = post(store_server, "/api/pull", {"model": f"{GGUF_REPO}:Q8_0", "stream": False})
        assert r.status_code == 500 and "is HF_ENDPOINT a Hugging Face hub" in r.json()["error"], r.text
    finally:
        hub.add(honest)


def test_a_hub_that_claims_a_petabyte_is_refused_before_a_byte(store_server, client, hub) -> None:
    r = post(store_server, "/api/pull", {"model": HUGE_REPO})
    lines = [json.loads(line) for line in r.text.splitlines()]
    assert r.status_code == 200 and lines[0] == {"status": "pulling manifest"}, r.text
    assert lines[-1]["error"].startswith("this pull needs 1000000.0 GB free under "), lines
    assert not hub.requests("GET", "Huge-Q4_K_M.gguf")
    assert not any("Huge" in name for name in listed(client))


# -- who may change the store -----------------------------------------------------------------------
CHANGES = [
    ("/api/pull", {"model": Q4}, "POST"),
    ("/api/delete", {"model": Q4}, "DELETE"),
    ("/api/copy", {"source": EMBEDDED_NAME, "destination": "x"}, "POST"),
]


@pytest.mark.parametrize(("path", "body", "method"), CHANGES)
def test_a_change_without_the_key_is_a_401(store_server, path, body, method) -> None:
    r = httpx.request(method, store_server.url + path, json=body, timeout=30)
    assert r.status_code == 401 and "error" in r.json(), r.text


@pytest.fixture(scope="module")
def read_only(root: Path, hub: FakeHub, embedded_path):
    with pytest.MonkeyPatch.context() as mp:
        hub_env(mp, hub, root)
        srv = ServeProcess(
            root / "store", "--read-only", model=None
        )  # the same store, with a copy made in it
    yield srv
    assert srv.stop() == 0


def test_read_only_refuses_every_change_and_still_lists(read_only) -> None:
    for path, body, method in CHANGES:
        r = httpx.request(method, read_only.url + path, json=body, timeout=30)
        assert r.status_code == 403, r.text
        assert r.json()["error"] == (
            "this server runs with --read-only and does not pull, delete or copy models; "
            "restart it without --read-only to change the store"
        )
    assert httpx.get(read_only.url + "/api/tags", timeout=30).status_code == 200


def test_one_model_mode_answers_changes_with_how_to_serve_the_store(embedded_path) -> None:
    """In process (no load is needed): `llmcli serve MODEL` serves that model, not the store."""
    from starlette.testclient import TestClient

    from llmcli.serve.app import create_app
    from llmcli.serve.catalog import Catalog, Served
    from llmcli.serve.config import ServeConfig
    from llmcli.serve.state import Server

    config = ServeConfig(model_name=EMBEDDED_NAME)
    server = Server.make(config, Catalog(one=Served(EMBEDDED_NAME, Path(embedded_path))))
    client = TestClient(create_app(server))  # no `with`: nothing loads
    for path, body, method in CHANGES:
        r = client.request(method, path, json=body)
        assert r.status_code == 400, r.text
        assert "start `llmcli serve` with no MODEL" in r.json()["error"]


# -- a stopping server ------------------------------------------------------------------------------
def test_sigterm_stops_a_pull_midway_and_the_server_exits(tmp_path: Path, repos, ollama_module) -> None:
    """The pull's thread stops at its next chunk (the bytes so far stay, for a later pull to resume)
    instead of keeping the process alive until the download ends."""
    with FakeHub(repos) as slow, pytest.MonkeyPatch.context() as mp:
        # The Q8_0 file takes about 20 s, and huggingface_hub reports (so the pull can stop) every 10 MB:
        # under 2 s a chunk, with room to stop long before the end.
        slow.faults.throttle_bps = 6_000_000
        hub_env(mp, slow, tmp_path)
        srv = ServeProcess(tmp_path / "store", model=None)
        records = ollama_module.Client(host=srv.url).pull(Q8, stream=True)
        assert any(r.completed for r in records)  # bytes are arriving
        assert srv.stop() == 0
        with pytest.raises(ollama_module.ResponseError) as caught:
            list(records)
    assert caught.value.error.startswith("the server is shutting down; pull again to resume")
    assert list((tmp_path / "hf").rglob("*.incomplete")), "the bytes fetched so far are kept"
    manifest = tmp_path / "store" / "manifest.json"
    assert not manifest.exists() or Q8 not in manifest.read_text()


def test_a_broken_manifest_is_a_500_with_the_stores_own_line(tmp_path: Path, embedded_path) -> None:
    """In process: the routes that read the store say what is wrong with it, and how to fix it."""
    from starlette.testclient import TestClient

    from llmcli.serve.app import create_app
    from llmcli.serve.catalog import Catalog
    from llmcli.serve.config import ServeConfig
    from llmcli.serve.state import Server
    from llmcli.store import Store

    (tmp_path / "manifest.json").write_text("{not json")
    server = Server.make(ServeConfig(model_name=""), Catalog(store=Store(tmp_path)))
    client = TestClient(create_app(server))
    for method, path, body in (
        ("GET", "/api/tags", None),
        ("GET", "/v1/models", None),
        ("POST", "/api/show", {"model": EMBEDDED_NAME}),
        ("DELETE", "/api/delete", {"model": "x"}),
    ):
        r = client.request(method, path, json=body)
        assert r.status_code == 500, (path, r.text)
        error = r.json()["error"]
        message = error if path.startswith("/api/") else error["message"]
        assert "manifest.json is unreadable" in message and "move it away to start afresh" in message


def test_a_request_while_a_delete_waits_is_a_404_and_never_loads_the_model_again(
    store_server, client, embedded_path
) -> None:
    """The delete waits for the model's running reply; a request that comes meanwhile is refused. (It
    used to wait for the unload, then load the model once more, left loaded after its removal.)"""
    Store(store_server.home).register(
        ModelEntry(name="doomed", path=embedded_path, files=[embedded_path], source="test")
    )
    ask = {"model": "doomed", "messages": [{"role": "user", "content": "Count to a thousand."}]}

    def loaded() -> list[str]:
        return [m.model.removesuffix(":latest") for m in client.ps().models]

    with (
        httpx.Client(timeout=120) as http,
        http.stream(
            "POST",
            store_server.url + "/api/chat",
            json={**ask, "options": {"num_predict": 500}},  # long: the delete comes while it runs
            headers=AUTH,
        ) as running,
        ThreadPoolExecutor(1) as pool,
    ):
        lines = running.iter_lines()
        assert json.loads(next(lines))["message"]  # the reply is decoding: the model is leased
        deleting = pool.submit(post, store_server, "/api/delete", {"model": "doomed"}, "DELETE")
        deadline = time.monotonic() + 60
        while "doomed" in loaded():  # gone from /api/ps once the delete has begun to unload it
            assert time.monotonic() < deadline
            time.sleep(0.05)
        r = post(store_server, "/api/chat", {**ask, "options": {"num_predict": 2}})
        assert r.status_code == 404 and r.json() == {"error": f"model 'doomed' {NOT_FOUND}"}
        # The delete waited for the running reply: the reply ends whole, not cut off by the unload.
        # (Whether the delete is still pending at this line is the machine's speed: not asserted.)
        last = json.loads(list(lines)[-1])
        assert last["done"] and last.get("done_reason") in ("stop", "length") and "error" not in last, last
        assert deleting.result().status_code == 200
    assert "doomed" not in loaded()
    assert not any(name.removesuffix(":latest") == "doomed" for name in listed(client))
