"""Embeddings over HTTP: `llmcli serve` of the converted all-MiniLM-L6-v2, driven by the real clients
(the openai SDK, the ollama package, litellm, LangChain's OllamaEmbeddings and OpenAIEmbeddings) and
by raw bodies for every bad input the issue names; each bad one is a 400 naming its field, and the
server keeps serving. The shared server's chat model refuses embeddings, and the embedding model
refuses chat, each naming the model and what it can do. OpenAIEmbeddings' token ids (tiktoken's
cl100k) need a vocabulary past MiniLM's: Gemma 3 served with --pooling mean takes them."""

from __future__ import annotations

import base64
import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from llmcli.model_ref import EMBEDDED_NAME
from tests.serve.server import AUTH, KEY, ServeProcess

TEXTS = ["The cat sits on the mat.", "A feline rests on a rug.", "Stock markets fell sharply today."]


@pytest.fixture(scope="module")
def embed_server(tmp_path_factory, minilm_gguf):
    srv = ServeProcess(tmp_path_factory.mktemp("embed-home"), str(minilm_gguf), "--api-key", KEY)
    yield srv
    assert srv.stop() == 0


@pytest.fixture(scope="module")
def reference(minilm_gguf):
    """llmcli's own vectors of TEXTS, in process (the engine the server runs, without HTTP)."""
    from llmcli.engine.local.embed import Embedder, normalized
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    with Runtime(minilm_gguf, RuntimeConfig(n_ctx=512, n_threads=1)) as rt:
        emb = Embedder(rt)
        try:
            raw = emb.embed([emb.tokenize(t) for t in TEXTS]).vectors
        finally:
            emb.close()
    return [normalized(v) for v in raw], raw


def post(srv, path: str, body: dict) -> httpx.Response:
    return httpx.post(srv.url + path, json=body, headers=AUTH, timeout=60)


def close(a, b) -> bool:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))) > 0.9999


def test_openai_sdk_embeddings_default_base64_and_dimensions(embed_server, reference, openai_module):
    client = openai_module.OpenAI(base_url=embed_server.url + "/v1", api_key=KEY)
    got = client.embeddings.create(model="x", input=TEXTS)  # the SDK asks for base64 and decodes it
    assert [d.index for d in got.data] == [0, 1, 2]
    for d, want in zip(got.data, reference[0], strict=True):
        assert close(d.embedding, want)
        assert math.isclose(np.linalg.norm(d.embedding), 1.0, rel_tol=1e-5)
    assert got.usage.prompt_tokens == got.usage.total_tokens > len(TEXTS) * 3
    cut = client.embeddings.create(model="x", input=TEXTS[0], dimensions=64)
    vec = cut.data[0].embedding
    assert len(vec) == 64 and math.isclose(np.linalg.norm(vec), 1.0, rel_tol=1e-5)
    assert close(vec, reference[0][0][:64])


