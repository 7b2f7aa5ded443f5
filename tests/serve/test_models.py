"""`llmcli serve` with no MODEL: the store's models behind one server, each loaded on its first
request, kept for its keep_alive, evicted to fit --max-models; driven with the official clients."""

from __future__ import annotations

import statistics

import httpx
import pytest

from llmcli.model_ref import EMBEDDED_NAME
from llmcli.store import ModelEntry, Store
from tests.serve.server import AUTH, HANG_GUARD_S, KEY, ServeProcess
from tests.support.cli import cli

GEMMA = "gemma3-270m"
MODELS = (EMBEDDED_NAME, GEMMA)
HI = [{"role": "user", "content": "Name a colour."}]
TOKENS = 6


def store_home(tmp_path_factory, gemma3_path):
    """A store with the embedded model (always listed) and the Gemma 3 test GGUF."""
    home = tmp_path_factory.mktemp("serve-store")
    Store(home).register(ModelEntry(name=GEMMA, path=gemma3_path, files=[gemma3_path], source="test"))
    return home


@pytest.fixture(scope="module")
def store_server(tmp_path_factory, gemma3_path):
    srv = ServeProcess(store_home(tmp_path_factory, gemma3_path), "--api-key", KEY, model=None)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def one_model_server(tmp_path_factory, gemma3_path):
    """`--max-models 1`: a second model evicts the first, or waits while the first is in use."""
    with ServeProcess(store_home(tmp_path_factory, gemma3_path), "--max-models", "1", model=None) as srv:
        yield srv


@pytest.fixture(scope="module")
def ollama(store_server, ollama_module):
    return ollama_module.Client(host=store_server.url, headers=AUTH)


@pytest.fixture(scope="module")
def openai(store_server, openai_module):
    return openai_module.OpenAI(base_url=store_server.url + "/v1", api_key=KEY, max_retries=0)


def rss(pid: int) -> int:
    """Resident bytes of a process (Linux)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def replies(ollama, openai, model: str) -> dict[str, str]:
    """One model's replies to the same chat, four ways: each client, streamed and not."""
    options = {"num_predict": TOKENS}
    whole = ollama.chat(model=model, messages=HI, options=options)
    assert whole["model"] == f"{model}:latest" and whole["done_reason"] == "length"
    streamed = "".join(
        part["message"]["content"]
        for part in ollama.chat(model=model, messages=HI, options=options, stream=True)
    )
    chat = openai.chat.completions.create(model=model, messages=HI, max_tokens=TOKENS)
    assert chat.model == model
    chunks = openai.chat.completions.create(model=model, messages=HI, max_tokens=TOKENS, stream=True)
    sse = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    return {
        "ollama": whole["message"]["content"],
        "ollama stream": streamed,
        "openai": chat.choices[0].message.content or "",
        "openai stream": sse,
    }


def test_two_models_alternate_each_answering_as_itself(ollama, openai):
    """Greedy decoding: each model's reply is the same however it is asked and whenever, and the two
    models' replies differ (a request that reached the other model would show it)."""
    rounds = [{model: replies(ollama, openai, model) for model in MODELS} for _ in range(2)]
    for model in MODELS:
        seen = {text for each in rounds for text in each[model].values()}
        assert len(seen) == 1 and seen != {""}, (model, rounds)
    assert rounds[0][MODELS[0]]["ollama"] != rounds[0][MODELS[1]]["ollama"]


