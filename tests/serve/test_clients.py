"""The gaps that real clients and llama.cpp's own server tests found, each closed and tried with the
client that found it, on the shared server (tests/serve/conftest.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import jsonschema
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, ORIGIN
from tests.support.deps import require

HI = [{"role": "user", "content": "Say hello."}]
COLOUR = {
    "type": "object",
    "properties": {"name": {"enum": ["red", "green", "blue"]}, "hex": {"type": "string", "maxLength": 7}},
    "required": ["name", "hex"],
}


@pytest.fixture(scope="module")
def client(server, openai_module):
    return openai_module.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def post(server, path: str, body, headers=AUTH) -> httpx.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return httpx.post(server.url + path, content=data, headers=headers, timeout=60)


# -- the openai SDK ------------------------------------------------------------------------------
def test_the_openai_sdk_retrieves_the_model_and_gets_a_404_for_another(client, openai_module):
    model = client.models.retrieve(EMBEDDED_NAME)
    assert model.id == EMBEDDED_NAME and model.owned_by == "llmcli"
    with pytest.raises(openai_module.NotFoundError) as err:
        client.models.retrieve("qwen2.5:0.5b")
    assert "qwen2.5:0.5b" in err.value.body["message"] and EMBEDDED_NAME in err.value.body["message"]


def test_every_openai_object_carries_a_system_fingerprint(client):
    chat = client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=2)
    text = client.completions.create(model=EMBEDDED_NAME, prompt="Once", max_tokens=2)
    stream = client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=2, stream=True)
    prints = {chat.system_fingerprint, text.system_fingerprint} | {c.system_fingerprint for c in stream}
    assert len(prints) == 1 and prints.pop().startswith("fp_")


def test_llama_servers_unprefixed_aliases_answer_as_the_v1_routes(server):
    for path in ("/models", f"/models/{EMBEDDED_NAME}"):
        assert (
            httpx.get(server.url + path, headers=AUTH).json()
            == httpx.get(server.url + "/v1" + path, headers=AUTH).json()
        )
    chat = post(server, "/chat/completions", {"messages": HI, "max_tokens": 2})
    text = post(server, "/completions", {"prompt": "Once", "max_tokens": 2})
    assert chat.json()["object"] == "chat.completion" and text.json()["object"] == "text_completion"


# -- litellm -------------------------------------------------------------------------------------
def test_litellm_reads_a_prompt_over_the_context_as_a_context_window_error(server):
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of its price list
    litellm = require("litellm")
    with pytest.raises(litellm.ContextWindowExceededError):
        litellm.completion(
            model=f"openai/{EMBEDDED_NAME}",
            api_base=server.url + "/v1",
            api_key=KEY,
            messages=[{"role": "user", "content": "a " * 1500}],
            max_tokens=2,
            num_retries=0,
        )
    r = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 5000})
    assert r.json()["error"]["code"] == "context_length_exceeded", r.text


# -- instructor and the JSON modes ---------------------------------------------------------------
def test_instructor_json_schema_mode_gets_a_reply_held_to_its_schema(server):
    instructor = require("instructor")
    openai = require("openai")
    pydantic = require("pydantic")
    from typing import Literal

    class Colour(pydantic.BaseModel):
        name: Literal["red", "green", "blue"]
        hex: str = pydantic.Field(max_length=7)

    client = instructor.from_openai(
        openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0),
        mode=instructor.Mode.JSON_SCHEMA,
    )
    colour = client.chat.completions.create(
        model=EMBEDDED_NAME,
        response_model=Colour,
        max_tokens=64,
        max_retries=0,
        messages=[{"role": "user", "content": "Give me a colour as JSON."}],
    )
    assert colour.name in ("red", "green", "blue") and len(colour.hex) <= 7


@pytest.mark.parametrize(
    "extra",
    [
        {"response_format": {"type": "json_object", "schema": COLOUR}},  # llama-server's, Together's
        {"json_schema": COLOUR},  # llama-server's top-level field
    ],
    ids=["json_object-with-schema", "top-level-json_schema"],
)
def test_a_schema_sent_the_llama_server_ways_holds_the_reply(server, extra):
    body = {"messages": [{"role": "user", "content": "A colour, as JSON."}], "max_tokens": 64, **extra}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    jsonschema.validate(json.loads(r.json()["choices"][0]["message"]["content"]), COLOUR)


def test_a_bad_schema_sent_the_llama_server_ways_is_a_400_naming_where(server):
    bad = {"type": "string", "patternProperties": {}}
    for extra, param in (
        ({"response_format": {"type": "json_object", "schema": bad}}, "response_format.schema"),
        ({"json_schema": bad}, "json_schema"),
        ({"json_schema": COLOUR, "grammar": 'root ::= "a"'}, "grammar"),
    ):
        r = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 2, **extra})
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


# -- browsers ------------------------------------------------------------------------------------
def test_a_browser_preflight_is_answered_without_a_key_for_the_allowed_origin_only(server):
    ask = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}
    ok = httpx.options(server.url + "/v1/chat/completions", headers={"Origin": ORIGIN, **ask})
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in ok.headers["access-control-allow-headers"].lower()
    other = httpx.options(
        server.url + "/v1/chat/completions", headers={"Origin": "http://evil.example", **ask}
    )
    assert other.status_code >= 400 and "access-control-allow-origin" not in other.headers
    real = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 2}, {**AUTH, "Origin": ORIGIN})
    assert real.status_code == 200 and real.headers["access-control-allow-origin"] == ORIGIN
    keyless = post(server, "/v1/chat/completions", {"messages": HI}, {"Origin": ORIGIN})
    assert keyless.status_code == 401 and keyless.headers["access-control-allow-origin"] == ORIGIN


def test_curl_sends_a_browsers_preflight_and_gets_the_allow_headers_without_a_key(server):
    curl = shutil.which("curl")
    assert curl, "the preflight test needs curl"
    ask = ["-H", f"Origin: {ORIGIN}", "-H", "Access-Control-Request-Method: POST"]
    done = subprocess.run(
        [curl, "-s", "-i", "-X", "OPTIONS", *ask, server.url + "/v1/chat/completions"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    head = done.stdout.lower()
    assert head.startswith("http/1.1 200") and f"access-control-allow-origin: {ORIGIN}" in head, head


# -- Ollama's clients ----------------------------------------------------------------------------
def test_ollama_clients_find_the_model_with_its_latest_tag_and_the_words_they_probe_for(
    server, ollama_module
):
    assert httpx.get(server.url + "/").text == "Ollama is running"
    ollama = ollama_module.Client(host=server.url, headers=AUTH)
    (entry,) = ollama.list().models
    assert entry.model == f"{EMBEDDED_NAME}:latest"
    assert ollama.show(entry.model).details.format == "gguf"  # as Open WebUI looks it up
    with pytest.raises(ollama_module.ResponseError) as err:
        ollama.show("qwen2.5:0.5b")
    assert err.value.status_code == 404


def test_an_ollama_request_with_nothing_to_generate_loads_or_unloads(server):
    load = post(server, "/api/generate", {"model": EMBEDDED_NAME})
    unload = post(server, "/api/generate", {"model": EMBEDDED_NAME, "keep_alive": 0})
    chat = post(server, "/api/chat", {"model": EMBEDDED_NAME, "messages": []})
    assert (load.json()["done_reason"], unload.json()["done_reason"]) == ("load", "unload")
    assert chat.json()["done"] is True and chat.json()["message"]["content"] == ""


def test_ollama_repeat_last_n_minus_one_looks_back_over_the_whole_context(server):
    options = {"num_predict": 2, "repeat_last_n": -1, "repeat_penalty": 1.3}
    r = post(
        server, "/api/generate", {"model": EMBEDDED_NAME, "prompt": "hi", "stream": False, "options": options}
    )
    assert r.status_code == 200 and r.json()["eval_count"] <= 2, r.text


def test_a_developer_message_is_read_as_the_system_message(client):
    def prompt_tokens(role: str) -> int:
        messages = [{"role": role, "content": "Answer in French."}, *HI]
        return client.chat.completions.create(
            model=EMBEDDED_NAME, messages=messages, max_tokens=1
        ).usage.prompt_tokens

    assert prompt_tokens("developer") == prompt_tokens("system")


# -- the API documents itself --------------------------------------------------------------------
def test_the_openapi_schema_is_served_behind_the_key_with_each_body_and_the_params_bounds(server):
    assert httpx.get(server.url + "/openapi.json").status_code == 401
    schema = httpx.get(server.url + "/openapi.json", headers=AUTH).json()
    body = schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]
    name = body["schema"]["$ref"].rsplit("/", 1)[-1]
    temperature = schema["components"]["schemas"][name]["properties"]["temperature"]["anyOf"][0]
    assert (temperature["minimum"], temperature["maximum"]) == (0, 10)
    assert "/api/chat" in schema["paths"] and "/v1/models/{model_id}" in schema["paths"]


# -- a model still loading -----------------------------------------------------------------------
def test_every_model_route_is_a_503_with_retry_after_until_the_model_is_loaded(embedded_path):
    """In process, before the lifespan starts the engine thread: the model is not loaded yet."""
    from starlette.testclient import TestClient

    from llmcli.serve.app import create_app
    from llmcli.serve.catalog import Catalog, Served
    from llmcli.serve.config import ServeConfig
    from llmcli.serve.state import Server

    config = ServeConfig(model_name=EMBEDDED_NAME)
    server = Server.make(config, Catalog(one=Served(EMBEDDED_NAME, Path(embedded_path))))
    client = TestClient(create_app(server))  # no `with`: the lifespan, and so the load, never runs
    routes = [
        ("GET", "/v1/models", None),
        ("GET", f"/v1/models/{EMBEDDED_NAME}", None),
        ("GET", "/models", None),
        ("POST", "/v1/chat/completions", {"messages": HI}),
        ("POST", "/v1/completions", {"prompt": "hi"}),
        ("GET", "/api/tags", None),
        ("POST", "/api/show", {"model": EMBEDDED_NAME}),
        ("POST", "/api/chat", {"model": EMBEDDED_NAME, "messages": HI}),
        ("POST", "/api/generate", {"model": EMBEDDED_NAME, "prompt": "hi"}),
    ]
    for method, path, body in routes:
        r = client.request(method, path, json=body)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", (path, r.status_code, r.text)
        message = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
        assert "still loading" in message, (path, message)
    assert client.get("/health").status_code == 503
    assert client.get("/").status_code == 200


# -- hostile bodies ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "raw, param, words",
    [
        (b'{"messages": [], "temperature": NaN}', None, "NaN is not JSON"),
        (b'{"max_tokens": Infinity}', None, "Infinity is not JSON"),
        (
            b'{"messages": [{"role": "user", "content": "a"}], "max_tokens": 2, "max_tokens": 9}',
            "max_tokens",
            "twice",
        ),
        (b'{"messages": [{"role": "user", "content": "a", "role": "system"}]}', "role", "twice"),
        (b'{"temperature": 1' + b"0" * 400 + b"}", "temperature", "must be in 0..10"),
        (b'{"messages": ' + b"[" * 1500 + b"]" * 1500 + b"}", None, "not valid JSON"),
        (b'{"messages": [{"role": "user", "content": "a"}], "n": 1e400}', "n", "an integer in 1..8"),
    ],
    ids=[
        "nan",
        "infinity",
        "repeated-key",
        "repeated-nested-key",
        "huge-float",
        "deep",
        "inf-n",
    ],
)
def test_a_hostile_body_is_a_400_naming_what_and_the_server_goes_on(server, raw, param, words):
    r = post(server, "/v1/chat/completions", raw)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"], error
    assert post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 1}).status_code == 200


def test_a_number_of_thousands_of_digits_is_refused_by_the_body_read():
    """Past the shared server's small body cap, so read directly: Python refuses ints over 4,300 digits."""
    from llmcli.serve.errors import ApiError
    from llmcli.serve.protocol import read_body

    with pytest.raises(ApiError) as err:
        read_body(b'{"seed": ' + b"9" * 5000 + b"}")
    assert err.value.status == 400 and "not valid JSON" in err.value.message
    assert read_body(b'{"seed": ' + b"9" * 40 + b"}")["seed"] == int("9" * 40)