def test_raw_float_and_base64_and_token_ids(embed_server, reference, minilm_gguf):
    floats = post(embed_server, "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "float"}).json()
    assert close(floats["data"][0]["embedding"], reference[0][0])
    b64 = post(embed_server, "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(b64["data"][0]["embedding"]), dtype="<f4")
    assert np.allclose(decoded, floats["data"][0]["embedding"], atol=1e-6)
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    with Runtime(minilm_gguf, RuntimeConfig(n_ctx=64)) as rt:
        tokens = rt.tokenize(TEXTS[0], add_special=True)  # llama.cpp's WPM agrees on plain English
    by_ids = post(embed_server, "/v1/embeddings", {"input": [tokens], "encoding_format": "float"}).json()
    assert close(by_ids["data"][0]["embedding"], reference[0][0])
    one_list = post(embed_server, "/v1/embeddings", {"input": tokens, "encoding_format": "float"}).json()
    assert len(one_list["data"]) == 1
    stages = {s["name"]: s for s in floats["timings"]["stages"]}
    assert stages["decode"]["ms"] is None and "no decode stage" in stages["decode"]["detail"]


def test_ollama_package_embed_and_legacy_embeddings(embed_server, reference, ollama_module):
    client = ollama_module.Client(host=embed_server.url, headers=AUTH)
    got = client.embed(model="x", input=TEXTS)
    assert len(got.embeddings) == 3
    for vec, want in zip(got.embeddings, reference[0], strict=True):
        assert close(vec, want)
    assert got.prompt_eval_count > 3 * len(TEXTS)
    assert got.total_duration > 0
    legacy = client.embeddings(model="x", prompt=TEXTS[0])
    assert np.allclose(legacy.embedding, reference[1][0], atol=1e-4)  # unnormalized, as Ollama's
    assert not math.isclose(np.linalg.norm(legacy.embedding), 1.0, rel_tol=1e-3)
    cut = client.embed(model="x", input=TEXTS[0], dimensions=32)
    assert len(cut.embeddings[0]) == 32


def test_concurrent_requests_all_answered_with_their_own_vectors(embed_server, reference):
    def one(i: int) -> list[float]:
        body = {"input": TEXTS[i % 3], "encoding_format": "float"}
        return post(embed_server, "/v1/embeddings", body).json()["data"][0]["embedding"]

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(24)))
    for i, vec in enumerate(got):
        assert close(vec, reference[0][i % 3])


def test_litellm_embedding(embed_server, reference):
    from tests.support.deps import require

    litellm = require("litellm")
    got = litellm.embedding(
        model="openai/x",
        input=TEXTS[:2],
        api_base=embed_server.url + "/v1",
        api_key=KEY,
        encoding_format="float",
    )
    assert close(got.data[0]["embedding"], reference[0][0])


LONG = "word " * 2000
BAD = [
    ("/v1/embeddings", {"input": []}, "input"),
    ("/v1/embeddings", {"input": ""}, "input"),
    ("/v1/embeddings", {"input": ["ok", ""]}, "input"),
    ("/v1/embeddings", {"input": ["x"] * 10_000}, "input"),
    ("/v1/embeddings", {"input": [[1, 2, 999_999]]}, "input"),
    ("/v1/embeddings", {"input": [[-1]]}, "input"),
    ("/v1/embeddings", {"input": "hi", "dimensions": 0}, "dimensions"),
    ("/v1/embeddings", {"input": "hi", "dimensions": 100_000}, "dimensions"),
    ("/v1/embeddings", {"input": "hi", "encoding_format": "hex"}, "encoding_format"),
    ("/v1/embeddings", {"input": LONG}, "input"),
    ("/api/embed", {"input": []}, None),
    ("/api/embed", {"input": ""}, None),
    ("/api/embed", {"input": LONG, "truncate": False}, None),
    ("/api/embed", {"input": "hi", "dimensions": 0}, None),
    ("/api/embeddings", {"prompt": ""}, None),
]


@pytest.mark.parametrize(("path", "body", "field"), BAD, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(BAD)])
def test_bad_inputs_are_400s_naming_the_field_and_the_server_keeps_serving(embed_server, path, body, field):
    got = post(embed_server, path, {"model": "x", **body})
    assert got.status_code == 400, got.text
    error = got.json()["error"]
    if path.startswith("/v1"):
        assert error["param"] == field and field in error["message"]
    elif body.get("truncate") is False:
        assert error == "the input length exceeds the context length"
    else:
        assert any(word in error for word in ("input", "prompt", "dimensions"))
    assert post(embed_server, "/api/embed", {"input": "still here"}).status_code == 200


def test_truncate_true_cuts_to_the_context(embed_server):
    got = post(embed_server, "/api/embed", {"input": LONG})
    assert got.status_code == 200
    assert got.json()["prompt_eval_count"] == 512


