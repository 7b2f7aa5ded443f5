"""`llmcli serve` through the official openai and ollama clients and curl, on the embedded model.

On the shared server (tests/serve/conftest.py), with its key (every request here sends it) and its
small body cap.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import httpx
import jsonschema
import numpy as np
import pytest

from llmcli.stages import STAGES
from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, MAX_BODY

HI = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def client(server, openai_module):
    return openai_module.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0)


def post(server, path: str, body, headers=AUTH, timeout: float = 60) -> httpx.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return httpx.post(server.url + path, content=data, headers=headers, timeout=timeout)


# -- the openai client -------------------------------------------------------------------------
def test_openai_chat_answers_with_usage_and_the_seven_stages(client):
    reply = client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=8)
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and choice.message.content.strip()
    assert choice.finish_reason in ("stop", "length")
    usage = reply.usage
    assert 0 < usage.completion_tokens <= 8 and usage.prompt_tokens > 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    timings = reply.model_extra["timings"]
    assert timings["predicted_n"] == usage.completion_tokens
    assert timings["prompt_n"] + timings["cache_n"] == usage.prompt_tokens
    assert [s["name"] for s in timings["stages"]] == [s.key for s in STAGES]
    assert all(s["ms"] is not None and s["ms"] >= 0 for s in timings["stages"])


def test_openai_stream_gives_the_same_text_as_one_answer_and_usage_last(client):
    whole = client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=8, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=EMBEDDED_NAME,
            messages=HI,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert "timings" in chunks[-2].model_extra  # on the finishing chunk, as llama-server puts it


def test_openai_stream_without_include_usage_has_no_usage_chunk(client):
    chunks = list(client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=3, stream=True))
    assert all(c.choices for c in chunks) and all(c.usage is None for c in chunks)


DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
}
JSON_ASK = [{"role": "user", "content": "Give a JSON object with one field n, a digit."}]


def test_openai_json_schema_reply_parses_and_matches_the_schema(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}}
    r = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=JSON_ASK, max_tokens=48, temperature=0, response_format=fmt
    )
    assert r.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(r.choices[0].message.content), DIGIT)


def test_openai_json_object_and_grammar_constrain_the_reply(client, server):
    r = client.chat.completions.create(
        model=EMBEDDED_NAME,
        messages=JSON_ASK,
        max_tokens=64,
        temperature=0,
        response_format={"type": "json_object"},
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content), dict)
    # JSON mode promises an object even when the prompt asks for none (SmolLM2 answered "1.111..." or
    # a quoted greeting when any JSON value was allowed).
    for seed in range(3):
        hello = client.chat.completions.create(
            model=EMBEDDED_NAME,
            messages=HI,
            max_tokens=48,
            temperature=0.8,
            seed=seed,
            response_format={"type": "json_object"},
        ).choices[0]
        assert hello.message.content.lstrip().startswith("{"), hello.message.content
        if hello.finish_reason == "stop":
            assert isinstance(json.loads(hello.message.content), dict)
    grammar = 'root ::= ("yes" | "no") "."'
    r2 = post(server, "/v1/completions", {"prompt": "Is water wet?", "max_tokens": 8, "grammar": grammar})
    assert r2.status_code == 200 and r2.json()["choices"][0]["text"] in ("yes.", "no.")


@pytest.mark.parametrize(
    "body, param, words",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}},
            "response_format.json_schema.schema",
            "response_format.json_schema.schema is not a valid JSON Schema",
        ),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", "with a schema"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"schema": {"patternProperties": {}}},
                }
            },
            "response_format.json_schema.schema",
            "response_format.json_schema.schema: unsupported keyword 'patternProperties'",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "text, json_object or json_schema"),
        ({"grammar": "root ::= (", "max_tokens": 4}, "grammar", "grammar is not a valid GBNF grammar"),
        ({"grammar": 'root ::= "a"', "response_format": {"type": "json_object"}}, "grammar", "only one"),
    ],
)
def test_a_bad_constraint_is_400_naming_its_field(client, openai_module, body, param, words):
    with pytest.raises(openai_module.BadRequestError) as err:
        client.chat.completions.create(model=EMBEDDED_NAME, messages=HI, max_tokens=4, extra_body=body)
    assert err.value.status_code == 400
    assert err.value.body["param"] == param and words in err.value.body["message"], err.value.body


def test_openai_completion_continues_the_raw_prompt(client):
    reply = client.completions.create(model=EMBEDDED_NAME, prompt="The capital of France is", max_tokens=4)
    assert reply.choices[0].text and reply.usage.completion_tokens <= 4
    assert reply.usage.prompt_tokens < 10  # no chat template around it


COLOUR = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "My favourite colour is"},
]


@pytest.mark.parametrize("flag", [{"continue_final_message": True}, {"add_generation_prompt": False}])
def test_a_final_assistant_message_is_continued_with_the_prompt_transformers_makes(client, runtime, flag):
    from llmcli.engine.messages import Message
    from llmcli.engine.templates.render import ChatTemplate

    def special(token: int) -> str:
        return runtime.piece(token, special=True).decode()

    template = ChatTemplate(
        runtime.chat_template, bos_token=special(runtime.bos_id), eos_token=special(runtime.eos_id)
    )
    messages = [Message(m["role"], m["content"]) for m in COLOUR]
    continued = template.tokenize(runtime, messages, continue_final=True)
    reply = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=COLOUR, max_tokens=4, extra_body=flag
    )
    answered = client.chat.completions.create(model=EMBEDDED_NAME, messages=COLOUR, max_tokens=4)
    assert reply.usage.prompt_tokens == len(continued.tokens)
    assert reply.usage.prompt_tokens < answered.usage.prompt_tokens  # no end of turn, no new header
    assert reply.choices[0].message.content


@pytest.mark.parametrize(
    "messages, flags, words",
    [
        (HI, {"continue_final_message": True}, "needs the last message to be the assistant's"),
        (HI, {"add_generation_prompt": False}, "needs the last message to be the assistant's"),
        (COLOUR, {"continue_final_message": True, "add_generation_prompt": True}, "cannot both be true"),
    ],
)
def test_continuing_a_message_that_cannot_be_continued_is_400_naming_the_field(
    client, openai_module, messages, flags, words
):
    with pytest.raises(openai_module.BadRequestError) as err:
        client.chat.completions.create(model=EMBEDDED_NAME, messages=messages, max_tokens=4, extra_body=flags)
    assert err.value.status_code == 400
    body = err.value.body
    assert body["param"] == "continue_final_message" and words in body["message"], body
    assert "continue_final_message" in body["message"]


def test_a_prompt_that_starts_like_an_earlier_one_shares_its_cells(client):
    system = {"role": "system", "content": "You answer in one short sentence about colours and paint. " * 4}
    first = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=[system, {"role": "user", "content": "Is red warm?"}], max_tokens=2
    )
    second = client.chat.completions.create(
        model=EMBEDDED_NAME, messages=[system, {"role": "user", "content": "Is blue cold?"}], max_tokens=2
    )
    shared = second.model_extra["timings"]["cache_n"]
    assert first.usage.prompt_tokens > 40 and shared > 40  # the system prompt, prefilled once
    assert second.model_extra["timings"]["prompt_n"] == second.usage.prompt_tokens - shared
    assert second.usage.prompt_tokens_details.cached_tokens == shared


def test_requests_decoded_together_each_get_their_own_continuation(server):
    from concurrent.futures import ThreadPoolExecutor

    # Sequences a small model continues the one obvious way: a reply in the wrong place shows.
    prompts = {
        "1, 2, 3, 4, 5,": "6",
        "a, b, c, d, e,": "f",
        "Monday, Tuesday, Wednesday,": "Thursday",
    }

    def complete(prompt: str) -> str:
        r = post(server, "/v1/completions", {"prompt": prompt, "max_tokens": 3, "temperature": 0})
        return r.json()["choices"][0]["text"]

    with ThreadPoolExecutor(len(prompts)) as pool:  # three at once on two sequences: one waits
        replies = dict(zip(prompts, pool.map(complete, prompts), strict=True))
    for prompt, reply in replies.items():
        assert prompts[prompt] in reply, replies
        assert not any(word in reply for word in prompts.values() if word != prompts[prompt]), replies


def test_openai_models_lists_the_default_model(client):
    assert [m.id for m in client.models.list().data] == [EMBEDDED_NAME]


# -- the ollama client -------------------------------------------------------------------------
def test_ollama_chat_streamed_and_whole_agree(server, ollama_module):
    ollama = ollama_module.Client(host=server.url, headers=AUTH)
    options = {"num_predict": 6, "temperature": 0}
    whole = ollama.chat(model=EMBEDDED_NAME, messages=HI, options=options)
    parts = list(ollama.chat(model=EMBEDDED_NAME, messages=HI, options=options, stream=True))
    assert whole.message.content and "".join(p.message.content for p in parts) == whole.message.content
    assert parts[-1].done and not any(p.done for p in parts[:-1])
    assert whole.eval_count == parts[-1].eval_count and 0 < whole.eval_count <= 6
    assert whole.done_reason in ("stop", "length") and whole.eval_duration > 0


COUNT = [{"role": "user", "content": "Count from 1 to 30, one number per line, like: 1, 1, 1, 1"}]


def test_repeat_penalty_reaches_the_sampler_from_both_apis(client, server, ollama_module):
    # Greedy SmolLM2 answers "1, 1, 1, ..." here; a repeat penalty makes it say something else.
    def openai_text(**extra) -> str:
        reply = client.chat.completions.create(
            model=EMBEDDED_NAME, messages=COUNT, max_tokens=24, temperature=0, extra_body=extra
        )
        return reply.choices[0].message.content

    plain, penalised = openai_text(), openai_text(repetition_penalty=1.5)
    assert penalised != plain and penalised.count("1,") < plain.count("1,")
    ollama = ollama_module.Client(host=server.url, headers=AUTH)
    options = {"num_predict": 24, "temperature": 0, "repeat_penalty": 1.5}
    assert ollama.chat(model=EMBEDDED_NAME, messages=COUNT, options=options).message.content == penalised


def test_ollama_generate_and_list(server, ollama_module):
    ollama = ollama_module.Client(host=server.url, headers=AUTH)
    reply = ollama.generate(model=EMBEDDED_NAME, prompt="Say hello.", options={"num_predict": 4})
    assert reply.response and reply.done and reply.prompt_eval_count > 3
    (entry,) = ollama.list().models
    assert entry.model == f"{EMBEDDED_NAME}:latest" and entry.size > 1_000_000
    assert entry.details.format == "gguf"
    shown = ollama.show(EMBEDDED_NAME)
    assert "im_start" in shown.template and shown.details.family == "llama"


def test_ollama_version_and_show_of_another_model(server):
    assert httpx.get(server.url + "/api/version", headers=AUTH).json()["version"]
    missing = post(server, "/api/show", {"model": "llama3:70b"})
    assert missing.status_code == 404 and "not found" in missing.json()["error"]


# -- curl: the SSE framing, as any client sees it ----------------------------------------------
def test_curl_sees_sse_events_each_a_data_line_and_a_blank_line_ending_with_done(server):
    curl = shutil.which("curl")
    assert curl, "the SSE framing test needs curl"
    body = json.dumps({"messages": HI, "max_tokens": 4, "stream": True})
    out = subprocess.run(
        [
            curl,
            "-sN",
            "-D",
            "-",
            "-H",
            f"Authorization: Bearer {KEY}",
            "-d",
            body,
            server.url + "/v1/chat/completions",
        ],
        capture_output=True,
        timeout=60,
    ).stdout.decode()  # bytes: text mode would turn the header's CRLF into LF
    head, _, stream = out.partition("\r\n\r\n")
    assert "content-type: text/event-stream" in head.lower()
    events = stream.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    for event in events[:-2]:
        assert event.startswith("data: ") and "\n" not in event
        assert json.loads(event[6:])["object"] == "chat.completion.chunk"


# -- refusals: status and body -----------------------------------------------------------------
@pytest.mark.parametrize(
    "headers,why",
    [
        ({}, "needs an API key"),
        ({"Authorization": "Bearer nope"}, "not valid"),
        ({"x-api-key": "nope"}, "not valid"),
        ({"Authorization": f"Basic {KEY}"}, "needs an API key"),
    ],
)
def test_a_missing_or_wrong_key_is_401_in_openais_shape(server, headers, why):
    r = post(server, "/v1/chat/completions", {"messages": HI}, headers=headers)
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    error = r.json()["error"]
    assert why in error["message"] and error["type"] == "authentication_error" and KEY not in r.text


def test_x_api_key_is_accepted_and_ollama_routes_get_ollamas_error_shape(server):
    assert httpx.get(server.url + "/v1/models", headers={"x-api-key": KEY}).status_code == 200
    r = httpx.get(server.url + "/api/tags")
    assert r.status_code == 401 and isinstance(r.json()["error"], str)


def test_health_needs_no_key(server):
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_the_root_says_it_runs_without_a_key_in_the_words_ollamas_clients_probe_for(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.text == "Ollama is running"


GET_ROUTES = [("/", {}), ("/health", {}), ("/v1/models", AUTH), ("/api/tags", AUTH)]


@pytest.mark.parametrize("path,headers", GET_ROUTES)
def test_head_answers_as_get_without_a_body(server, path, headers):
    get, head = httpx.get(server.url + path, headers=headers), httpx.head(server.url + path, headers=headers)
    assert get.status_code == head.status_code == 200 and get.content and head.content == b""
    assert head.headers["content-type"] == get.headers["content-type"]


def test_head_needs_the_key_its_get_needs(server):
    assert httpx.head(server.url + "/v1/models").status_code == 401


def test_a_body_over_max_body_is_413_declared_or_chunked(server):
    big = json.dumps({"messages": [{"role": "user", "content": "x" * MAX_BODY}]}).encode()
    declared = post(server, "/v1/chat/completions", big)
    assert declared.status_code == 413 and "--max-body" in declared.json()["error"]["message"]

    def chunks():
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    chunked = httpx.post(server.url + "/v1/chat/completions", content=chunks(), headers=AUTH, timeout=30)
    assert chunked.status_code == 413 and "--max-body" in chunked.json()["error"]["message"]


@pytest.mark.parametrize(
    "path,body,param,words",
    [
        ("/v1/chat/completions", b"{not json", None, "not valid JSON"),
        ("/v1/chat/completions", b"[1, 2]", None, "must be a JSON object"),
        ("/v1/chat/completions", {"max_tokens": 4}, "messages", "non-empty list"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "robot", "content": "hi"}]},
            "messages[0].role",
            "one of",
        ),
        ("/v1/chat/completions", {"messages": HI, "temperature": 11}, "temperature", "0..10"),
        ("/v1/chat/completions", {"messages": HI, "top_p": "high"}, "top_p", "a number in 0..1"),
        ("/v1/chat/completions", {"messages": HI, "max_tokens": 0}, "max_tokens", "1.."),
        (
            "/v1/chat/completions",
            {"messages": HI, "max_tokens": 5000},
            "max_tokens",
            "maximum context length is 1024 tokens",
        ),
        ("/v1/chat/completions", {"messages": HI, "seed": -2}, "seed", "0..4294967295"),
        ("/v1/chat/completions", {"messages": HI, "stop": [1]}, "stop", "string"),
        ("/v1/chat/completions", {"messages": HI, "n": 9}, "n", "n must be in 1..8, not 9"),
        ("/v1/completions", {"prompt": "a", "n": 0}, "n", "n must be in 1..8, not 0"),
        ("/v1/chat/completions", {"messages": HI, "n": 2.5}, "n", "n must be an integer in 1..8"),
        (
            "/v1/chat/completions",
            {"messages": HI, "best_of": 2},
            "best_of",
            "best_of is not supported (send 1 or leave it out; n gives several choices)",
        ),
        ("/v1/chat/completions", {"messages": HI, "logprobs": 1}, "logprobs", "true or false"),
        (
            "/v1/chat/completions",
            {"messages": HI, "logprobs": True, "top_logprobs": 21},
            "top_logprobs",
            "top_logprobs must be in 0..20, not 21",
        ),
        (
            "/v1/chat/completions",
            {"messages": HI, "top_logprobs": 2},
            "top_logprobs",
            "The 'top_logprobs' parameter is only allowed when 'logprobs' is enabled; "
            'send "logprobs": true with it',
        ),
        (
            "/v1/chat/completions",
            {"messages": HI, "logprobs": False, "top_logprobs": 2},
            "top_logprobs",
            "only allowed when 'logprobs' is enabled",
        ),
        ("/v1/completions", {"prompt": "a", "logprobs": 6}, "logprobs", "logprobs must be in 0..5, not 6"),
        ("/v1/completions", {"prompt": "a", "logprobs": True}, "logprobs", "an integer in 0..5"),
        ("/v1/chat/completions", {"messages": HI, "stream": "yes"}, "stream", "true or false"),
        (
            "/v1/chat/completions",
            {"messages": HI, "stream_options": {"include_usage": True}},
            "stream_options",
            "stream",
        ),
        ("/v1/completions", {"prompt": ""}, "prompt", "non-empty"),
    ],
)
def test_bad_parameters_are_400_naming_the_field_with_llmclis_bounds(server, path, body, param, words):
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"] and error["type"] == "invalid_request_error"


LONE = "\\ud800"  # JSON's escape for half a surrogate pair: legal JSON, not text


@pytest.mark.parametrize(
    "path,raw,field",
    [
        (
            "/v1/chat/completions",
            f'{{"messages": [{{"role": "user", "content": "a{LONE}"}}]}}',
            "messages[0].content",
        ),
        ("/v1/chat/completions", f'{{"messages": [], "stream": true, "x{LONE}": 1}}', None),
        ("/v1/completions", f'{{"prompt": "{LONE}", "max_tokens": 2}}', "prompt"),
        (
            "/api/chat",
            f'{{"model": "m", "messages": [{{"role": "system", "content": "{LONE}"}}]}}',
            "messages[0].content",
        ),
        ("/api/generate", f'{{"model": "m", "prompt": "hi", "system": "{LONE}"}}', "system"),
        ("/api/show", f'{{"model": "{LONE}"}}', "model"),
    ],
)
def test_a_lone_surrogate_anywhere_in_a_body_is_a_400_and_the_server_goes_on(server, path, raw, field):
    r = post(server, path, raw.encode())
    assert r.status_code == 400, r.text
    message = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
    assert "lone surrogate" in message and (field is None or message.startswith(field)), message
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200
    again = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 2})
    assert again.status_code == 200, again.text


def test_a_prompt_longer_than_a_sequence_can_hold_is_400_naming_the_fix(server):
    long = [{"role": "user", "content": "a " * 1500}]
    r = post(server, "/v1/chat/completions", {"messages": long, "max_tokens": 2})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "messages" and error["code"] == "context_length_exceeded", error
    assert "maximum context length is 1024 tokens" in error["message"] and "--ctx" in error["message"]


@pytest.mark.parametrize(
    "body,words",
    [
        ({"messages": [{"role": "user", "content": "a " * 1500}]}, "at least"),
        ({"messages": HI, "options": {"num_predict": 5000}}, "5000 in the completion"),
    ],
    ids=["prompt", "prompt and num_predict"],
)
def test_what_does_not_fit_a_sequence_is_one_400_in_ollamas_words(server, body, words):
    r = post(server, "/api/chat", {"model": EMBEDDED_NAME, "stream": False, **body})
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert words in message and "over the 1024 a sequence can hold here" in message, message
    assert "shorten the prompt or lower the reply's token limit" in message and "--ctx" in message


def test_null_parameters_mean_the_servers_defaults(server):
    body = {"messages": HI, "max_tokens": 2, "temperature": None, "top_p": None, "seed": None, "stop": None}
    r = post(server, "/v1/chat/completions", body)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 2


def test_seed_minus_one_means_random_as_in_llama_cpp_and_ollama(server):
    # At temperature 2 the embedded model's 8-token replies are all but never equal by chance: a
    # fixed seed gives one reply twice, seed -1 gives several different ones in each API's shape.
    def openai(seed: int) -> str:
        body = {"messages": HI, "max_tokens": 8, "temperature": 2.0, "seed": seed}
        r = post(server, "/v1/chat/completions", body)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"]

    def ollama(seed: int) -> str:
        options = {"seed": seed, "num_predict": 8, "temperature": 2.0}
        r = post(server, "/api/chat", {"messages": HI, "stream": False, "options": options})
        assert r.status_code == 200, r.text
        return r.json()["message"]["content"]

    for ask in (openai, ollama):
        assert ask(7) == ask(7)
        assert len({ask(-1) for _ in range(4)}) > 1, ask.__name__


def test_ollama_bad_option_is_400_in_ollamas_shape(server):
    r = post(server, "/api/chat", {"model": EMBEDDED_NAME, "messages": HI, "options": {"temperature": -1}})
    assert r.status_code == 400 and r.json() == {"error": "options.temperature must be in 0..10, not -1"}


@pytest.mark.parametrize(
    "path,extra,words",
    [
        ("/api/chat", {"options": {"frequency_penalty": 0.5}}, "options.frequency_penalty is not supported"),
        ("/api/chat", {"options": {"presence_penalty": 1}}, "options.presence_penalty is not supported"),
        ("/api/chat", {"options": {"mirostat": 2}}, "options.mirostat is not supported (send 0"),
        ("/api/generate", {"options": {"typical_p": 0.5}}, "options.typical_p is not supported (send 1"),
        ("/api/generate", {"suffix": "return x"}, "suffix: insertion (suffix) is not supported"),
        ("/api/generate", {"template": "{{ .Prompt }}"}, "template: a request's own template"),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, "images"),
        ("/v1/chat/completions", {"logit_bias": {"42": 10}}, "logit_bias is not supported"),
        ("/v1/chat/completions", {"mirostat": 2}, "mirostat is not supported (send 0"),
        ("/v1/chat/completions", {"typical_p": 0.5}, "typical_p is not supported (send 1"),
        ("/v1/completions", {"tfs_z": 0.9}, "tfs_z is not supported (send 1"),
        ("/v1/chat/completions", {"dry_multiplier": 0.8}, "dry_multiplier is not supported"),
        ("/v1/completions", {"ignore_eos": True}, "ignore_eos is not supported"),
        ("/v1/chat/completions", {"min_tokens": 5}, "min_tokens is not supported"),
    ],
)
def test_a_field_that_would_change_the_reply_is_refused_never_ignored(server, path, extra, words):
    body = {"model": EMBEDDED_NAME, "messages": HI, "prompt": "hi", **extra}
    r = post(server, path, body)
    assert r.status_code == 400, r.text
    message = r.json()["error"] if path.startswith("/api/") else r.json()["error"]["message"]
    assert words in message, message


def test_the_same_fields_asking_for_nothing_are_accepted(server):
    neutral = {"frequency_penalty": 0, "presence_penalty": 0, "mirostat": 0, "typical_p": 1, "num_predict": 2}
    r = post(server, "/api/generate", {"prompt": "hi", "stream": False, "suffix": "", "options": neutral})
    assert r.status_code == 200, r.text
    neutral = {
        "logit_bias": {},
        "mirostat": 0,
        "typical_p": 1,
        "tfs_z": 1.0,
        "ignore_eos": False,
        "min_tokens": 0,
    }
    r = post(server, "/v1/chat/completions", {"messages": HI, "max_tokens": 2, **neutral})
    assert r.status_code == 200, r.text


def test_ollama_format_schema_and_json_constrain_the_reply(server, ollama_module):
    client = ollama_module.Client(host=server.url, headers=AUTH)
    r = client.chat(
        model=EMBEDDED_NAME, messages=JSON_ASK, format=DIGIT, options={"num_predict": 48, "temperature": 0}
    )
    jsonschema.validate(json.loads(r.message.content), DIGIT)
    r = client.generate(
        model=EMBEDDED_NAME, prompt=JSON_ASK[0]["content"], format="json", options={"num_predict": 64}
    )
    assert r.done_reason == "stop"
    assert isinstance(json.loads(r.response), dict)
    options = {"num_predict": 48, "seed": 1}
    hello = client.chat(model=EMBEDDED_NAME, messages=HI, format="json", options=options)
    assert hello.message.content.lstrip().startswith("{"), hello.message.content
    r = post(server, "/api/chat", {"model": EMBEDDED_NAME, "messages": HI, "format": {"type": 5}})
    assert r.status_code == 400 and r.json()["error"].startswith("format is not a valid JSON Schema")


# -- release -----------------------------------------------------------------------------------
CANCELLED = 'llmcli:requests_total{finished_reason="cancelled"}'


def test_a_client_that_leaves_mid_stream_frees_its_sequence(server):
    body = {"messages": HI, "max_tokens": 400, "stream": True}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60) as r:
        lines = r.iter_lines()
        seen = [line for line, _ in zip(lines, range(6), strict=False) if line.startswith("data: ")]
        assert len(seen) >= 2
        assert server.metric("llmcli:num_requests_running", AUTH) == 1
    # The connection is closed: the next step cancels the sequence and frees its cells.
    assert server.running_after(AUTH) == 0
    assert server.metric("llmcli:kv_cache_usage_perc", AUTH) == 0
    assert server.metric(CANCELLED, AUTH) >= 1


def test_a_client_that_leaves_before_a_whole_answer_frees_its_sequence(server):
    from tests.serve.raw import connect, head

    before = server.metric(CANCELLED, AUTH, absent=0)
    # The client leaves once the server says the request is decoding, not after a time: on a fast
    # backend a fixed wait outlasts the reply. The reply may fill the context, far more than the
    # few polls of /metrics it takes to see it running.
    body = json.dumps({"prompt": "1, 2, 3,", "max_tokens": 1000}).encode()
    headers = {**AUTH, "Content-Type": "application/json", "Content-Length": str(len(body))}
    with connect(server.url) as sock:
        sock.sendall(head("POST", "/v1/completions", headers) + body)
        assert server.metric_when("llmcli:num_requests_running", lambda running: running == 1, AUTH) == 1
    assert server.running_after(AUTH) == 0
    assert server.metric(CANCELLED, AUTH) == before + 1


# -- llmcli's own clients ----------------------------------------------------------------------
def test_llmcli_chat_endpoint_answers_through_the_server(server):
    from tests.support.cli import cli_process

    result = cli_process(
        "chat", "--endpoint", server.url + "/v1", "--api-key", KEY, "Say hello.", "-n", "4", "--json"
    )
    assert result.exit_code == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["text"] and document["usage"]["completion_tokens"] <= 4
    assert document["server"]["timings"]["predicted_n"] == document["usage"]["completion_tokens"]


def test_llmcli_bench_endpoint_measures_the_server(server):
    from tests.support.cli import cli_process

    result = cli_process(
        "bench", "--endpoint", server.url + "/v1", "--api-key", KEY,
        "--concurrency", "2", "--num-requests", "2", "--n-gen", "4", "-p", "16", "--json",
        "--slo-ttft", "600000", "--slo-e2el", "600000",  # ten minutes: every request is good
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = json.loads(result.stdout)
    assert row["completed"] == 2 and row["failed"] == 0 and row["usage_reported"], row
    assert row["total_output_tokens"] == 8  # 4 tokens each: the prompt is random, the count is exact
    # ITL: the gaps between a stream's text chunks, pooled over both requests (up to 3 each)
    gaps = row["samples_itl_ms"]
    assert 0 < len(gaps) <= 6, gaps
    assert row["mean_itl_ms"] == pytest.approx(float(np.mean(gaps)), abs=1e-3)
    assert row["std_itl_ms"] == pytest.approx(float(np.std(gaps)), abs=1e-3)  # the gaps', not requests' std
    assert 0 < row["p50_itl_ms"] <= row["p90_itl_ms"] <= row["p99_itl_ms"] < row["p99_e2el_ms"]
    assert row["good_requests"] == 2 and row["request_goodput"] == row["request_throughput"] > 0
    assert (row["slo_ttft_ms"], row["slo_tpot_ms"], row["slo_e2el_ms"]) == (600000, None, 600000)