def test_ps_lists_both_models_then_one_after_keep_alive_0(ollama, store_server):
    for model in MODELS:
        ollama.generate(model=model, prompt="Hi", options={"num_predict": 1})
    loaded = ollama.ps()["models"]
    assert sorted(m["name"] for m in loaded) == sorted(f"{m}:latest" for m in MODELS)
    for each in loaded:
        assert each["size"] > 0 and each["size_vram"] == 0 and each["context_length"] > 0
        assert each["details"]["format"] == "gguf" and each["expires_at"] is not None
    unloads = store_server.metric("llmcli:model_unloads_total", AUTH, absent=0)
    assert ollama.generate(model=GEMMA, keep_alive=0)["done_reason"] == "unload"
    assert [m["name"] for m in ollama.ps()["models"]] == [f"{EMBEDDED_NAME}:latest"]
    assert store_server.metric("llmcli:model_unloads_total", AUTH) == unloads + 1
    assert ollama.generate(model=GEMMA)["done_reason"] == "load"  # a request with no prompt loads it
    assert len(ollama.ps()["models"]) == 2


def stage_ms(timings: dict, name: str) -> float:
    return next(s["ms"] for s in timings["stages"] if s["name"] == name)


def test_a_first_requests_load_is_timed_as_load_never_as_tokenize(ollama, store_server):
    """Store mode: the request that loads its model reports the load as load_ms and Ollama's
    load_duration, beside (not inside) ① tokenize; the next request's lease costs next to nothing."""
    ollama.generate(model=GEMMA, keep_alive=0)  # unloaded, whatever ran before

    def chat() -> dict:  # the ollama package drops `timings`, llmcli's own field
        body = {"model": GEMMA, "messages": HI, "options": {"num_predict": 1}, "stream": False}
        url = store_server.url + "/api/chat"
        return httpx.post(url, json=body, headers=AUTH, timeout=HANG_GUARD_S).json()

    first, second = chat(), chat()
    cold, warm = first["timings"], second["timings"]
    assert cold["load_ms"] > 20 * stage_ms(cold, "tokenize"), cold  # a real model load: tens of ms
    assert first["load_duration"] == pytest.approx(cold["load_ms"] * 1e6, rel=0.01)
    assert stage_ms(cold, "tokenize") < 2 * stage_ms(warm, "tokenize") + 50, (cold, warm)
    assert stage_ms(cold, "schedule") >= cold["load_ms"]  # waiting for the model is waiting
    assert warm["load_ms"] < cold["load_ms"] / 20 and second["load_duration"] < first["load_duration"] / 20
    streamed = httpx.post(
        store_server.url + "/v1/chat/completions",
        json={"model": GEMMA, "messages": HI, "max_tokens": 1},
        headers=AUTH,
        timeout=HANG_GUARD_S,
    ).json()["timings"]
    assert streamed["load_ms"] < cold["load_ms"] / 20, streamed


def test_llmcli_ps_lists_what_the_server_has_loaded(ollama, store_server):
    import json

    ollama.generate(model=EMBEDDED_NAME, keep_alive="1h")
    listed = cli("ps", "--endpoint", store_server.url, "--api-key", KEY, "--json", time_limit=HANG_GUARD_S)
    assert listed.exit_code == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows[f"{EMBEDDED_NAME}:latest"]["size"] > 0 and rows[f"{EMBEDDED_NAME}:latest"]["expires_at"]
    table = cli("ps", "--endpoint", store_server.url, "--api-key", KEY, time_limit=HANG_GUARD_S)
    assert f"{EMBEDDED_NAME}:latest" in table.stdout and "100% CPU" in table.stdout
    assert "59 minutes from now" in table.stdout or "1 hour from now" in table.stdout
    refused = cli("ps", "--endpoint", store_server.url, time_limit=HANG_GUARD_S)
    assert refused.exit_code == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
    assert (
        "failed with 401" in refused.stderr and "wants an API key; give it with --api-key" in refused.stderr
    )


def test_an_unknown_model_is_a_404_in_each_api_shape(ollama, openai, ollama_module, openai_module):
    with pytest.raises(ollama_module.ResponseError) as err:
        ollama.chat(model="qwen2.5:0.5b", messages=HI)
    assert err.value.status_code == 404 and "model 'qwen2.5:0.5b' not found, try pulling it first" in str(
        err.value
    )
    with pytest.raises(openai_module.NotFoundError) as missing:
        openai.chat.completions.create(model="../../etc/passwd", messages=HI, max_tokens=1)
    assert missing.value.body["code"] == "model_not_found" and missing.value.body["param"] == "model"


