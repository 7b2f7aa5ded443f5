"""Embedding requests on the engine thread: every request that arrived since the last step, on the same
model, shares one llama_decode (as many as fit one batch; engine/local/embed.py packs them).

A route turns its body into an `EmbedJob` (token ids, already checked against the model's limits in
`prepare`), and the engine thread collects the jobs it drains from its inbox and runs them together
between two chat steps (`run`). Each job gets back `Vectors` (one pooled, unnormalized vector per
input) or a `Refused`, through the mailbox, as a chat's events come back. An embedding has no decode
stage: its timings say so (`timings`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Refused
from llmcli.stages import STAGES, StageRecord

if TYPE_CHECKING:
    from llmcli.engine.local.embed import Embedder
    from llmcli.engine.local.runtime import Runtime
    from llmcli.serve.metrics import ServeMetrics


@dataclass
class EmbedJob:
    model: str  # the loaded model's store name
    inputs: list[list[int]]  # token ids, each within the model's limit
    deliver: Callable[[object], None]  # thread-safe: the request's future on the loop
    t_arrival: float
    access_ms: float = 0.0  # arrival to the body read (key, limits, body)
    lease_ms: float = 0.0  # waiting for the model: its load, when it was not loaded
    tokenize_ms: float = 0.0
    t_queued: float = field(default_factory=time.perf_counter)


@dataclass
class RerankJob:
    model: str
    query: str
    documents: list[str]
    deliver: Callable[[object], None]
    t_arrival: float
    t_queued: float = field(default_factory=time.perf_counter)


@dataclass
class Scores:
    margins: list[float]  # each document's logit("yes") - logit("no"), in the documents' order
    ms: float
    tokens: int


@dataclass
class Vectors:
    vectors: list[Any]  # numpy float32 rows, pooled, not normalized
    n_tokens: list[int]
    queue_ms: float
    embed_ms: float  # the decodes this job's inputs were in (shared with the jobs beside it)
    batched_with: int  # other requests in the same decodes


def embedder_for(rt: Runtime, pooling: str | None = None) -> Embedder | None:
    """The model's Embedder when its GGUF pools (an embedding model), or when serve's --pooling asks a
    chat model to pool too; else None."""
    from llmcli.engine.local.embed import CHOOSABLE, Embedder, gguf_pooling

    # Read before a context is made: a chat model's second context would hold KV cells for nothing.
    if gguf_pooling(rt) in CHOOSABLE:
        return Embedder(rt)
    return Embedder(rt, pooling) if pooling is not None else None


def embedding_only(model: Any) -> bool:
    """An embedding model (its GGUF pools): it cannot chat."""
    embedder = getattr(model, "embedder", None)
    return embedder is not None and embedder.from_gguf


def file_capabilities(path: Any, arch: str, pooling: str | None = None) -> list[str]:
    """/api/show's capabilities, from the GGUF header (no load): an embedding model pools (a
    `<arch>.pooling_type` of mean, cls or last); any other model completes, calls tools through a
    grammar (docs/tools.md), and embeds too when serve was given --pooling."""
    from llmcli.engine.local.embed import CHOOSABLE, POOLING_NAMES
    from llmcli.gguf_check import read_header

    own = read_header(path).metadata.get(f"{arch}.pooling_type")
    if isinstance(own, int) and POOLING_NAMES.get(own) in CHOOSABLE:
        return ["embedding"]
    return ["completion", "tools"] + (["embedding"] if pooling is not None else [])


def cannot_embed(name: str) -> ApiError:
    return ApiError(
        400,
        f"the model {name} cannot embed: it has no pooling (it can do: completion); "
        "use an embedding model such as a converted all-MiniLM-L6-v2, or start the server with --pooling",
        "model",
    )


def cannot_chat(name: str) -> ApiError:
    return ApiError(
        400,
        f"the model {name} is an embedding model and cannot chat or complete (it can do: embedding); "
        "send it to /v1/embeddings or /api/embed, or name a chat model",
        "model",
    )


def run(models: dict[str, Any], jobs: list[Any], metrics: ServeMetrics) -> None:
    """Every drained job: each rerank judged in turn, the embeddings grouped by model and each group's
    inputs embedded together."""
    by_model: dict[str, list[EmbedJob]] = {}
    for job in jobs:
        if isinstance(job, RerankJob):
            _rerank(models.get(job.model), job, metrics)
        else:
            by_model.setdefault(job.model, []).append(job)
    for name, group in by_model.items():
        model = models.get(name)
        embedder = getattr(model, "embedder", None)
        if embedder is None:
            for job in group:
                job.deliver(Refused(503, f"the model {name} is not loaded for embeddings; try again"))
            continue
        _run_group(name, embedder, group, metrics)


def _rerank(model: Any, job: RerankJob, metrics: ServeMetrics) -> None:
    from llmcli.engine.local.judge import Judge
    from llmcli.errors import UsageError

    if model is None:
        job.deliver(Refused(503, f"the model {job.model} is not loaded; try again"))
        return
    t0 = time.perf_counter()
    try:
        if model.judge is None:
            model.judge = Judge(model.rt)
        judged = model.judge.score(job.query, job.documents)
    except UsageError as exc:
        job.deliver(Refused(400, str(exc), "documents"))
        return
    except Exception as exc:
        job.deliver(Refused(500, f"the rerank failed: {type(exc).__name__}: {exc}"))
        return
    metrics.requests.labels(finished_reason="stop", model_name=job.model).inc()
    job.deliver(Scores([j.margin for j in judged], (time.perf_counter() - t0) * 1000, model.judge.n_tokens))


def _run_group(name: str, embedder: Embedder, group: list[EmbedJob], metrics: ServeMetrics) -> None:
    t0 = time.perf_counter()
    flat = [tokens for job in group for tokens in job.inputs]
    try:
        result = embedder.embed(flat)
    except Exception as exc:
        for job in group:
            job.deliver(Refused(500, f"the embedding failed: {type(exc).__name__}: {exc}"))
        return
    start = 0
    for job in group:
        n = len(job.inputs)
        vectors = result.vectors[start : start + n]
        start += n
        n_prompt = sum(len(t) for t in job.inputs)
        metrics.prompt_tokens.labels(model_name=name).inc(n_prompt)
        metrics.prefill_tokens.inc(n_prompt)
        metrics.requests.labels(finished_reason="stop", model_name=name).inc()
        job.deliver(
            Vectors(
                vectors=vectors,
                n_tokens=[len(t) for t in job.inputs],
                queue_ms=(t0 - job.t_queued) * 1000,
                embed_ms=result.ms,
                batched_with=len(group) - 1,
            )
        )


def timings(job: EmbedJob, done: Vectors, return_ms: float = 0.0) -> dict:
    """llama-server's prompt fields and llmcli's seven stages; decode, post-process and release are
    absent for an embedding and say why."""
    n_prompt = sum(done.n_tokens)
    ms = {
        "tokenize": job.access_ms + job.tokenize_ms,
        "schedule": job.lease_ms + done.queue_ms,
        "prefill": done.embed_ms,
        "decode": None,
        "postprocess": None,
        "return": return_ms,
        "release": None,
    }
    details = {
        "tokenize": f"access {job.access_ms:.1f} ms, tokenize {job.tokenize_ms:.1f} ms",
        "schedule": f"model lease (a load, if any) {job.lease_ms:.1f} ms, engine queue "
        f"{done.queue_ms:.1f} ms; batched with {done.batched_with} other requests",
        "prefill": f"{n_prompt} tokens in {len(done.n_tokens)} sequences, pooled in the same decode",
        "decode": "no decode stage: an embedding is one forward pass, nothing is generated",
        "postprocess": "none: the pooled vectors are returned as they are (normalized per the route)",
        "return": "written to the connection",
        "release": "none: an embedding keeps no cells",
    }
    return {
        "prompt_n": n_prompt,
        "prompt_ms": round(done.embed_ms, 3),
        "predicted_n": 0,
        "predicted_ms": None,
        "queue_ms": round(done.queue_ms, 3),
        "stages": [StageRecord(s.key, ms[s.key], "local", details[s.key]).as_dict() for s in STAGES],
    }
