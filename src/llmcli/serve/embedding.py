"""Embedding and rerank requests on the engine thread: the waiting inputs of every request on the same
model share each llama_decode (as many as fit one batch; engine/local/embed.py packs them), one
decode a turn between the chat models' steps (`EmbedQueue`).

A route turns its body into an `EmbedJob` (token ids, already checked against the model's limits by
serve/embed_call.py), and the engine thread queues the jobs it drains from its inbox. Each job gets
back `Vectors` (one pooled, unnormalized vector per input) or a `Refused`, through the mailbox, as a
chat's events come back. An embedding has no decode stage: its timings say so (`timings`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmcli.engine.local.embed import MAX_SEQS
from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Refused
from llmcli.stages import STAGES, StageRecord

if TYPE_CHECKING:
    from llmcli.engine.local.embed import Embedder
    from llmcli.engine.local.runtime import Runtime
    from llmcli.serve.metrics import ServeMetrics


@dataclass(eq=False)  # found in the queue by identity: its vectors have no truth value
class EmbedJob:
    model: str  # the loaded model's store name
    inputs: list[list[int]]  # token ids, each within the model's limit
    deliver: Callable[[object], None]  # thread-safe: through the loop's mailbox to the request
    t_arrival: float
    access_ms: float = 0.0  # arrival to the body read (key, limits, body)
    lease_ms: float = 0.0  # waiting for the model: its load, when it was not loaded
    tokenize_ms: float = 0.0
    t_queued: float = field(default_factory=time.perf_counter)
    # Filled on the engine thread, a decode at a time.
    vectors: list[Any] = field(default_factory=list)
    t_started: float | None = None
    embed_ms: float = 0.0
    batched_with: int = 0


@dataclass(eq=False)
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
    batched_with: int  # the most other requests one of its decodes also served


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


class EmbedQueue:
    """The engine thread's embedding and rerank jobs, worked through one llama_decode a turn (as a
    chat model's step is one), so a request of 2,048 inputs never holds the chat models up for longer
    than one batch. A decode takes the inputs still waiting of the first job's model, in arrival
    order, across every request of that model: the inputs of concurrent requests share it."""

    def __init__(self) -> None:
        self.pending: deque[Any] = deque()

    def add(self, job: Any) -> None:
        self.pending.append(job)

    def refuse_all(self, message: str) -> None:
        while self.pending:
            self.pending.popleft().deliver(Refused(503, message))

    def step(self, models: dict[str, Any], metrics: ServeMetrics) -> None:
        first = self.pending[0]
        if isinstance(first, RerankJob):
            self.pending.popleft()
            _rerank(models.get(first.model), first, metrics)
            return
        name = first.model
        same = [job for job in self.pending if isinstance(job, EmbedJob) and job.model == name]
        embedder = getattr(models.get(name), "embedder", None)
        if embedder is None:
            for job in same:
                self.pending.remove(job)
                job.deliver(Refused(503, f"the model {name} is not loaded for embeddings; try again"))
            return
        flat: list[list[int]] = []
        owners: list[EmbedJob] = []
        for job in same:  # enough to fill one batch, no more
            for tokens in job.inputs[len(job.vectors) :]:
                if len(flat) == MAX_SEQS:
                    break
                flat.append(tokens)
                owners.append(job)
        n = len(embedder.batches(flat)[0])
        t0 = time.perf_counter()
        try:
            vectors = embedder.decode(flat[:n])
        except Exception as exc:
            for job in dict.fromkeys(owners):
                self.pending.remove(job)
                job.deliver(Refused(500, f"the embedding failed: {type(exc).__name__}: {exc}"))
            return
        ms = (time.perf_counter() - t0) * 1000
        sharing = list(dict.fromkeys(owners[:n]))
        for job in sharing:
            job.t_started = job.t_started or t0
            job.embed_ms += ms
            job.batched_with = max(job.batched_with, len(sharing) - 1)
        for job, vec in zip(owners[:n], vectors, strict=True):
            job.vectors.append(vec)
        for job in sharing:
            if len(job.vectors) == len(job.inputs):
                self.pending.remove(job)
                _finish(name, job, metrics)


def _finish(name: str, job: EmbedJob, metrics: ServeMetrics) -> None:
    n_prompt = sum(len(t) for t in job.inputs)
    metrics.prompt_tokens.labels(model_name=name).inc(n_prompt)
    metrics.prefill_tokens.inc(n_prompt)
    metrics.requests.labels(finished_reason="stop", model_name=name).inc()
    job.deliver(
        Vectors(
            vectors=job.vectors,
            n_tokens=[len(t) for t in job.inputs],
            queue_ms=((job.t_started or job.t_queued) - job.t_queued) * 1000,
            embed_ms=job.embed_ms,
            batched_with=job.batched_with,
        )
    )


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