@pytest.mark.parametrize(
    "path, body, headers, field",
    [
        ("/api/chat", {"model": EMBEDDED_NAME, "messages": HI, "keep_alive": "5 minutes"}, {}, "keep_alive"),
        ("/api/generate", {"model": EMBEDDED_NAME, "keep_alive": True}, {}, "keep_alive"),
        (
            "/v1/chat/completions",
            {"model": EMBEDDED_NAME, "messages": HI},
            {"X-Keep-Alive": "soon"},
            "X-Keep-Alive",
        ),
        ("/v1/completions", {"model": EMBEDDED_NAME, "prompt": "a", "keep_alive": "1x"}, {}, "keep_alive"),
        # the header on every route whose body sends none
        ("/api/chat", {"model": EMBEDDED_NAME, "messages": HI}, {"X-Keep-Alive": "later"}, "X-Keep-Alive"),
        (
            "/v1/messages",
            {"model": EMBEDDED_NAME, "messages": HI, "max_tokens": 1},
            {"X-Keep-Alive": "later"},
            "X-Keep-Alive",
        ),
    ],
)
def test_a_keep_alive_that_is_not_a_duration_is_a_400_naming_it(store_server, path, body, headers, field):
    r = httpx.post(store_server.url + path, json=body, headers=AUTH | headers, timeout=HANG_GUARD_S)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert message.startswith(f"{field} ") and "is not a duration" in message


def test_with_max_models_1_alternating_models_answer_correctly_and_rss_stays_flat(one_model_server):
    srv = one_model_server
    loads = srv.metric("llmcli:model_loads_total", absent=0)
    unloads = srv.metric("llmcli:model_unloads_total", absent=0)
    client = httpx.Client(base_url=srv.url, timeout=HANG_GUARD_S)

    def ask(model: str) -> str:
        body = {
            "model": model,
            "prompt": "The sky is",
            "stream": False,
            "options": {"num_predict": TOKENS},
        }
        r = client.post("/api/generate", json=body)
        assert r.status_code == 200, r.text
        loaded = client.get("/api/ps").json()["models"]
        assert [m["name"] for m in loaded] == [f"{model}:latest"]  # the other was evicted
        return r.json()["response"]

    first = {model: ask(model) for model in MODELS}  # each loaded once: the allocator warmed up
    levels = []  # RSS with the second model loaded, after each of its loads
    for _ in range(6):
        for model in MODELS:
            assert ask(model) == first[model]
        levels.append(rss(srv.pid))
    assert first[MODELS[0]] != first[MODELS[1]]
    # Medians of three: one reading can catch the allocator mid-way; a leak moves all three.
    grew = statistics.median(levels[3:]) - statistics.median(levels[:3])
    shown = ", ".join(f"{level / 1e6:.0f}" for level in levels)
    assert abs(grew) < 50e6, f"RSS moved {grew / 1e6:.0f} MB over 12 switches (MB: {shown})"
    # 14 loads; every one but the first (or, on a server that held a model, every one) evicts
    assert srv.metric("llmcli:model_loads_total") == loads + 14
    assert srv.metric("llmcli:model_unloads_total") == unloads + 13 + (loads > 0)


def test_a_model_over_the_memory_budget_is_a_507_naming_it(tmp_path):
    with ServeProcess(tmp_path, "--max-memory", "1M", model=None) as srv:
        r = httpx.post(srv.url + "/api/generate", json={"model": EMBEDDED_NAME}, timeout=HANG_GUARD_S)
    assert r.status_code == 507 and "--max-memory" in r.json()["error"], r.text


