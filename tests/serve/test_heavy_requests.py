"""Requests that cost the server seconds of work are done off the event loop: 128 tools with distinct
schemas (half a megabyte: their checks and grammar), a 4 MB body of 120,000 empty messages. While one
is worked on, /health answers and a running stream keeps coming; the same tools a second time cost
only a lookup; tools past the byte cap are refused early. The bounds here are orderings (the health
check answers before the heavy request does) and generous hang guards, never a speed."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from tests.serve.server import AUTH, HANG_GUARD_S, KEY, ServeProcess

MAX_BODY = 8 << 20
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory, embedded_path):
    srv = ServeProcess(
        tmp_path_factory.mktemp("serve-heavy"),
        "--parallel",
        "2",
        "--api-key",
        KEY,
        "--max-body",
        str(MAX_BODY),
    )
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=HANG_GUARD_S * 2)


def many_tools(seed: str, n: int = 128, properties: int = 24) -> list[dict]:
    """n tools whose schemas differ from every other request's (seed): about 0.6 MB for 128."""
    tools = []
    for i in range(n):
        props = {
            f"p{i}_{j}_{seed}": {
                "type": "string",
                "description": f"field {j} of tool {i}, " + "detail " * 8,
                "enum": [f"v{i}_{j}_{k}_{seed}" for k in range(4)],
            }
            for j in range(properties)
        }
        tools.append(
            {
                "type": "function",
                "function": {
                    "name": f"tool_{i}_{seed}",
                    "description": f"tool {i}",
                    "parameters": {"type": "object", "properties": props, "required": list(props)[:2]},
                },
            }
        )
    return tools


class Stream(threading.Thread):
    """A chat stream that records when each chunk arrived."""

    def __init__(self, server) -> None:
        super().__init__(daemon=True)
        self.server, self.times = server, []
        self.started = threading.Event()

    def run(self) -> None:
        body = {"messages": [{"role": "user", "content": "Count from one to five hundred."}]}
        body |= {"max_tokens": 400, "stream": True, "temperature": 0}
        url = self.server.url + "/v1/chat/completions"
        with httpx.stream("POST", url, json=body, headers=AUTH, timeout=HANG_GUARD_S * 2) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    self.times.append(time.monotonic())
                    self.started.set()


class Timed(threading.Thread):
    def __init__(self, call) -> None:
        super().__init__(daemon=True)
        self.call, self.answer, self.done = call, None, 0.0

    def run(self) -> None:
        self.answer = self.call()
        self.done = time.monotonic()


def test_health_and_a_stream_keep_going_while_128_new_tools_are_checked(server) -> None:
    tools = many_tools("first")
    assert 400_000 < len(json.dumps(tools)) < 1 << 20
    body = {"messages": ASK, "tools": tools, "tool_choice": "required", "max_tokens": 1}
    stream = Stream(server)
    stream.start()
    assert stream.started.wait(HANG_GUARD_S)
    heavy = Timed(lambda: post(server, "/v1/chat/completions", body))
    sent = time.monotonic()
    heavy.start()
    time.sleep(0.3)  # the body is in: its checks have begun
    health = httpx.get(server.url + "/health", timeout=HANG_GUARD_S)
    answered = time.monotonic()
    heavy.join(HANG_GUARD_S * 2)
    assert heavy.answer is not None, "the heavy request never finished"
    assert health.status_code == 200
    assert answered < heavy.done, "/health waited for the tools' checks"
    during = [t for t in stream.times if sent + 0.3 < t < heavy.done]
    assert during or stream.times[-1] < sent + 0.3, "the stream stopped while the tools were checked"
    first_s = heavy.done - sent
    status = heavy.answer.status_code
    assert status in (200, 400), heavy.answer.text

    # The same tools again: their checks and grammar are remembered (a refusal too).
    t0 = time.monotonic()
    again = post(server, "/v1/chat/completions", body)
    assert again.status_code == status, again.text
    assert time.monotonic() - t0 < first_s
    stream.join(HANG_GUARD_S)


def test_tools_past_the_byte_cap_are_a_400_naming_tools(server) -> None:
    tools = many_tools("big", n=100, properties=100)
    size = len(json.dumps(tools))
    assert size > 1 << 20
    r = post(server, "/v1/chat/completions", {"messages": ASK, "tools": tools, "max_tokens": 1})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "tools"
    assert error["message"] == (
        f"tools is {size:,} bytes of JSON, over the limit of {1 << 20:,}; send fewer or smaller tools"
    )
    assert httpx.get(server.url + "/health", timeout=HANG_GUARD_S).status_code == 200


