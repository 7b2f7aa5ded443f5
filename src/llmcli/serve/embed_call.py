"""One embedding request on the event loop, whichever route it came in: the model leased, its inputs
tokenized in the render thread and checked against the model's limits, the job handed to the engine
thread, its vectors awaited. The routes only word the body and the answer."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from llmcli.serve.embed_protocol import Inputs
from llmcli.serve.embedding import EmbedJob, Vectors, cannot_embed
from llmcli.serve.errors import ApiError, bad
from llmcli.serve.outcome import Refused
from llmcli.serve.state import Server

# Ollama's words when an input is over the context and truncate is false.
OLLAMA_TOO_LONG = "the input length exceeds the context length"


@dataclass
class Answer:
    model: str  # the name the answer gives (the served name)
    job: EmbedJob
    done: Vectors
    n_embd: int


def _tokenize(embedder: Any, inputs: Inputs) -> list[list[int]]:
    if inputs.texts is not None:
        return [embedder.tokenize(t) for t in inputs.texts]
    return [list(ids) for ids in inputs.ids or []]


def _checked(
    embedder: Any, tokens: list[list[int]], inputs: Inputs, truncate: bool, ollama: bool
) -> list[list[int]]:
    n_vocab = embedder.rt.n_vocab
    if inputs.ids is not None:
        for i, ids in enumerate(tokens):
            bad_id = next((t for t in ids if not 0 <= t < n_vocab), None)
            if bad_id is not None:
                raise bad(
                    "input", f"input[{i}] holds token id {bad_id}, outside the vocabulary (0..{n_vocab - 1})"
                )
    limit = embedder.max_tokens
    out = []
    for i, ids in enumerate(tokens):
        if len(ids) > limit:
            if not truncate:
                message = (
                    OLLAMA_TOO_LONG
                    if ollama
                    else (
                        f"input[{i}] is {len(ids)} tokens; this model embeds at most {limit} "
                        "(shorten it, or send truncate: true)"
                    )
                )
                raise bad("input" if not ollama else "truncate", message)
            ids = embedder.truncate(ids)
        out.append(ids)
    return out


async def embed(
    server: Server,
    request: Any,
    name: str | None,
    inputs: Inputs,
    *,
    truncate: bool,
    keep_alive: Any = None,
    dimensions: int | None = None,
    ollama: bool = False,
) -> Answer:
    """The request's vectors (pooled, not normalized), or an ApiError."""
    t_arrival = request.state.t_arrival
    served = server.find(name)
    t_lease = time.perf_counter()
    lease = await server.lease(served, keep_alive, t_arrival)
    try:
        embedder = getattr(lease.model, "embedder", None)
        if embedder is None:
            raise cannot_embed(served.name)
        if dimensions is not None and dimensions > embedder.n_embd:
            raise bad(
                "dimensions",
                f"dimensions {dimensions} is over {embedder.n_embd}, the size of {served.name}'s vectors",
            )
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        tokens = await loop.run_in_executor(server.renderer, _tokenize, embedder, inputs)
        tokens = _checked(embedder, tokens, inputs, truncate, ollama)
        future: asyncio.Future = loop.create_future()

        def arrive(event: object) -> None:
            if not future.done():
                future.set_result(event)

        job = EmbedJob(
            model=lease.name,
            inputs=tokens,
            deliver=partial(server.mailbox(loop).post, arrive),
            t_arrival=t_arrival,
            access_ms=(t_lease - t_arrival) * 1000,
            lease_ms=(t0 - t_lease) * 1000,
            tokenize_ms=(time.perf_counter() - t0) * 1000,
        )
        server.engine.embed(job)
        done = await future
        if isinstance(done, Refused):
            raise ApiError(done.status, done.message, done.param, code=done.code)
        return Answer(served.name, job, done, embedder.n_embd)
    finally:
        lease.release()
