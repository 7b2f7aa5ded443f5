"""The probes agents make before any request, on the shared server: the Ollama API level of
/api/version (llmcli's own version in a header and /version), /api/show's model_info and
capabilities, CORS for loopback origins, `--cors-origin localhost`, `--alias`, and Ollama tool
messages that carry a tool_call_id."""

from __future__ import annotations

import json
import subprocess

import httpx
import pytest

from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.serve.catalog import aliased
from llmcli.serve.config import ServeConfig
from llmcli.serve.ollama.protocol import ChatRequest
from llmcli.serve.protocol import Defaults
from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, HANG_GUARD_S
from tests.support.cli import LLMCLI


def level(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def test_api_version_is_an_ollama_level_the_agents_accept_and_llmcli_says_its_own_apart(server):
    answer = httpx.get(server.url + "/api/version", headers=AUTH)
    # VS Code Copilot's Ollama provider refuses below 0.6.4; `codex --oss` reads below 0.13.4 as old
    assert level(answer.json()["version"]) >= (0, 13, 4)
    own = httpx.get(server.url + "/version", headers=AUTH)
    assert own.json()["version"] == answer.headers["x-llmcli-version"] == own.headers["x-llmcli-version"]
    assert level(own.json()["version"]) < (0, 13, 4)  # llmcli's own, not the API level


def test_api_show_has_the_basename_the_context_length_and_the_capabilities(server):
    shown = httpx.post(server.url + "/api/show", json={"model": EMBEDDED_NAME}, headers=AUTH).json()
    info = shown["model_info"]
    arch = info["general.architecture"]
    assert info["general.basename"] and info[f"{arch}.context_length"] > 0
    assert shown["capabilities"][:2] == ["completion", "tools"] and "embedding" not in shown["capabilities"]


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173"])
def test_a_loopback_origin_is_answered_by_default(server, origin):
    ask = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    answer = httpx.options(server.url + "/v1/messages", headers=ask)
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin


def test_a_lookalike_of_loopback_is_not(server):
    ask = {"Origin": "http://localhost.evil.example", "Access-Control-Request-Method": "POST"}
    answer = httpx.options(server.url + "/v1/messages", headers=ask)
    assert "access-control-allow-origin" not in answer.headers


def test_cors_origin_localhost_is_llama_servers_keyword_and_accepted():
    config = ServeConfig(model_name="", cors_origins=["localhost", "https://app.example"])
    assert config.cors_origins == ["localhost", "https://app.example"]
    with pytest.raises(UsageError, match="is not an origin"):
        ServeConfig(model_name="", cors_origins=["localhost:3000"])


def test_an_alias_glob_names_a_model_and_the_first_match_wins():
    aliases = [("claude-*", "qwen3"), ("claude-haiku-*", "never"), ("gpt-4o", "smol")]
    assert aliased("claude-haiku-4-5", aliases) == "qwen3"
    assert aliased("gpt-4o", aliases) == "smol" and aliased("gpt-4o-mini", aliases) == "gpt-4o-mini"


def test_an_alias_without_its_model_is_refused_naming_the_shape():
    result = subprocess.run(
        [*LLMCLI, "serve", "--port", "0", "--alias", "claude-sonnet"],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "llmcli: error: --alias 'claude-sonnet' is not NAME=MODEL; give e.g. --alias 'claude-*=qwen3'\n"
    )


def test_an_ollama_tool_message_keeps_its_tool_call_id():
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}, "id": "call_1"}
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "sunny", "tool_name": "get_weather", "tool_call_id": "call_1"},
        ],
    }
    gen = ChatRequest.model_validate(body).generation(Defaults(SamplingParams(), None))
    assert gen.messages is not None and gen.messages[-1].tool_call_id == "call_1"
    assert gen.messages[-1].name == "get_weather"


def test_an_earlier_drafts_tuple_items_and_definitions_are_read_as_llama_server_reads_them(server):
    # draft 7: `items` as a list is a tuple, `definitions` holds the $ref targets (not refused)
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {"$ref": "#/definitions/pair"}},
        "required": ["pair"],
        "definitions": {
            "pair": {"type": "array", "items": [{"type": "string", "maxLength": 8}, {"type": "integer"}]}
        },
    }
    body = {
        "model": EMBEDDED_NAME,
        "messages": [{"role": "user", "content": "A name and an age."}],
        "max_tokens": 48,
        "response_format": {"type": "json_schema", "json_schema": {"name": "pair", "schema": schema}},
    }
    answer = httpx.post(server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 200, answer.text
    name, age = json.loads(answer.json()["choices"][0]["message"]["content"])["pair"]
    assert isinstance(name, str) and isinstance(age, int)


def test_a_chat_template_file_that_is_not_there_is_refused_naming_it(tmp_path):
    missing = tmp_path / "nope.jinja"
    result = subprocess.run(
        [*LLMCLI, "serve", "--port", "0", "--chat-template", str(missing)],
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("llmcli: error: ") and str(missing) in result.stderr
    assert result.stderr.count("\n") == 1