def test_a_4mb_body_of_empty_messages_is_refused_off_the_loop(server) -> None:
    messages = [{"role": "user", "content": ""}] * 120_000
    data = json.dumps({"messages": messages, "max_tokens": 1}).encode()
    assert len(data) > 3_900_000
    stream = Stream(server)
    stream.start()
    assert stream.started.wait(HANG_GUARD_S)
    heavy = Timed(
        lambda: httpx.post(
            server.url + "/v1/chat/completions",
            content=data,
            headers={**AUTH, "Content-Type": "application/json"},
            timeout=HANG_GUARD_S * 2,
        )
    )
    sent = time.monotonic()
    heavy.start()
    time.sleep(0.3)  # the body is in: its parse has begun
    health = httpx.get(server.url + "/health", timeout=HANG_GUARD_S)
    answered = time.monotonic()
    heavy.join(HANG_GUARD_S * 2)
    assert heavy.answer is not None and heavy.answer.status_code == 400, heavy.answer
    assert "messages" in heavy.answer.json()["error"]["message"]
    assert health.status_code == 200 and answered < heavy.done, "/health waited for the body's checks"
    # The stream went on while the body was read and checked (or had ended before it came).
    during = [t for t in stream.times if sent < t < heavy.done]
    assert during or stream.times[-1] < sent
    stream.join(HANG_GUARD_S)


# -- one nesting limit for every JSON in a request ---------------------------------------------------
DEEP = "nests more than 64 levels deep, the limit for any JSON handed in; flatten it"


def nested_schema(levels: int) -> str:
    return '{"type": "object", "properties": {"a": ' * levels + '{"type": "object"}' + "}}" * levels


def deep_list(levels: int) -> str:
    return "[" * levels + "1" + "]" * levels


def tool_text(levels: int) -> str:
    return '[{"type": "function", "function": {"name": "f", "parameters": ' + nested_schema(levels) + "}}]"


def calling(arguments: str, path: str) -> str:
    """A conversation whose assistant called a tool with `arguments` (JSON text), on either route."""
    if path == "/api/chat":  # Ollama's arguments are an object
        call = '{"function": {"name": "f", "arguments": ' + arguments + "}}"
    else:  # OpenAI's are a string of JSON
        call = (
            '{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '
            + json.dumps(arguments)
            + "}}"
        )
    return (
        '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": ['
        + call
        + "]},"
        ' {"role": "tool", "content": "ok", "tool_call_id": "c1"}]'
    )


def raw_post(server, path: str, text: str) -> httpx.Response:
    headers = {**AUTH, "Content-Type": "application/json"}
    return httpx.post(server.url + path, content=text.encode(), headers=headers, timeout=HANG_GUARD_S)


def refused(r: httpx.Response, path: str, field: str, says: str) -> None:
    assert r.status_code == 400, r.text
    if path.startswith("/api/"):
        message = r.json()["error"]
    else:
        message, param = r.json()["error"]["message"], r.json()["error"]["param"]
        assert param == field, r.text
    assert says in message, message


ROUTES = ["/v1/chat/completions", "/api/chat"]


@pytest.mark.parametrize("levels", [40, 225, 450])  # two JSON levels each
@pytest.mark.parametrize("path", ROUTES)
def test_a_tool_nested_past_the_limit_is_a_400_naming_tools(server, path, levels) -> None:
    body = '{"messages": [{"role": "user", "content": "hi"}], "tools": ' + tool_text(levels) + "}"
    r = raw_post(server, path, body)
    refused(r, path, "tools", "tools[0].function.parameters.properties.a.properties.a")
    refused(r, path, "tools", DEEP)
    assert httpx.get(server.url + "/health", timeout=HANG_GUARD_S).status_code == 200


@pytest.mark.parametrize("levels", [100, 450, 900])
@pytest.mark.parametrize("path", ROUTES)
def test_arguments_nested_past_the_limit_are_a_400(server, path, levels) -> None:
    body = '{"messages": ' + calling('{"city": ' + deep_list(levels) + "}", path) + ', "max_tokens": 1}'
    r = raw_post(server, path, body)
    assert r.status_code == 400, r.text
    if path == "/api/chat":  # the body's own depth
        refused(
            r, path, "messages", "messages[1].tool_calls[0].function.arguments.city" if levels < 900 else ""
        )
    else:
        refused(r, path, "messages[1].tool_calls", f"messages[1].tool_calls[0].function.arguments {DEEP}")
    assert httpx.get(server.url + "/health", timeout=HANG_GUARD_S).status_code == 200


def test_a_lone_surrogate_inside_string_arguments_is_a_400_not_a_crash(server) -> None:
    """The outer body holds the escape escaped (valid text); decoding the arguments makes it a lone
    surrogate, which crashed the tokenizer with a bare 500."""
    body = '{"messages": ' + calling('{"city": "\\ud800"}', "/v1/chat/completions") + ', "max_tokens": 1}'
    r = raw_post(server, "/v1/chat/completions", body)
    refused(
        r,
        "/v1/chat/completions",
        "messages[1].tool_calls",
        "messages[1].tool_calls[0].function.arguments holds a lone surrogate escape (\\ud800-\\udfff), "
        "which is not text",
    )
    assert httpx.get(server.url + "/health", timeout=HANG_GUARD_S).status_code == 200