def test_chat_to_the_embedding_model_is_a_400_naming_it(embed_server):
    got = post(embed_server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert got.status_code == 400
    assert (
        "all-MiniLM-L6-v2" in got.json()["error"]["message"] and "embedding" in got.json()["error"]["message"]
    )
    show = post(embed_server, "/api/show", {"model": "all-MiniLM-L6-v2-f32.gguf"})
    assert show.json()["capabilities"] == ["embedding"], show.text


def test_embedding_from_a_chat_model_is_a_400_naming_it(server):
    got = post(server, "/v1/embeddings", {"input": "hi"})
    assert got.status_code == 400
    message = got.json()["error"]["message"]
    assert "cannot embed" in message and "completion" in message
    show = post(server, "/api/show", {"model": EMBEDDED_NAME})
    assert show.json()["capabilities"] == ["completion", "tools"], show.text


def test_metrics_count_embedding_requests_and_their_tokens(embed_server):
    before = embed_server.metric('llmcli:requests_total{finished_reason="stop"}', AUTH, absent=0)
    tokens = embed_server.metric("llmcli:prompt_tokens_total", AUTH, absent=0)
    got = post(embed_server, "/v1/embeddings", {"input": ["one two", "three"], "encoding_format": "float"})
    n = got.json()["usage"]["prompt_tokens"]
    assert embed_server.metric('llmcli:requests_total{finished_reason="stop"}', AUTH) == before + 1
    assert embed_server.metric("llmcli:prompt_tokens_total", AUTH) == tokens + n


DOCS = ["The capital of France is Paris.", "Bananas are yellow.", "Paris is the French capital city."]


def test_rerank_in_the_jina_cohere_shape_and_the_tei_shape(server):
    got = post(
        server, "/v1/rerank", {"query": "capital of France", "documents": DOCS, "return_documents": True}
    )
    assert got.status_code == 200, got.text
    results = got.json()["results"]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in results) == [0, 1, 2]
    assert all(r["document"]["text"] == DOCS[r["index"]] for r in results)
    assert got.json()["usage"]["total_tokens"] > 0
    top = post(server, "/rerank", {"query": "capital", "documents": [{"text": d} for d in DOCS], "top_n": 1})
    assert len(top.json()["results"]) == 1 and "document" not in top.json()["results"][0]
    tei = post(server, "/rerank", {"query": "capital of France", "texts": DOCS, "return_text": True}).json()
    assert isinstance(tei, list) and {r["index"] for r in tei} == {0, 1, 2}
    assert all(r["text"] == DOCS[r["index"]] for r in tei)
    assert [r["index"] for r in tei] == [r["index"] for r in results]  # the same judge, the same order


def test_litellm_rerank(server):
    from tests.support.deps import require

    litellm = require("litellm")
    got = litellm.rerank(
        model="jina_ai/x", query="capital of France", documents=DOCS, api_base=server.url + "/v1", api_key=KEY
    )
    assert sorted(r["index"] for r in got.results) == [0, 1, 2]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "q", "documents": []}, "documents"),
        ({"query": "q"}, "documents"),
        ({"query": "q", "documents": ["a", 3]}, "documents"),
        ({"query": "q", "documents": ["d"] * 1000}, "documents"),
        ({"query": "", "documents": ["d"]}, "query"),
        ({"query": "q", "documents": ["d"], "top_n": 0}, "top_n"),
    ],
)
def test_bad_rerank_bodies_are_400s_naming_the_field(server, body, field):
    got = post(server, "/v1/rerank", body)
    assert got.status_code == 400, got.text
    assert got.json()["error"]["param"] == field
    assert post(server, "/v1/rerank", {"query": "q", "documents": ["d"]}).status_code == 200


def test_an_embedding_model_cannot_rerank(embed_server):
    got = post(embed_server, "/v1/rerank", {"query": "q", "documents": ["d"]})
    assert got.status_code == 400 and "cannot rerank" in got.json()["error"]["message"]


