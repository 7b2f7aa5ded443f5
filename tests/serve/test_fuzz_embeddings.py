"""Seeded malformed requests against the embedding and rerank routes: every answer is a 200 or a
well-formed refusal (400/401/413 in the route's API's error shape), never a 500 or a hang; the server
stays healthy. The mutations are test_fuzz_serve's (a field given a wrong type or range, a field
dropped, the JSON cut short or nested deep, bytes that are not UTF-8, a body past --max-body, a key
given twice, numbers of hundreds of digits), applied to a valid body of each route."""

from __future__ import annotations

import json
import random
from collections import Counter

import httpx
import pytest

from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.serve.server import KEY, MAX_BODY, ServeProcess
from tests.serve.test_fuzz_serve import (
    BODIES,
    FIRST,
    HEADERS,
    mutate_body,
    mutate_headers,
    well_formed_refusal,
)

CASES = cases(default=20, long=200)
FIXED_SEED = 20261207
EMBED_ROUTES = {
    "/v1/embeddings": {"input": ["a cat", "a dog"], "encoding_format": "float", "dimensions": 8},
    "/embeddings": {"input": [[101, 4937, 102]], "encoding_format": "base64"},
    "/api/embed": {"model": "m", "input": ["a cat"], "truncate": True, "dimensions": 4, "options": {}},
    "/api/embeddings": {"model": "m", "prompt": "a cat", "keep_alive": "5m"},
    "/v1/rerank": {"query": "cat", "documents": ["a cat", {"text": "a dog"}], "top_n": 1},
    "/rerank": {"query": "cat", "texts": ["a cat"], "return_text": True},
}


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, minilm_gguf):
    srv = ServeProcess(
        tmp_path_factory.mktemp("fuzz-embed"), str(minilm_gguf), "--api-key", KEY, "--max-body", str(MAX_BODY)
    )
    yield srv
    assert srv.stop() == 0


def well_formed(route: str, response: httpx.Response) -> bool:
    body = response.json()
    if response.status_code == 200:
        return isinstance(body, list) or bool({"data", "embeddings", "embedding", "results"} & set(body))
    return well_formed_refusal(route, body)


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_malformed_embedding_requests_get_vectors_or_a_well_formed_refusal(fuzz_server, seed):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    for i in range(CASES):
        route = rng.choice(list(EMBED_ROUTES))
        body_kind, header_kind = FIRST[i] if i < len(FIRST) else (rng.choice(BODIES), rng.choice(HEADERS))
        data = mutate_body(rng, json.loads(json.dumps(EMBED_ROUTES[route])), body_kind)
        headers = mutate_headers(header_kind)
        response = httpx.post(fuzz_server.url + route, content=data, headers=headers, timeout=60)
        where = f"seed {seed} case {i}: {route} {data[:120]!r} {headers} -> {response.status_code} "
        where += response.text[:200]
        assert response.status_code in (200, 400, 401, 413), where
        assert well_formed(route, response), where
        counts[str(response.status_code)] += 1
    assert_reached(counts, "400", "401", "413", seed=seed)
    assert httpx.get(fuzz_server.url + "/health").status_code == 200
