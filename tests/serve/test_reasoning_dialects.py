"""A reply's reasoning in the newer dialects, on a server whose template opens `<think>` where the
reply starts (as the DeepSeek-R1 distills' do), so that the embedded model's reply is reasoning
until it closes the block: Anthropic's thinking block (thinking_delta, then signature_delta) before
the text, Responses' reasoning item (rs_, reasoning_text deltas) before the message. Anthropic's
`thinking.budget_tokens` ends the thinking after that many tokens, and the usage of Responses and
OpenAI's chat counts the reasoning tokens apart."""

from __future__ import annotations

import json

import httpx
import pytest

from llmcli.store import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, ServeProcess
from tests.support.deps import require

TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
HI = [{"role": "user", "content": "Hi."}]
BUDGET = 6  # reasoning tokens


@pytest.fixture(scope="module")
def thinking(tmp_path_factory, embedded_path):
    home = tmp_path_factory.mktemp("serve-thinking")
    template = home / "opens-thinking.jinja"
    template.write_text(TEMPLATE)
    srv = ServeProcess(home, "--api-key", KEY, "--chat-template", str(template))
    yield srv
    assert srv.stop() == 0


def test_anthropic_streams_a_thinking_block_the_sdk_accumulates(thinking):
    anthropic = require("anthropic")
    client = anthropic.Anthropic(base_url=thinking.url, api_key=KEY, max_retries=0)
    deltas = []
    with client.messages.stream(model=EMBEDDED_NAME, max_tokens=8, messages=HI) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                deltas.append(event.delta.type)
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas
    whole = client.messages.create(model=EMBEDDED_NAME, max_tokens=8, messages=HI)
    assert [block.type for block in whole.content] == [block.type for block in final.content]
    assert whole.content[0].thinking == final.content[0].thinking


def test_responses_gives_a_reasoning_item_streamed_and_whole(thinking):
    body = {"model": EMBEDDED_NAME, "input": "Hi.", "max_output_tokens": 8}
    whole = httpx.post(thinking.url + "/v1/responses", json=body, headers=AUTH, timeout=60).json()
    item = whole["output"][0]
    assert item["type"] == "reasoning" and item["id"].startswith("rs_") and item["content"][0]["text"]
    events = []
    streamed = {**body, "stream": True}
    with httpx.stream("POST", thinking.url + "/v1/responses", json=streamed, headers=AUTH) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    assert deltas == item["content"][0]["text"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == deltas


def test_anthropic_budget_tokens_ends_the_thinking_and_the_answer_follows(thinking):
    anthropic = require("anthropic")
    client = anthropic.Anthropic(base_url=thinking.url, api_key=KEY, max_retries=0)
    free = client.messages.create(model=EMBEDDED_NAME, max_tokens=40, messages=HI)
    assert [block.type for block in free.content] == ["thinking"]  # the 135M model never closes it
    budget = {"type": "enabled", "budget_tokens": BUDGET}
    held = client.messages.create(model=EMBEDDED_NAME, max_tokens=40, messages=HI, thinking=budget)
    assert [block.type for block in held.content] == ["thinking", "text"] and held.content[1].text
    # greedy: the same thinking, cut after BUDGET tokens (the forced close begins with a line break)
    thought = held.content[0].thinking.removesuffix("\n")
    assert free.content[0].thinking.startswith(thought) and len(thought) < len(free.content[0].thinking)
    tokens = httpx.post(thinking.url + "/tokenize", json={"content": thought}, headers=AUTH, timeout=60)
    assert len(tokens.json()["tokens"]) == BUDGET
    with client.messages.stream(model=EMBEDDED_NAME, max_tokens=40, messages=HI, thinking=budget) as stream:
        final = stream.get_final_message()
    assert [(b.type, getattr(b, "thinking", None) or b.text) for b in final.content] == [
        (b.type, getattr(b, "thinking", None) or b.text) for b in held.content
    ]


def test_a_bad_budget_is_a_400_naming_it(thinking):
    body = {"model": EMBEDDED_NAME, "max_tokens": 4, "messages": HI}
    body["thinking"] = {"type": "enabled", "budget_tokens": -1}
    answer = httpx.post(thinking.url + "/v1/messages", json=body, headers=AUTH, timeout=60)
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "type": "invalid_request_error",
        "message": "thinking.budget_tokens must be an integer of at least 0",
    }


def test_usage_counts_the_reasoning_tokens_apart(thinking):
    # Cut inside the thinking, every reply token is reasoning; the shared server's template has no
    # thinking form, and counts none (test_openai_responses).
    body = {"model": EMBEDDED_NAME, "input": "Hi.", "max_output_tokens": 8}
    usage = httpx.post(thinking.url + "/v1/responses", json=body, headers=AUTH, timeout=60).json()["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] == usage["output_tokens"] == 8
    chat = {"model": EMBEDDED_NAME, "messages": HI, "max_tokens": 8}
    usage = httpx.post(thinking.url + "/v1/chat/completions", json=chat, headers=AUTH, timeout=60).json()[
        "usage"
    ]
    assert usage["completion_tokens_details"]["reasoning_tokens"] == usage["completion_tokens"] == 8
