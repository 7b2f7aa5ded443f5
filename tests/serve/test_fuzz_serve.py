"""Seeded malformed requests against `llmcli serve`: every answer is a 200 or a well-formed refusal.

Each case starts from a valid request to one of the generation routes (OpenAI's chat, completions and
Responses, Ollama's, Anthropic's Messages) and
breaks it: a field dropped or given a value of the wrong type or range (NaN, huge, negative,
nested), the JSON cut short or nested thousands deep, any field (or a call's string of arguments)
nested near or past the one depth limit, bytes that are not UTF-8, a body past
--max-body, a key given twice, numbers of hundreds of digits, content parts of the wrong kinds,
unknown roles, many empty messages, hostile tools, tool choices and tool calls, a missing, wrong or
mangled key. The server must answer each
with 200 (a reply of at most 3 tokens) or 400/401/404/413 whose body has the error shape of the
route's API (OpenAI's object, Ollama's string); never a 500, never a hang. Afterwards it is healthy
and runs nothing. The run checks it reached a 200, a 400, a 401 and a 413.

20 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 200 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import random
from collections import Counter

import httpx
import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.serve.server import KEY, MAX_BODY

CASES = cases(default=20, long=200)  # per seed
FIXED_SEED = 20261203
HI = [{"role": "user", "content": "Hi."}]
ROUTES = {  # a valid body each, at most 3 tokens (a choice)
    "/v1/chat/completions": {"messages": HI, "max_tokens": 3, "temperature": 0.5, "stop": ["\n\n"],
                             "logprobs": True, "top_logprobs": 2},
    "/v1/completions": {"prompt": "Once upon", "max_tokens": 3, "top_p": 0.9, "n": 2, "logprobs": 1},
    "/api/chat": {"model": "m", "messages": HI, "stream": False, "options": {"num_predict": 3, "top_k": 5}},
    "/api/generate": {"model": "m", "prompt": "Hi.", "stream": False, "options": {"num_predict": 3}},
    "/v1/messages": {"model": "m", "messages": HI, "max_tokens": 3, "system": "Be brief.", "top_k": 5},
    "/v1/responses": {"model": "m", "input": HI, "max_output_tokens": 3, "instructions": "Be brief."},
}  # fmt: skip
NAMED_EVENTS = {"/v1/messages": "message_stop", "/v1/responses": "response.completed"}  # a stream's last
# Values no field accepts in the place it is put, or that test the checks' edges.
BAD = [None, -1, 0, 2**64, -(2**63), 1e308, float("nan"), float("inf"), "", "x", "NaN", True, [], {},
       [1, "a"], {"role": "user"}, "\x00\u202e", 1.5]  # fmt: skip
TOKEN_FIELDS = {
    "max_tokens",
    "num_predict",
}  # only invalid values here: a valid large one would decode for long


def paths(body, prefix=()):
    """Every (container, key) in a JSON value, so a mutation can reach nested fields too."""
    items = body.items() if isinstance(body, dict) else enumerate(body) if isinstance(body, list) else ()
    for key, value in items:
        yield body, key
        yield from paths(value, (*prefix, key))


BODIES = ["field", "field", "field", "drop", "cut", "deep", "bytes", "big", "valid"]
BODIES += [
    "repeated",
    "parts",
    "role",
    "many",
    "digits",
    "tools",
    "nested",
]  # hostile shapes: typed requests refuse them
ROLES = ["developer", "system", "tool", "robot", "", "USER", None, 3]
HEADERS = ["good"] * 6 + ["none", "wrong", "scheme", "mangled", "x-key"]
# The first cases of every seed: each outcome the run must reach, whatever the draws after them.
FIRST = [("valid", "good"), ("big", "good"), ("field", "good"), ("valid", "none")]


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
HOSTILE_TOOLS = [
    [TOOL],
    [TOOL, TOOL],  # a name twice
    [TOOL] * 200,  # past the cap (or the body's)
    [{"function": {"name": 5}}],
    [{"type": "function", "function": {"name": "f", "description": "d" * 3000}}],
    [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": s}}}}
     for s in ({"$ref": "#/nope"}, {"type": "string", "pattern": "^((a$"}, {"minLength": 9, "maxLength": 2})],
    {"f": TOOL},
]  # fmt: skip
CHOICES = [
    "required",
    "auto",
    "none",
    {"type": "function", "function": {"name": "f"}},
    {"type": "function"},
    "f",
    3,
]
CALLS = [
    [{"function": {"name": "f", "arguments": "{"}}],
    [{"function": {"name": "f", "arguments": {}}}],
    "f",
    [{}],
]


def mutate_body(rng: random.Random, body: dict, kind: str) -> bytes:
    if kind == "valid":
        return json.dumps(body).encode()
    if kind in ("field", "drop"):
        container, key = rng.choice(list(paths(body)))
        if kind == "drop" and isinstance(container, dict):
            del container[key]
        else:
            value = rng.choice(BAD)
            if key in TOKEN_FIELDS and isinstance(value, (int, float)) and not isinstance(value, bool):
                value = rng.choice([0, -5, 2**40, 1.5])
            if key in TOKEN_FIELDS and value in (None, True):
                value = -7
            container[key] = value
        return json.dumps(body).encode()  # NaN and Infinity are written bare, as some clients do
    if kind == "cut":
        data = json.dumps(body).encode()
        return data[: rng.randrange(len(data))]
    if kind == "deep":
        depth = rng.choice([50, 5000, 50000])
        return b"[" * depth + b"]" * depth if rng.random() < 0.5 else b'{"a":' * depth + b"1" + b"}" * depth
    if kind == "nested":  # one field, or a call's string of arguments, nested near or past the limit
        depth = rng.choice([60, 70, 450, 900])
        deep = "[" * depth + "1" + "]" * depth
        messages = body.get("messages")
        if messages is not None and rng.random() < 0.4:
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "f", "arguments": '{"a": ' + deep + "}"},
            }
            messages += [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "user", "content": "Hi."},
            ]
            return json.dumps(body).encode()
        container, key = rng.choice(list(paths(body)))
        container[key] = "__DEEP__"
        return json.dumps(body).replace('"__DEEP__"', deep).encode()
    if kind == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    if kind == "repeated":  # a key given twice: which one counts would be a parser's whim
        data = json.dumps(body).encode()
        return data[:-1] + b', "' + rng.choice(list(body)).encode() + b'": 1}'
    if kind == "digits":  # a number of hundreds of digits, or one past a float's range, in any field
        digits = "9" * rng.choice([20, 400, 1000]) + rng.choice(["", ".5", "e400", "e-400"])
        key = rng.choice([*body, "seed", "temperature"])
        return json.dumps({**body, key: "__N__"}).replace('"__N__"', digits).encode()
    messages = body.get("messages")
    if (
        kind in ("parts", "role", "many", "tools") and messages is None
    ):  # the completion routes: the hostile shapes of a prompt instead
        body["prompt"] = rng.choice([[], ["a", "b"], [{"type": "text", "text": "a"}], {"x": 1}, "\x00" * 50])
        return json.dumps(body).encode()
    if kind == "parts":
        parts = [
            {"type": "text", "text": "a"},
            {"type": "image_url", "image_url": "x"},
            {"text": 1},
            "a",
            None,
        ]
        messages[0]["content"] = rng.sample(parts, rng.randrange(1, 4))
        return json.dumps(body).encode()
    if kind == "role":
        messages.insert(0, {"role": rng.choice(ROLES), "content": "Be brief."})
        return json.dumps(body).encode()
    if kind == "tools":  # the tools, the choice and an assistant's calls, each maybe hostile
        body["tools"], body["tool_choice"] = rng.choice(HOSTILE_TOOLS), rng.choice(CHOICES)
        if rng.random() < 0.5:
            messages.insert(0, {"role": rng.choice(ROLES), "content": None, "tool_calls": rng.choice(CALLS)})
        return json.dumps(body).encode()
    if kind == "many":  # many empty messages, under the body cap
        body["messages"] = [{"role": "user", "content": ""}] * rng.randrange(10, MAX_BODY // 40)
        return json.dumps(body).encode()
    assert kind == "big", kind
    body["pad"] = "y" * (MAX_BODY + rng.randrange(1, 4096))
    return json.dumps(body).encode()


def mutate_headers(kind: str) -> dict:
    return {
        "good": {"Authorization": f"Bearer {KEY}"},
        "none": {},
        "wrong": {"Authorization": f"Bearer {KEY}x"},
        "scheme": {"Authorization": f"Token {KEY}"},
        "mangled": {"Authorization": b"Bearer \xff\xfe" + KEY.encode()},
        "x-key": {"x-api-key": KEY},
    }[kind]


def well_formed_refusal(route: str, body: object) -> bool:
    """A refusal in the route's shape: Ollama's error string, or an error object with a message."""
    error = body.get("error") if isinstance(body, dict) else None
    if route.startswith("/api/"):
        return isinstance(error, str) and error != ""
    return isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"] != ""


def well_formed(route: str, response: httpx.Response) -> bool:
    kind = response.headers.get("content-type", "")
    if response.status_code == 200 and kind.startswith("application/x-ndjson"):  # a mutation set stream
        lines = [json.loads(line) for line in response.text.splitlines()]
        return lines[-1]["done"] is True and not any(line["done"] for line in lines[:-1])
    if response.status_code == 200 and kind.startswith("text/event-stream") and route in NAMED_EVENTS:
        last = response.text.rstrip().rsplit("\n", 1)[-1]
        return last.startswith(f'data: {{"type": "{NAMED_EVENTS[route]}"')
    if response.status_code == 200 and kind.startswith("text/event-stream"):
        events = response.text.split("\n\n")
        return events[-2:] == ["data: [DONE]", ""] and all(e.startswith("data: {") for e in events[:-2])
    body = response.json()
    if response.status_code == 200:  # OpenAI's choices, Ollama's, Anthropic's message, Responses' output
        shapes = ("choices", "message", "response", "output")
        return any(key in body for key in shapes) or body.get("type") == "message"
    return well_formed_refusal(route, body)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_malformed_requests_get_a_reply_or_a_well_formed_refusal(server, seed):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    for i in range(CASES):
        route = rng.choice(list(ROUTES))
        body_kind, header_kind = FIRST[i] if i < len(FIRST) else (rng.choice(BODIES), rng.choice(HEADERS))
        data = mutate_body(rng, json.loads(json.dumps(ROUTES[route])), body_kind)
        headers = mutate_headers(header_kind)
        response = httpx.post(server.url + route, content=data, headers=headers, timeout=60)
        where = f"seed {seed} case {i}: {route} {data[:120]!r} {headers} -> {response.status_code} "
        where += response.text[:200]
        assert response.status_code in (200, 400, 401, 404, 413), where
        assert well_formed(route, response), where
        counts[str(response.status_code)] += 1
    assert_reached(counts, "200", "400", "401", "413", seed=seed)
    assert httpx.get(server.url + "/health").status_code == 200
    assert server.running_after({"x-api-key": KEY}) == 0
