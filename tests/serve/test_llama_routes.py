"""llama-server's /tokenize, /detokenize and /apply-template, and `serve --chat-template`, on a server
whose template reads enable_thinking and reasoning_effort: every dialect's thinking switch (Ollama's
think, OpenAI's reasoning_effort and chat_template_kwargs, Anthropic's thinking, Responses'
reasoning.effort) reaches the template."""

from __future__ import annotations

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, ServeProcess

# ChatML, with Qwen3's no-think form and gpt-oss's level written where the reply starts.
TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% if reasoning_effort is defined %}effort: {{ reasoning_effort }}\n{% endif %}"
    "{%- endif %}"
)
HI = [{"role": "user", "content": "Hi."}]
NO_THINK = "<think>\n\n</think>\n\n"


@pytest.fixture(scope="module")
def templated(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-template")
    template = home / "thinking.jinja"
    template.write_text(TEMPLATE)
    srv = ServeProcess(home, "--api-key", KEY, "--chat-template", str(template))
    yield srv
    assert srv.stop() == 0


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=60)


def test_tokenize_and_detokenize_round_trip_with_pieces(templated):
    ids = post(templated, "/tokenize", {"content": "Hello world"}).json()["tokens"]
    assert ids and all(isinstance(t, int) for t in ids)
    pieces = post(templated, "/tokenize", {"content": "Hello world", "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == "Hello world"
    assert post(templated, "/detokenize", {"tokens": ids}).json() == {"content": "Hello world"}


def test_a_token_id_past_the_vocabulary_is_a_400_naming_it(templated):
    answer = post(templated, "/detokenize", {"tokens": [1, 10**8]})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "tokens[1]"
    assert answer.json()["error"]["message"].startswith("tokens[1] 100000000 is not a token of this model")


def test_apply_template_renders_serves_template_and_the_thinking_switches(templated):
    plain = post(templated, "/apply-template", {"messages": HI}).json()["prompt"]
    assert plain == "<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\n"
    off = {"messages": HI, "chat_template_kwargs": {"enable_thinking": False}}
    assert post(templated, "/apply-template", off).json()["prompt"] == plain + NO_THINK
    high = post(templated, "/apply-template", {"messages": HI, "reasoning_effort": "high"}).json()["prompt"]
    assert high == plain + "effort: high\n"
    none = post(templated, "/apply-template", {"messages": HI, "reasoning_effort": "none"}).json()["prompt"]
    assert none == plain + NO_THINK


def ollama_prompt(server, think) -> int:
    body = {
        "model": EMBEDDED_NAME,
        "messages": HI,
        "stream": False,
        "think": think,
        "options": {"num_predict": 1},
    }
    return post(server, "/api/chat", body).json()["prompt_eval_count"]


def test_each_dialect_s_thinking_switch_reaches_the_template(templated):
    assert ollama_prompt(templated, False) > ollama_prompt(templated, True)
    assert ollama_prompt(templated, "high") > ollama_prompt(templated, True)  # the level is written

    def anthropic(thinking: dict) -> int:
        body = {"model": EMBEDDED_NAME, "messages": HI, "thinking": thinking}
        return post(templated, "/v1/messages/count_tokens", body).json()["input_tokens"]

    assert anthropic({"type": "disabled"}) > anthropic({"type": "enabled", "budget_tokens": 1024})

    def responses(reasoning: dict) -> int:
        body = {"model": EMBEDDED_NAME, "input": "Hi.", "reasoning": reasoning}
        return post(templated, "/v1/responses/input_tokens", body).json()["input_tokens"]

    plain = responses({})
    assert responses({"effort": "none"}) > plain and responses({"effort": "high"}) > plain


@pytest.mark.parametrize(
    "path, body, field",
    [
        ("/api/chat", {"messages": HI, "think": "maybe"}, "think"),
        ("/v1/chat/completions", {"messages": HI, "reasoning_effort": "max"}, "reasoning_effort"),
        (
            "/v1/chat/completions",
            {"messages": HI, "chat_template_kwargs": {"enable_thinking": 1}},
            "chat_template_kwargs",
        ),
        ("/v1/responses", {"input": "Hi", "reasoning": {"effort": "max"}}, "reasoning.effort"),
        ("/v1/messages", {"messages": HI, "max_tokens": 2, "thinking": {"type": "on"}}, "thinking"),
    ],
)
def test_a_thinking_switch_out_of_its_values_is_a_400_naming_it(templated, path, body, field):
    answer = post(templated, path, {"model": EMBEDDED_NAME, **body})
    assert answer.status_code == 400
    error = answer.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert message.startswith(field), message