def test_langchain_ollama_embeddings(embed_server, reference):
    """LangChain's OllamaEmbeddings: /api/embed through the ollama package, sync and async."""
    import asyncio

    from tests.support.deps import require

    require("langchain_ollama")
    from langchain_ollama import OllamaEmbeddings

    kwargs = {"model": "x", "base_url": embed_server.url, "client_kwargs": {"headers": AUTH}}
    emb = OllamaEmbeddings(**kwargs)
    got = emb.embed_documents(TEXTS)
    assert all(close(v, want) for v, want in zip(got, reference[0], strict=True))
    assert close(emb.embed_query(TEXTS[1]), reference[0][1])
    assert close(asyncio.run(emb.aembed_query(TEXTS[2])), reference[0][2])
    cut = OllamaEmbeddings(**kwargs, dimensions=48)
    assert len(cut.embed_query(TEXTS[0])) == 48


@pytest.fixture
def cl100k(monkeypatch):
    """tiktoken's cl100k_base, from the test cache (tests/assets.py): what OpenAIEmbeddings tokenizes with."""
    from tests.assets import Unavailable, tiktoken_cache
    from tests.support.deps import require, unavailable

    require("langchain_openai")
    try:
        monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tiktoken_cache()))
    except Unavailable as exc:
        raise unavailable(f"tiktoken's cl100k_base: {exc}") from exc
    import tiktoken

    return tiktoken.get_encoding("cl100k_base")


@pytest.fixture(scope="module")
def gemma_pooled(tmp_path_factory, gemma3_path):
    """Gemma 3 270M served with --pooling mean: a vocabulary of 262,144, which holds every cl100k id."""
    home = tmp_path_factory.mktemp("gemma-pooled")
    srv = ServeProcess(home, gemma3_path, "--api-key", KEY, "--pooling", "mean")
    yield srv
    assert srv.stop() == 0


def test_langchain_openai_embeddings_sends_tiktoken_ids(gemma_pooled, cl100k):
    """OpenAIEmbeddings' default mode: each text is tokenized with cl100k_base and the ids are sent as
    arrays. The server embeds those ids as they are (the model's own ids, whatever made them), so the
    vectors equal /v1/embeddings' for the same ids."""
    from langchain_openai import OpenAIEmbeddings

    emb = OpenAIEmbeddings(model="x", base_url=gemma_pooled.url + "/v1", api_key=KEY)
    ids = [cl100k.encode_ordinary(t) for t in TEXTS]
    assert max(max(i) for i in ids) > 30_522  # past MiniLM's vocabulary: why this test needs Gemma's
    direct = post(gemma_pooled, "/v1/embeddings", {"input": ids, "encoding_format": "float"}).json()
    got = emb.embed_documents(TEXTS)
    for vec, want in zip(got, direct["data"], strict=True):
        assert np.allclose(vec, want["embedding"], atol=1e-5)
    assert np.allclose(emb.embed_query(TEXTS[1]), direct["data"][1]["embedding"], atol=1e-5)


