"""A conversation shaped like Claude Code's, through /v1/messages on a store server with
`--alias 'claude-*=MODEL'`: system blocks whose first carries the billing line with a nonce that
changes every request (`cch=`), tools, a tool_use and its tool_result. The nonce is made constant
before rendering, so turns 2 and 3 share the earlier turns' cells: their cache_read_input_tokens
cover the system prompt and what came before."""

from __future__ import annotations

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.claude_code import BILLING, TOOLS
from tests.serve.server import KEY, ServeProcess
from tests.support.deps import require

PROMPT = (
    "You are an interactive CLI tool that helps users with software engineering tasks. Use the "
    "instructions below and the tools available to you to assist the user. Keep your answers short. "
    "When you run a command, explain what it does first. Never guess file contents: read them."
)


@pytest.fixture(scope="module")
def agent_server(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-agent")
    srv = ServeProcess(
        home, "--api-key", KEY, "--alias", f"claude-*={EMBEDDED_NAME}", "--max-body", "1000000", model=None
    )
    yield srv
    assert srv.stop() == 0


def turn(server, messages: list, nonce: str, **extra) -> dict:
    system = [
        {"type": "text", "text": BILLING.format(nonce=nonce)},
        {"type": "text", "text": PROMPT, "cache_control": {"type": "ephemeral"}},
    ]
    body = {"model": "claude-sonnet-4-5-20250929", "max_tokens": 24, "system": system, "tools": TOOLS,
            "messages": messages, **extra}  # fmt: skip
    answer = httpx.post(server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=120)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_turns_two_and_three_read_the_earlier_turns_from_the_cache(agent_server):
    messages: list = [{"role": "user", "content": "List the files here."}]
    first = turn(agent_server, messages, "a1b2c", max_tokens=64, tool_choice={"type": "tool", "name": "Bash"})
    assert first["stop_reason"] == "tool_use" and first["model"] == "claude-sonnet-4-5-20250929"
    use = next(block for block in first["content"] if block["type"] == "tool_use")
    first_prompt = first["usage"]["input_tokens"] + first["usage"]["cache_read_input_tokens"]

    messages += [
        {"role": "assistant", "content": first["content"]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": "README.md\nsrc"}],
        },
    ]
    second = turn(agent_server, messages, "f00d1")
    second_prompt = second["usage"]["input_tokens"] + second["usage"]["cache_read_input_tokens"]
    # The system prompt, the tools and the first question were computed by turn 1: turn 2 reads them.
    assert second["usage"]["cache_read_input_tokens"] >= first_prompt - 8, (first["usage"], second["usage"])

    messages += [
        {"role": "assistant", "content": second["content"]},
        {"role": "user", "content": "Thanks. And what is in src?"},
    ]
    third = turn(agent_server, messages, "9e9e9")
    assert third["usage"]["cache_read_input_tokens"] >= second_prompt - 8, (second["usage"], third["usage"])


def test_the_nonce_alone_would_have_broken_the_prefix(agent_server):
    """The control: a system prompt that differs early (here, where the nonce is) shares nothing."""
    hi = [{"role": "user", "content": "Hi."}]
    turn(agent_server, hi, "11111")
    same = turn(agent_server, hi, "22222")
    assert same["usage"]["input_tokens"] <= 1, same["usage"]  # all but the last prompt token shared
    other = httpx.post(
        agent_server.url + "/v1/messages",
        json={"model": "claude-haiku-4-5", "max_tokens": 4, "system": "Other. " + PROMPT, "messages": hi},
        headers={"x-api-key": KEY},
        timeout=120,
    )
    assert other.status_code == 200 and other.json()["usage"]["cache_read_input_tokens"] < 8


def test_an_unaliased_name_is_the_sdks_not_found_error(agent_server):
    anthropic = require("anthropic")
    client = anthropic.Anthropic(base_url=agent_server.url, api_key=KEY, max_retries=0)
    with pytest.raises(anthropic.NotFoundError) as exc:
        client.messages.create(model="gpt-4o", max_tokens=4, messages=[{"role": "user", "content": "Hi."}])
    error = {"type": "not_found_error", "message": "model 'gpt-4o' not found, try pulling it first"}
    assert exc.value.body == {"type": "error", "error": error}


def test_an_overflow_is_anthropics_prompt_is_too_long(agent_server):
    body = {
        "model": "claude-haiku-4-5",
        "max_tokens": 8,
        "messages": [{"role": "user", "content": "word " * 1100}],
    }
    answer = httpx.post(agent_server.url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    message = answer.json()["error"]["message"]
    assert message.startswith("prompt is too long: ") and message.endswith(" tokens > 1024 maximum"), message


def test_claude_code_s_system_message_among_the_turns_and_its_version_suffix(agent_server):
    """Claude Code 2.1 puts its agent list in a `system` message after the first user turn, and its
    billing line's version carries a suffix that changes with the conversation: the message is read
    as user text (Gemma's and SmolLM2's templates take one system prompt), the suffix made constant."""

    def ask(suffix: str) -> dict:
        body = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 4,
            "system": [{"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.197.{suffix};"},
                       {"type": "text", "text": PROMPT}],
            "messages": [{"role": "user", "content": "Hi."}, {"role": "system", "content": "Agents: none."}],
        }  # fmt: skip
        url, headers = agent_server.url + "/v1/messages", {"x-api-key": KEY}
        answer = httpx.post(url, json=body, headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        return answer.json()["usage"]

    ask("c23")
    again = ask("f9a")
    assert again["input_tokens"] <= 1, again  # all but the last prompt token read from the cache
