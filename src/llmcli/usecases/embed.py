"""`llmcli embed` and `llmcli rerank`: texts -> vectors, or documents ranked against a query.

One load, one Embedder (engine/local/embed.py), every input in as few llama_decode calls as fit.
The limits here (MAX_INPUTS, MAX_DOCUMENTS) are the server's too (serve/embed_protocol.py,
serve/rerank.py), so the CLI's exit 2 and the server's 400 refuse the same inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.engine.local.embed import choosable_pooling as choosable_pooling  # --pooling, for commands
from llmcli.errors import UsageError

if TYPE_CHECKING:
    from llmcli.engine.local.arrays import np
    from llmcli.model_ref import ModelRef
    from llmcli.store import Store

# One request's inputs at most: as many as OpenAI's /v1/embeddings takes (2048).
MAX_INPUTS = 2048
# Documents one rerank ranks at most (each is a sequence of its own).
MAX_DOCUMENTS = 512


@dataclass
class Embeddings:
    model_name: str
    vectors: list[list[float]]
    n_tokens: list[int]
    dimensions: int
    pooling: str


def check_inputs(texts: list[str], what: str = "input", limit: int = MAX_INPUTS) -> None:
    if not texts:
        raise UsageError(f"no {what} to embed; give at least one text")
    if len(texts) > limit:
        raise UsageError(f"{len(texts):,} {what}s; at most {limit:,} fit one request, send them in parts")
    empty = next((i for i, t in enumerate(texts) if not t.strip()), None)
    if empty is not None:
        raise UsageError(f"{what} {empty} is empty; every {what} must hold some text")


def check_dimensions(dimensions: int | None, n_embd: int, name: str) -> None:
    if dimensions is not None and not 1 <= dimensions <= n_embd:
        raise UsageError(f"dimensions {dimensions} is not in 1..{n_embd}, the size of {name}'s vectors")


def shaped(vector: np.ndarray, dimensions: int | None, normalize: bool = True) -> list[float]:
    """The first `dimensions` values (Matryoshka truncation), L2-normalized again; or all of them."""
    from llmcli.engine.local.embed import normalized

    cut = vector[:dimensions] if dimensions is not None else vector
    return (normalized(cut) if normalize else cut).tolist()  # Python floats, in one C loop


def embed_texts(
    store: Store,
    ref: ModelRef,
    texts: list[str],
    *,
    dimensions: int | None = None,
    pooling: str | None = None,
    threads: int | None = None,
) -> Embeddings:
    """Each text's vector (L2-normalized), from one load of the model."""
    from llmcli.engine.local.embed import Embedder
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    check_inputs(texts)
    entry = store.resolve(ref)
    with Runtime(entry.path, RuntimeConfig(n_ctx=64, n_threads=threads)) as rt:
        embedder = Embedder(rt, pooling)
        try:
            embedder.check_can_pool(entry.name)
            check_dimensions(dimensions, embedder.n_embd, entry.name)
            tokens = [embedder.tokenize(t) for t in texts]
            too_long = next((i for i, t in enumerate(tokens) if len(t) > embedder.max_tokens), None)
            if too_long is not None:
                raise UsageError(
                    f"text {too_long} is {len(tokens[too_long])} tokens; {entry.name} embeds at most "
                    f"{embedder.max_tokens}: shorten it"
                )
            result = embedder.embed(tokens)
        finally:
            embedder.close()
    return Embeddings(
        model_name=entry.name,
        vectors=[shaped(v, dimensions) for v in result.vectors],
        n_tokens=result.n_tokens,
        dimensions=dimensions or embedder.n_embd,
        pooling=embedder.pooling,
    )


@dataclass
class Ranked:
    index: int
    relevance: float  # 0..1: the sigmoid of the margin
    margin: float  # the judge's logit("yes") - logit("no")
    document: str


@dataclass
class Ranking:
    model_name: str
    scorer: str  # "judge": a chat model's yes/no margin (engine/local/judge.py)
    results: list[Ranked]  # most relevant first


def check_documents(documents: list[str]) -> None:
    check_inputs(documents, "document", MAX_DOCUMENTS)


def rerank_documents(
    store: Store,
    ref: ModelRef,
    query: str,
    documents: list[str],
    *,
    top_n: int | None = None,
    ctx: int | None = None,
    threads: int | None = None,
) -> Ranking:
    """The documents sorted by relevance to `query`, a chat model judging each one."""
    from llmcli.engine.local.embed import gguf_pooling
    from llmcli.engine.local.judge import JUDGE_CTX, Judge
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    if not query.strip():
        raise UsageError("the query is empty; give the text to rank the documents against")
    check_documents(documents)
    entry = store.resolve(ref)
    with Runtime(entry.path, RuntimeConfig(n_ctx=64, n_threads=threads)) as rt:
        if gguf_pooling(rt) not in (None, "none"):
            raise UsageError(
                f"the model {entry.name} is an embedding model (it can do: embedding); "
                "rerank with a chat model, which judges each document"
            )
        judge = Judge(rt, ctx or JUDGE_CTX)
        try:
            judged = judge.score(query, documents)
        finally:
            judge.close()
    ranked = sorted(
        (Ranked(j.index, j.relevance, j.margin, documents[j.index]) for j in judged),
        key=lambda r: -r.margin,
    )
    return Ranking(entry.name, "judge", ranked[:top_n] if top_n else ranked)