def test_langchain_openai_embeddings_on_a_small_vocabulary(embed_server, reference, cl100k):
    """On MiniLM (30,522 words) the cl100k ids of OpenAIEmbeddings' default mode are refused with a 400
    naming the field and the id; check_embedding_ctx_length=False sends the strings, which the server
    tokenizes with the model's own vocabulary (docs/embeddings.md)."""
    import openai
    from langchain_openai import OpenAIEmbeddings

    by_ids = OpenAIEmbeddings(model="x", base_url=embed_server.url + "/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as refused:
        by_ids.embed_documents(["Stock markets fell sharply today."])
    assert refused.value.status_code == 400
    error = refused.value.body
    assert error["param"] == "input" and "outside the vocabulary" in error["message"]
    assert "46473" in error["message"]  # cl100k's id for " sharply"
    emb = OpenAIEmbeddings(
        model="x", base_url=embed_server.url + "/v1", api_key=KEY, check_embedding_ctx_length=False
    )
    got = emb.embed_documents(TEXTS)
    assert all(close(v, want) for v, want in zip(got, reference[0], strict=True))
    assert close(emb.embed_query(TEXTS[1]), reference[0][1])


def test_a_chat_model_served_with_pooling_both_chats_and_embeds(tmp_path_factory, embedded_path):
    srv = ServeProcess(tmp_path_factory.mktemp("pooled-chat"), "--api-key", KEY, "--pooling", "mean")
    try:
        got = post(srv, "/v1/embeddings", {"input": ["hello", "world"], "encoding_format": "float"})
        assert got.status_code == 200, got.text
        vectors = [d["embedding"] for d in got.json()["data"]]
        assert all(math.isclose(np.linalg.norm(v), 1.0, rel_tol=1e-5) for v in vectors)
        chat = post(
            srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        )
        assert chat.status_code == 200, chat.text
        show = post(srv, "/api/show", {"model": EMBEDDED_NAME}).json()
        assert show["capabilities"] == ["completion", "tools", "embedding"]
    finally:
        assert srv.stop() == 0


def test_serve_refuses_an_unknown_pooling(private_store):
    from tests.support.cli import cli

    got = cli("serve", "--pooling", "max", "--port", "0")
    assert got.exit_code == 2 and "--pooling max" in got.stderr


def test_the_engine_queue_shares_decodes_across_requests_one_decode_a_turn(minilm_gguf):
    """EmbedQueue as the engine thread runs it, on the real model: two waiting requests share the first
    decode; a request of 100 inputs takes two decodes (64 sequences a batch), one a turn."""
    from types import SimpleNamespace

    from llmcli.engine.local.embed import Embedder
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig
    from llmcli.serve.embedding import EmbedJob, EmbedQueue, Vectors
    from llmcli.serve.metrics import ServeMetrics

    with Runtime(minilm_gguf, RuntimeConfig(n_ctx=64, n_threads=1)) as rt:
        emb = Embedder(rt)
        try:
            models = {"m": SimpleNamespace(embedder=emb)}
            got: dict[str, list] = {"small": [], "big": []}
            small = [emb.tokenize(t) for t in TEXTS]
            big = [emb.tokenize(f"sentence number {i}") for i in range(100)]
            queue = EmbedQueue()
            queue.add(EmbedJob("m", small, got["small"].append, 0.0))
            queue.add(EmbedJob("m", big, got["big"].append, 0.0))
            metrics = ServeMetrics()
            queue.step(models, metrics)
            assert len(got["small"]) == 1 and not got["big"] and queue.pending  # one decode, not all
            assert got["small"][0].batched_with == 1  # it shared that decode with the big request
            queue.step(models, metrics)
            assert not queue.pending and len(got["big"]) == 1
            done: Vectors = got["big"][0]
            assert len(done.vectors) == 100
            alone = emb.embed([big[99]]).vectors[0]
            assert close(done.vectors[99], alone)
        finally:
            emb.close()


def test_the_openapi_schema_has_the_embedding_and_rerank_bodies(embed_server):
    schema = httpx.get(embed_server.url + "/openapi.json", headers=AUTH).json()
    for path in ("/v1/embeddings", "/api/embed", "/api/embeddings", "/v1/rerank"):
        assert "requestBody" in schema["paths"][path]["post"], path


def test_the_store_serves_chat_and_embedding_models_side_by_side(tmp_path_factory, minilm_hf, embedded_path):
    from tests.support.cli import cli

    home = tmp_path_factory.mktemp("side-by-side")
    converted = cli(
        "convert", str(minilm_hf), "-q", "f32", "--name", "minilm", vars={"LLMCLI_HOME": str(home)}
    )
    assert converted.exit_code == 0, converted.stderr
    srv = ServeProcess(home, "--api-key", KEY, model=None)
    try:
        vectors = post(srv, "/v1/embeddings", {"model": "minilm", "input": "hi", "encoding_format": "float"})
        assert vectors.status_code == 200, vectors.text
        chat = post(
            srv,
            "/v1/chat/completions",
            {"model": EMBEDDED_NAME, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4},
        )
        assert chat.status_code == 200, chat.text
        loaded = {m["name"] for m in httpx.get(srv.url + "/api/ps", headers=AUTH).json()["models"]}
        assert len(loaded) == 2
    finally:
        assert srv.stop() == 0
