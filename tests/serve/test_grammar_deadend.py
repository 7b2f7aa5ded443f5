"""A grammar no token can satisfy never takes the server down: refused with a 400, or the reply ends.

llama.cpp aborts the process when its grammar reaches a state no token continues (an empty character
class, a NUL literal, a token that is never sampled), which once cut every client of `llmcli serve`
off at the first sampled token. Each case here is sent to the shared server, and a plain request on
the same server must still be answered afterwards.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.serve.server import AUTH

HI = [{"role": "user", "content": "Say hello."}]
CLASS = "matches no character a model can write"
LITERAL = "which no model can write"

# (grammar, words of the 400's message): each parses, and each demands what no model can write.
IMPOSSIBLE = [
    (
        r"root ::= [^\x00-\U0010FFFF]",
        f"the character class [^\\x00-\\U0010FFFF] at line 1, column 10 {CLASS}",
    ),
    ("root ::= [z-a]", f"the character class [z-a] at line 1, column 10 {CLASS}"),
    (r'root ::= "\x00"', f'the literal "\\x00" at line 1, column 10 holds NUL (\\x00), {LITERAL}'),
    (r'root ::= "a" x' + "\n" + r"x ::= [\uD800-\uDFFF]+", f"at line 2, column 7 {CLASS}"),
    (r'root ::= "ok" | "\U00110000"', f"holds U+110000, {LITERAL}"),
    (r"root ::= [\x00]", CLASS),
    ('root ::= "a"\x00 junk', "holds a NUL character at line 1, column 13"),
]


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, content=json.dumps(body), headers=AUTH, timeout=60)


def assert_still_serves(server) -> None:
    r = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 4})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"], r.text
    assert server.proc.poll() is None
    assert server.running_after(AUTH) == 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
@pytest.mark.parametrize("grammar, words", IMPOSSIBLE)
def test_an_impossible_grammar_is_a_400_naming_the_field_and_the_server_goes_on(server, path, grammar, words):
    body = {"max_tokens": 4, "grammar": grammar}
    body.update({"messages": HI} if "chat" in path else {"prompt": "Hello"})
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "grammar" and words in error["message"], error
    assert error["message"].startswith("grammar") and "fix the grammar" in error["message"]
    assert_still_serves(server)


@pytest.mark.parametrize("stream", [False, True])
def test_a_grammar_that_reaches_a_dead_end_ends_the_reply_cleanly(server, stream):
    # Token 999999 is past the vocabulary: nothing can follow "a". No text check can see that; the
    # sampler finds no candidate left and ends the reply with "stop".
    body = {"messages": HI, "max_tokens": 8, "grammar": 'root ::= "a" <[999999]>', "stream": stream}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    if stream:
        chunks = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
        finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        assert r.text.rstrip().endswith("data: [DONE]")
    else:
        choice = r.json()["choices"][0]
        text, finish = choice["message"]["content"], choice["finish_reason"]
    assert (text, finish) == ("a", "stop")
    assert_still_serves(server)


def test_a_grammar_on_an_end_token_alone_gives_an_empty_reply(server):
    # <|im_end|> (token 2) ends generation, which llama.cpp's grammar never lets through while the
    # grammar is incomplete: a dead end at the very first token.
    r = post(server, "/v1/completions", {"prompt": "Hello", "max_tokens": 4, "grammar": "root ::= <[2]>"})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == ("", "stop")
    assert_still_serves(server)


@pytest.mark.parametrize(
    "schema, words",
    [
        (
            {"type": "string", "minLength": 5, "maxLength": 2},
            "minLength 5 above maxLength 2 leaves no string",
        ),
        (
            {"type": "array", "items": {"type": "integer"}, "minItems": 3, "maxItems": 1},
            "minItems 3 above maxItems 1 leaves no array",
        ),
        (
            {"type": "object", "properties": {"n": {"type": "number", "exclusiveMinimum": 2, "maximum": 2}}},
            "exclusiveMinimum 2 and maximum 2 leave no number at /properties/n",
        ),
    ],
)
def test_contradictory_schema_bounds_are_a_400_naming_the_field(server, schema, words):
    body = {
        "messages": HI,
        "max_tokens": 4,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    field = "response_format.json_schema.schema"
    assert error["param"] == field and error["message"].startswith(f"{field}: {words}"), error
    ollama = httpx.post(
        server.url + "/api/chat",
        content=json.dumps({"model": "x", "messages": HI, "stream": False, "format": schema}),
        headers=AUTH,
        timeout=60,
    )
    assert ollama.status_code == 400 and words in ollama.json()["error"], ollama.text
    assert_still_serves(server)
