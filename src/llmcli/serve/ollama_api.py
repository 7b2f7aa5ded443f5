"""Ollama's routes: /api/chat and /api/generate (NDJSON streams, or one object), /api/tags,
/api/show, /api/version. Durations are nanoseconds, as Ollama reports them; `timings` is added."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

from fastapi import Request
from starlette.responses import StreamingResponse

from llmcli.engine.templates.thinking import REASONING
from llmcli.serve.app import Server, read_json, ready_or_503
from llmcli.serve.body import ollama_chat, ollama_generate
from llmcli.serve.call import Call, ClosesCall
from llmcli.serve.errors import ApiError
from llmcli.serve.outcome import Outcome, timings

NS = 1_000_000  # ns a millisecond


def _now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _ns(ms: float | None) -> int:
    return int((ms or 0.0) * NS)


class Shape:
    def __init__(self, chat: bool, model: str) -> None:
        self.chat, self.model = chat, model

    def piece(self, text: str, thinking: str, done: bool) -> dict:
        body: dict = {"model": self.model, "created_at": _now()}
        if self.chat:
            message: dict = {"role": "assistant", "content": text}
            if thinking:
                message["thinking"] = thinking
            body["message"] = message
        else:
            body["response"] = text
            if thinking:
                body["thinking"] = thinking
        body["done"] = done
        return body

    def line(self, kind: str, text: str) -> dict:
        """A streamed piece: the answer's text, or the reasoning's."""
        return self.piece("" if kind == REASONING else text, text if kind == REASONING else "", False)

    def final(self, call: Call, outcome: Outcome, text: str = "", thinking: str = "") -> dict:
        body = self.piece(text, thinking, True)
        total = (time.perf_counter() - call.job.t_arrival) * 1000
        body.update(
            done_reason="length" if outcome.finish_reason == "length" else "stop",
            total_duration=_ns(total),
            load_duration=0,
            prompt_eval_count=outcome.prompt_tokens,
            prompt_eval_duration=_ns(outcome.prefill_ms),
            eval_count=outcome.completion_tokens,
            eval_duration=_ns(outcome.decode_ms),
            timings=timings(outcome, call.postprocess_s * 1000, call.return_s * 1000),
        )
        return body


class ClosingStream(ClosesCall, StreamingResponse):
    """Ollama's stream, one JSON object a line."""


def details(server: Server) -> dict:
    facts = server.engine.model_facts
    arch = str(facts.get("arch") or "")
    n_params = facts.get("n_params")
    size = (
        f"{n_params / 1e6:.0f}M"
        if isinstance(n_params, int) and n_params < 1e9
        else (f"{n_params / 1e9:.1f}B" if isinstance(n_params, int) else "")
    )
    return {
        "parent_model": "",
        "format": "gguf",
        "family": arch,
        "families": [arch] if arch else None,
        "parameter_size": size,
        "quantization_level": str(facts.get("description") or "").rsplit(" ", 1)[-1],
    }


def register(app, server: Server) -> None:
    from starlette.responses import JSONResponse

    config = server.config

    async def generate(request: Request, chat: bool):
        ready_or_503(server)
        body = await read_json(request, server)
        gen = (
            ollama_chat(body, config.params, config.system)
            if chat
            else ollama_generate(body, config.params, config.system)
        )
        call = Call(server, gen, request.state.who, request.state.t_arrival)
        await call.start()
        shape = Shape(chat, config.model_name)
        if gen.stream:
            return ClosingStream(call, lines(call, shape), media_type="application/x-ndjson")
        reply = await call.whole(request.is_disconnected)
        return JSONResponse(shape.final(call, reply.outcome, reply.text, reply.reasoning))

    async def lines(call: Call, shape: Shape):
        async for line in call.streamed(
            lambda kind, text: json.dumps(shape.line(kind, text)) + "\n",
            lambda exc: json.dumps(exc.body(ollama=True)) + "\n",
        ):
            yield line
        if call.outcome is not None:
            yield json.dumps(shape.final(call, call.outcome)) + "\n"

    @app.post("/api/chat")
    async def api_chat(request: Request):
        return await generate(request, True)

    @app.post("/api/generate")
    async def api_generate(request: Request):
        return await generate(request, False)

    @app.get("/api/tags")
    async def tags():
        stat = Path(config.model_path).stat()
        modified = datetime.fromtimestamp(stat.st_mtime, timezone.utc).isoformat().replace("+00:00", "Z")
        entry = {
            "name": config.model_name,
            "model": config.model_name,
            "modified_at": modified,
            "size": stat.st_size,
            "details": details(server) if server.engine.ready.is_set() else None,
        }
        return {"models": [entry]}

    @app.post("/api/show")
    async def show(request: Request):
        ready_or_503(server)
        body = await read_json(request, server)
        name = body.get("model", body.get("name"))
        if not isinstance(name, str):
            raise ApiError(400, "model must be a string naming the model")
        if name.split(":")[0] != config.model_name.split(":")[0]:
            raise ApiError(404, f"model '{name}' not found; this server serves '{config.model_name}'")
        facts = server.engine.model_facts
        arch = facts.get("arch") or "general"
        return {
            "modelfile": "",
            "parameters": "",
            "template": server.engine.template_source,
            "details": details(server),
            "model_info": {
                "general.architecture": arch,
                "general.parameter_count": facts.get("n_params"),
                f"{arch}.context_length": facts.get("n_ctx_train"),
            },
            "capabilities": ["completion"],
        }

    @app.get("/api/version")
    async def version():
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as package_version

        try:
            return {"version": package_version("llmcli")}
        except PackageNotFoundError:
            return {"version": "0.0.0"}
