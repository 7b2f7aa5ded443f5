"""logprobs / top_logprobs and n on OpenAI's routes, on the shared server (tests/serve/conftest.py).

The log-probabilities are checked against a log-softmax computed here from llama.cpp's own logits
(llama-cpp-python's high-level Llama, logits_all), and the n choices against the server's own count
of prompt tokens it computed (llmcli:prefill_tokens): n choices of one prompt prefill it once.
"""

from __future__ import annotations

import json
import math
import uuid

import httpx
import numpy as np
import pytest

from tests.serve.server import AUTH, HANG_GUARD_S, KEY, ServeProcess
from tests.support.deps import require

HI = [{"role": "user", "content": "Name three fruits."}]
# A batch's kernels and thread count round a logits row differently (see test_batched.py's ROUNDING);
# a log-probability read from the wrong row or the wrong token is off by far more.
LOGPROB_ROUNDING = 0.1
PREFILLED = "llmcli:prefill_tokens_total"
EXACT = 1e-3  # the same computation in float32, summed in another order


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=AUTH, timeout=HANG_GUARD_S)


def ok(server, path: str, body: dict) -> dict:
    r = post(server, path, body)
    assert r.status_code == 200, r.text
    return r.json()


def sse(server, path: str, body: dict) -> list[dict]:
    chunks = []
    with httpx.stream(
        "POST", server.url + path, json={**body, "stream": True}, headers=AUTH, timeout=HANG_GUARD_S
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def streamed_logprobs(chunks: list[dict], index: int = 0) -> list[dict]:
    """The chat logprobs of choice `index`, joined from a stream's chunks."""
    entries: list[dict] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            if choice["index"] == index and choice.get("logprobs"):
                entries += choice["logprobs"]["content"]
    return entries


# -- log-probabilities -----------------------------------------------------------------------------
def test_at_temperature_0_each_token_is_the_most_likely_and_the_shape_is_openais(server):
    body = {"messages": HI, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 5}
    answer = ok(server, "/v1/chat/completions", body)
    choice = answer["choices"][0]
    content = choice["logprobs"]["content"]
    assert len(content) == answer["usage"]["completion_tokens"] == 8
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        top = entry["top_logprobs"]
        assert len(top) == 5
        assert (entry["token"], entry["logprob"], entry["bytes"]) == (
            top[0]["token"],
            top[0]["logprob"],
            top[0]["bytes"],
        )
        values = [t["logprob"] for t in top]
        assert values == sorted(values, reverse=True) and all(v <= 0 for v in values)
        assert sum(math.exp(v) for v in values) <= 1 + 1e-9
    assert bytes(b for entry in content for b in entry["bytes"]).decode() == choice["message"]["content"]


def test_logprobs_without_top_logprobs_give_the_chosen_token_only(server):
    body = {"messages": HI, "max_tokens": 3, "temperature": 0, "logprobs": True}
    content = ok(server, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    assert len(content) == 3 and all(entry["top_logprobs"] == [] for entry in content)
    plain = ok(server, "/v1/chat/completions", {**body, "logprobs": False})["choices"][0]
    assert plain["logprobs"] is None


def test_the_values_are_a_log_softmax_of_llama_cpps_logits(server, embedded_path):
    llama_cpp = require("llama_cpp")
    prompt = "The tallest mountain in Wales is"  # no other test's: the server prefills all of it
    body = {"prompt": prompt, "max_tokens": 3, "temperature": 0, "logprobs": 5}
    got = ok(server, "/v1/completions", body)["choices"][0]["logprobs"]
    # as the server computes them: flash attention, one thread, the prompt in one batch, then a token
    # a step (another attention kernel moves a low log-probability by ~0.2)
    llm = llama_cpp.Llama(
        model_path=embedded_path, logits_all=True, n_ctx=256, n_threads=1, flash_attn=True, verbose=False
    )
    try:
        step = llm.tokenize(prompt.encode(), add_bos=True)
        for k, chosen in enumerate(got["tokens"]):
            llm.eval(step)
            row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            expected = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
            likely = [int(t) for t in np.argsort(-expected)[:10]]
            ids = {llm.detokenize([t]).decode("utf-8", "replace"): t for t in likely}
            assert list(got["top_logprobs"][k]) == list(ids)[:5]
            for text, logprob in got["top_logprobs"][k].items():
                assert abs(logprob - expected[ids[text]]) < EXACT, (k, text, logprob, expected[ids[text]])
            assert got["token_logprobs"][k] == got["top_logprobs"][k][chosen]
            step = [ids[chosen]]
    finally:
        llm.close()


def test_a_stream_carries_the_same_logprobs_as_the_whole_answer(server):
    body = {"messages": HI, "max_tokens": 8, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    whole = ok(server, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    streamed = streamed_logprobs(sse(server, "/v1/chat/completions", body))
    assert_same_logprobs(streamed, whole)


def assert_same_logprobs(got: list[dict], expected: list[dict]) -> None:
    """The same tokens with the same values, but for rounding: the second request shares the first's
    prompt cells and computes its last token in another batch."""
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert (a["token"], a["bytes"]) == (b["token"], b["bytes"])
        assert abs(a["logprob"] - b["logprob"]) < LOGPROB_ROUNDING
        assert [t["token"] for t in a["top_logprobs"]] == [t["token"] for t in b["top_logprobs"]]


def test_a_completion_gives_tokens_offsets_and_the_chosen_among_the_most_likely(server):
    body = {"prompt": "1, 2, 3,", "max_tokens": 6, "temperature": 0, "logprobs": 2}
    choice = ok(server, "/v1/completions", body)["choices"][0]
    lp = choice["logprobs"]
    assert "".join(lp["tokens"]) == choice["text"]
    offsets = [sum(len(t) for t in lp["tokens"][:i]) for i in range(len(lp["tokens"]))]
    assert lp["text_offset"] == offsets
    for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert top[token] == logprob == max(top.values()) and len(top) == 2
    chunks = sse(server, "/v1/completions", body)
    joined: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for chunk in chunks:
        for part in chunk["choices"]:
            for key, values in (part["logprobs"] or {}).items():
                joined[key] += values
    assert (joined["tokens"], joined["text_offset"]) == (lp["tokens"], lp["text_offset"])
    assert np.allclose(joined["token_logprobs"], lp["token_logprobs"], atol=LOGPROB_ROUNDING)


def test_a_token_that_is_part_of_a_character_carries_its_raw_bytes(server):
    emoji = [{"role": "user", "content": "Reply with emoji only: 🙂🎉🚀🌍"}]
    body = {"messages": emoji, "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 20}
    content = ok(server, "/v1/chat/completions", body)["choices"][0]["logprobs"]["content"]
    candidates = [c for entry in content for c in [entry, *entry["top_logprobs"]]]
    partial = []
    for c in candidates:
        raw = bytes(c["bytes"])
        try:
            assert c["token"] == raw.decode("utf-8")
        except UnicodeDecodeError:
            partial.append(c)
            assert c["token"] == "bytes:" + "".join(f"\\x{b:02x}" for b in raw)
    assert partial, "no candidate was part of a character: pick a prompt whose reply has some"


# -- n choices -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def wide(tmp_path_factory, embedded_path):
    """A server with room for 4 sequences: every choice of n <= 4 is admitted with the first."""
    srv = ServeProcess(tmp_path_factory.mktemp("serve-wide"), "--parallel", "4", "--api-key", KEY)
    yield srv
    assert srv.stop() == 0


def test_n_choices_at_temperature_0_are_the_same_reply(wide):
    body = {"messages": HI, "max_tokens": 6, "temperature": 0, "logprobs": True}
    one = ok(wide, "/v1/chat/completions", {**body, "max_tokens": 1})
    three = ok(wide, "/v1/chat/completions", {**body, "n": 3})
    choices = three["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    # the same row for every first token, then the same cells and batches: the same reply, exactly
    assert all(
        c["message"] == choices[0]["message"] and c["logprobs"] == choices[0]["logprobs"] for c in choices
    )
    assert len({c["finish_reason"] for c in choices}) == 1
    usage = three["usage"]
    assert usage["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert usage["completion_tokens"] == sum(len(c["logprobs"]["content"]) for c in choices)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_n_choices_with_a_seed_are_reproducible_each_with_its_logprobs(server):
    body = {
        "prompt": "Once upon a time",
        "max_tokens": 8,
        "temperature": 1.0,
        "seed": 11,
        "n": 2,
        "logprobs": 1,
    }
    first = ok(server, "/v1/completions", body)["choices"]
    assert [c["index"] for c in first] == [0, 1]
    for c in first:
        assert "".join(c["logprobs"]["tokens"]) == c["text"] and c["finish_reason"] in ("stop", "length")
    again = ok(server, "/v1/completions", body)["choices"]
    assert [c["text"] for c in again] == [c["text"] for c in first]


def test_a_stream_of_n_choices_interleaves_both_indexes_each_finished(server):
    body = {"messages": HI, "max_tokens": 6, "temperature": 0.8, "seed": 5, "n": 2}
    chunks = sse(server, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}})
    texts, finished = {0: "", 1: ""}, {}
    for chunk in chunks:
        for c in chunk["choices"]:
            texts[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                finished[c["index"]] = c["finish_reason"]
    assert all(texts.values()) and set(finished) == {0, 1}
    assert chunks[-1]["usage"]["completion_tokens"] >= 2


@pytest.mark.parametrize("n", [3, 4])
def test_n_choices_prefill_their_prompt_once(wide, n):
    wide.running_after(AUTH)
    before = wide.metric(PREFILLED, AUTH)
    # words no earlier request began with: no cells to share but the choices' own
    prompt = " ".join(uuid.uuid4().hex[i : i + 4] for i in range(0, 32, 4)) + " is a code that"
    answer = ok(wide, "/v1/completions", {"prompt": prompt, "max_tokens": 3, "n": n, "temperature": 0.7})
    assert len(answer["choices"]) == n
    prompt_tokens = answer["usage"]["prompt_tokens"]
    assert answer["timings"]["cache_n"] == 0
    assert wide.metric(PREFILLED, AUTH) - before == prompt_tokens


def test_choices_past_the_free_places_share_the_prompt_as_a_later_request(server):
    server.running_after(AUTH)
    before = server.metric(PREFILLED, AUTH)
    prompt = " ".join(uuid.uuid4().hex[i : i + 4] for i in range(0, 32, 4)) + " is a code that"
    # the shared server's --parallel 2: the third choice waits for a place, then shares the
    # prompt's cells as a later request would (all but the last token, which it computes again)
    answer = ok(server, "/v1/completions", {"prompt": prompt, "max_tokens": 3, "n": 3, "temperature": 0.7})
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert server.metric(PREFILLED, AUTH) - before == answer["usage"]["prompt_tokens"] + 1


@pytest.mark.parametrize("n", [2, 8])
def test_n_is_bounded_by_nothing_but_its_cap(server, n):
    body = {"prompt": "Hello", "max_tokens": 2, "temperature": 0.5, "n": n}
    assert [c["index"] for c in ok(server, "/v1/completions", body)["choices"]] == list(range(n))


# -- Ollama's logprobs -----------------------------------------------------------------------------
def test_ollamas_routes_give_logprobs_whole_and_streamed(server):
    body = {"model": "m", "messages": HI, "options": {"num_predict": 5, "temperature": 0}}
    body |= {"logprobs": True, "top_logprobs": 3, "stream": False}
    whole = ok(server, "/api/chat", body)
    entries = whole["logprobs"]
    assert len(entries) == whole["eval_count"] == 5
    for entry in entries:
        assert (entry["token"], entry["logprob"]) == (
            entry["top_logprobs"][0]["token"],
            entry["top_logprobs"][0]["logprob"],
        )
    assert bytes(b for e in entries for b in e["bytes"]).decode() == whole["message"]["content"]
    streamed = []
    with httpx.stream(
        "POST", server.url + "/api/chat", json={**body, "stream": True}, headers=AUTH, timeout=HANG_GUARD_S
    ) as r:
        for line in r.iter_lines():
            if line:
                streamed += json.loads(line).get("logprobs", [])
    assert_same_logprobs(streamed, entries)
    plain = ok(
        server,
        "/api/generate",
        {"model": "m", "prompt": "Hi", "stream": False, "options": {"num_predict": 2}},
    )
    assert "logprobs" not in plain


def test_ollamas_top_logprobs_without_logprobs_is_a_400_in_ollamas_shape(server):
    body = {"model": "m", "prompt": "Hi", "stream": False, "top_logprobs": 2}
    r = post(server, "/api/generate", body)
    assert r.status_code == 400 and "only allowed when 'logprobs' is enabled" in r.json()["error"]
    r = post(server, "/api/generate", {**body, "logprobs": True, "top_logprobs": 21})
    assert r.status_code == 400 and r.json()["error"] == "top_logprobs must be in 0..20, not 21"


def test_tokens_held_back_for_a_stop_string_keep_their_logprobs_in_the_stream(server):
    # " 5" could begin the stop string " 5, 6": its token's text waits, and comes with the finish
    body = {"prompt": "1, 2, 3,", "max_tokens": 8, "temperature": 0, "logprobs": 0, "stop": [" 5, 6"]}
    whole = ok(server, "/v1/completions", body)["choices"][0]
    assert whole["finish_reason"] == "stop" and whole["text"].endswith("4,")
    tokens = []
    for chunk in sse(server, "/v1/completions", body):
        for part in chunk["choices"]:
            tokens += (part["logprobs"] or {}).get("tokens", [])
    assert tokens == whole["logprobs"]["tokens"] and "".join(tokens).startswith(whole["text"])