@pytest.mark.parametrize(
    "args, words",
    [
        (["--max-models", "0"], "--max-models must be at least 1, not 0"),
        (["--max-memory", "lots"], "--max-memory 'lots' is not a size"),
        (["--keep-alive", "later"], "--keep-alive 'later' is not a duration"),
    ],
)
def test_bad_pool_options_are_refused_with_one_line(args, words):
    result = cli("serve", *args, time_limit=HANG_GUARD_S)
    assert result.exit_code == 2 and result.stdout == "" and words in result.stderr
    assert result.stderr.count("\n") == 1


def test_with_max_models_1_a_request_waits_while_the_other_model_is_in_use(one_model_server):
    """No idle model to evict: B's request waits (counted as waiting) until A's stream ends, then B
    is loaded in A's place and answers as itself."""
    import threading

    srv = one_model_server
    client = httpx.Client(base_url=srv.url, timeout=HANG_GUARD_S)
    # A short reply: B's, which must equal it, is decoded while the test waits.
    body_b = {"model": GEMMA, "prompt": "The sky is", "stream": False, "options": {"num_predict": TOKENS}}
    alone = client.post("/api/generate", json=body_b)
    body_a = {
        "model": EMBEDDED_NAME,
        "prompt": "1, 2, 3,",
        "stream": True,
        "options": {"num_predict": 48},
    }
    got: dict[str, object] = {}
    with client.stream("POST", "/api/generate", json=body_a) as stream_a:
        lines = stream_a.iter_lines()
        next(lines)  # A is loaded and decoding: its lease pins it

        def ask_b() -> None:
            got["b"] = client.post("/api/generate", json=body_b)

        asker = threading.Thread(target=ask_b)
        asker.start()
        # B is counted as waiting while it waits for room
        assert srv.metric_when("llmcli:num_requests_waiting", lambda waiting: waiting >= 1) == 1
        assert [m["name"] for m in client.get("/api/ps").json()["models"]] == [f"{EMBEDDED_NAME}:latest"]
        # A ends whole (its lease kept its model loaded while B waited): how soon B then runs, or
        # whether it has ended by the time this line is read, is a matter of the machine's speed.
        rest = list(lines)
    asker.join(HANG_GUARD_S)
    assert '"done":true' in rest[-1].replace(" ", "")
    b = got["b"]
    assert isinstance(b, httpx.Response) and b.status_code == 200, b
    assert b.json()["response"] == alone.json()["response"]
    assert [m["name"] for m in client.get("/api/ps").json()["models"]] == [f"{GEMMA}:latest"]


def test_a_name_pulled_again_answers_from_its_new_file_as_in_ollama(
    ollama, store_server, embedded_path, gemma3_path
):
    """A model loaded under a name whose file then changes (pulled or converted again) is unloaded once
    its request has ended, and the name's next request loads the new file: here the name moves from
    the embedded model's GGUF to Gemma's, and its greedy reply becomes Gemma's."""
    store, name = Store(store_server.home), "swap"
    greedy = {"num_predict": TOKENS, "temperature": 0}

    def reply(model: str) -> str:
        return ollama.chat(model=model, messages=HI, options=greedy)["message"]["content"]

    store.register(ModelEntry(name=name, path=embedded_path, files=[embedded_path], source="test"))
    before = reply(name)
    assert before == reply(EMBEDDED_NAME)
    labels = f'{{model_name="{name}"}}'
    assert store_server.metric(f"llmcli:model_loads_total{labels}", AUTH) == 1
    assert reply(name) == before  # the same file: no reload
    store.register(ModelEntry(name=name, path=gemma3_path, files=[gemma3_path], source="test"))
    after = reply(name)
    assert after == reply(GEMMA) != before
    assert store_server.metric(f"llmcli:model_loads_total{labels}", AUTH) == 2
    assert store_server.metric(f"llmcli:model_unloads_total{labels}", AUTH) == 1
    assert ollama.generate(model=name, keep_alive=0)["done_reason"] == "unload"
