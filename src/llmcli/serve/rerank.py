"""/v1/rerank and /rerank: documents ranked by relevance to a query, in two shapes.

- Jina's and Cohere's (what Open WebUI, LiteLLM and llama-server send): `query`, `documents` (strings,
  or objects with a `text`), `top_n`, `return_documents`; the answer is `results[{index,
  relevance_score, document?}]`, most relevant first.
- Hugging Face TEI's: `query`, `texts`, `return_text`; the answer is a bare list of `{index, score,
  text?}`, most relevant first.

The scorer is the model, judging: any chat model scores a document by the logit margin of "yes" over
"no" after a fixed judging prompt (engine/local/judge.py), on the engine thread; relevance is its
sigmoid. An embedding model cannot rerank, and says so.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

from fastapi import APIRouter, Request

from llmcli.serve.embed_protocol import EmbeddingRequest, EmbeddingsRequest, EmbedRequest
from llmcli.serve.embedding import RerankJob, Scores, embedding_only
from llmcli.serve.errors import ApiError, bad
from llmcli.serve.outcome import Refused
from llmcli.serve.protocol import Body, checked, refuse
from llmcli.serve.state import Server
from llmcli.usecases.embed import MAX_DOCUMENTS

router = APIRouter()


def _query(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise refuse("must be a non-empty string: the text the documents are ranked against")
    return value


def _documents(value: Any) -> list[str]:
    if not isinstance(value, list) or not value:
        raise refuse("must be a non-empty list of documents to rank")
    if len(value) > MAX_DOCUMENTS:
        raise refuse(f"holds {len(value):,} documents; at most {MAX_DOCUMENTS:,} are ranked in one request")
    out = []
    for i, doc in enumerate(value):
        text = doc.get("text") if isinstance(doc, dict) else doc
        if not isinstance(text, str):
            raise refuse(f"[{i}] must be a string (or an object with a text string)")
        out.append(text)
    return out


def _top_n(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise refuse("must be a positive integer")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse("must be true or false")
    return value


Query = checked(_query, {"type": "string"}, nullable=False)
Documents = checked(_documents, {"type": "array"})
TopN = checked(_top_n, {"type": "integer", "minimum": 1})
Flag = checked(_flag, {"type": "boolean"})


class RerankRequest(Body):
    model: str | None = None
    query: Query
    documents: Documents = None  # Jina / Cohere
    texts: Documents = None  # TEI
    top_n: TopN = None
    return_documents: Flag = None
    return_text: Flag = None


# path -> body, for /openapi.json: the embedding routes' and the rerank route's
BODIES: dict[str, Any] = {
    "/v1/embeddings": EmbeddingRequest,
    "/api/embed": EmbedRequest,
    "/api/embeddings": EmbeddingsRequest,
    "/v1/rerank": RerankRequest,
}


async def _scores(server: Server, request: Request, body: RerankRequest, documents: list[str]) -> Scores:
    served = server.find(body.model)
    lease = await server.lease(served, None, request.state.t_arrival)
    try:
        if embedding_only(lease.model):
            raise bad(
                "model",
                f"the model {served.name} is an embedding model and cannot rerank (it can do: embedding); "
                "name a chat model, which judges each document",
            )
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()

        def arrive(event: object) -> None:
            if not future.done():
                future.set_result(event)

        job = RerankJob(
            lease.name,
            body.query,
            documents,
            partial(server.mailbox(loop).post, arrive),
            request.state.t_arrival,
        )
        server.engine.embed(job)
        done = await future
        if isinstance(done, Refused):
            raise ApiError(done.status, done.message, done.param)
        return done
    finally:
        lease.release()


@router.post("/rerank")
async def rerank(request: Request) -> Any:
    import math

    server: Server = request.app.state.server
    body = await server.read(request, RerankRequest)
    tei = body.documents is None and body.texts is not None
    documents = body.texts if tei else body.documents
    if documents is None:
        raise bad("documents", "documents is required: the list of texts to rank")
    scores = await _scores(server, request, body, documents)
    order = sorted(range(len(documents)), key=lambda i: -scores.margins[i])[: body.top_n]
    relevance = [1.0 / (1.0 + math.exp(-m)) for m in scores.margins]
    if tei:
        return [
            {"index": i, "score": relevance[i], **({"text": documents[i]} if body.return_text else {})}
            for i in order
        ]
    return {
        "model": body.model or "",
        "object": "list",
        "results": [
            {
                "index": i,
                "relevance_score": relevance[i],
                **({"document": {"text": documents[i]}} if body.return_documents else {}),
            }
            for i in order
        ],
        "usage": {"total_tokens": scores.tokens},
        "timings": {"judge_ms": round(scores.ms, 3), "scorer": "judge: logit(yes) - logit(no)"},
    }
