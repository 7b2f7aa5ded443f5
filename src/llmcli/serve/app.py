"""The FastAPI app: the access middleware, the lifespan that starts the engine thread, the error
shapes, /health and /metrics; the OpenAI and Ollama routes live in their own modules."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from llmcli.serve.access import Gate
from llmcli.serve.config import ServeConfig
from llmcli.serve.engine import Engine
from llmcli.serve.errors import ApiError
from llmcli.serve.metrics import ServeMetrics

PUBLIC = ("/", "/health")  # answered without a key: a load balancer's probe, a client's "is it up?"
UNCOUNTED = ("/", "/health", "/metrics")  # a scraper's polls do not use up a key's rate limit


@dataclass
class Server:
    """Everything a route needs, made once per process."""

    config: ServeConfig
    engine: Engine
    gate: Gate
    metrics: ServeMetrics
    started: float = field(default_factory=time.time)
    on_status: Callable[[Status], None] | None = None  # the terminal's live status line, each second


@dataclass
class Status:
    """What a terminal's status line shows."""

    loading: bool
    running: int
    waiting: int
    finished: int
    tokens_per_s: float  # generated in the last interval
    kv_used: float  # 0..1


async def report_status(server: Server, every: float = 1.0) -> None:
    assert server.on_status is not None
    last_tokens, last_t = 0, time.perf_counter()
    while True:
        await asyncio.sleep(every)
        snap, now = server.engine.snapshot, time.perf_counter()
        rate = (snap.generated - last_tokens) / (now - last_t) if snap.generated >= last_tokens else 0.0
        last_tokens, last_t = snap.generated, now
        server.on_status(
            Status(
                loading=not snap.ready,
                running=snap.running,
                waiting=server.engine.queued,
                finished=snap.finished,
                tokens_per_s=rate,
                kv_used=snap.kv_used / snap.n_ctx if snap.n_ctx else 0.0,
            )
        )


def is_ollama(path: str) -> bool:
    return path.startswith("/api/")


def error_response(exc: ApiError, path: str, metrics: ServeMetrics | None = None):
    from starlette.responses import JSONResponse

    if metrics is not None:
        metrics.refused.labels(status=str(exc.status)).inc()
    return JSONResponse(exc.body(is_ollama(path)), status_code=exc.status, headers=exc.headers)


class HeadAsGet:
    """HEAD answered as GET without the body, on every GET route: `curl -I`, `wget --spider` and load
    balancers probe /health that way (FastAPI's routes take only the methods they name)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


class AccessMiddleware:
    """Pure ASGI (a BaseHTTPMiddleware would hide a client's disconnect from the streams): stamps the
    arrival time, checks the key (401) and a declared Content-Length (413) before any route runs."""

    def __init__(self, app, server: Server) -> None:
        self.app = app
        self.server = server

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        state = scope.setdefault("state", {})
        state["t_arrival"] = time.perf_counter()
        path = scope["path"]
        if path not in PUBLIC:
            headers = Headers(scope=scope)
            try:
                who = self.server.gate.identify(headers.get("authorization"), headers.get("x-api-key"))
                state["who"] = who
                if path not in UNCOUNTED:
                    self.server.gate.count(who)
                length = headers.get("content-length")
                if length is not None and length.isdigit() and int(length) > self.server.config.max_body:
                    from llmcli.serve.body import too_large

                    raise too_large(self.server.config.max_body)
            except ApiError as exc:
                await error_response(exc, path, self.server.metrics)(scope, receive, send)
                return
        try:
            await self.app(scope, receive, send)
        except asyncio.CancelledError:
            # The grace period after SIGTERM ran out and uvicorn cancelled the request: its sequence
            # is cancelled with the engine's stop; nothing to report per request.
            return


async def read_json(request, server: Server) -> dict:
    """The body, read no further than --max-body (a chunked body has no Content-Length to check)
    and no later than --timeout after the request arrived (bytes that trickle in keep no one)."""
    from starlette.requests import ClientDisconnect

    from llmcli.serve.body import parse_json, too_large
    from llmcli.serve.call import ClientLeft

    cap, timeout = server.config.max_body, server.config.timeout

    async def read() -> bytes:
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > cap:
                raise too_large(cap)
        return bytes(data)

    # The deadline cancels this task, as asyncio.timeout does (3.11+): wait_for's own task would
    # cost a turn of the loop, in which a client that sent its body and left looks gone before
    # its body is read.
    task, expired = asyncio.current_task(), []
    assert task is not None
    left = request.state.t_arrival + timeout - time.perf_counter()
    timer = asyncio.get_running_loop().call_later(max(left, 0.0), lambda: expired.append(task.cancel()))
    try:
        data = await read()
    except asyncio.CancelledError:
        if not expired:  # cancelled by the server (its grace period ran out)
            raise
        if hasattr(task, "uncancel"):  # Python 3.11+
            task.uncancel()
        raise ApiError(
            408, f"the request body took longer than {timeout:g} s, the server's --timeout; send it whole"
        ) from None
    except ClientDisconnect:  # gone mid-body (or closed to make room for another connection)
        raise ClientLeft() from None
    finally:
        timer.cancel()
    return parse_json(data)


def create_app(server: Server):
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response

    from llmcli.serve import ollama_api, openai_api
    from llmcli.serve.call import ClientLeft

    @asynccontextmanager
    async def lifespan(app):
        server.engine.start()
        status = asyncio.create_task(report_status(server)) if server.on_status else None
        try:
            yield
        finally:
            if status is not None:
                status.cancel()
            server.engine.stop(timeout=server.config.grace + 30)

    app = FastAPI(lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None)
    app.state.server = server

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return error_response(exc, request.url.path, server.metrics)

    @app.exception_handler(ClientLeft)
    async def client_left(request: Request, exc: ClientLeft):
        return Response(status_code=499)  # nobody reads it: the sequence is cancelled

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(ApiError(exc.status_code, str(exc.detail)), request.url.path, server.metrics)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first: dict = next(iter(exc.errors()), {})
        where = ".".join(str(part) for part in first.get("loc", ()))
        return error_response(
            ApiError(400, f"{where}: {first.get('msg', 'invalid')}", where or None),
            request.url.path,
            server.metrics,
        )

    @app.get("/")
    async def root():  # as Ollama's "Ollama is running": a client's first probe of a server
        return Response("llmcli is running", media_type="text/plain")

    @app.get("/health")
    async def health():
        engine = server.engine
        if engine.error is not None:
            return JSONResponse({"status": "error"}, status_code=500)
        if not engine.ready.is_set():
            return JSONResponse({"status": "loading model"}, status_code=503, headers={"Retry-After": "1"})
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics():
        data, content_type = server.metrics.render()
        return Response(data, media_type=content_type)

    openai_api.register(app, server)
    ollama_api.register(app, server)
    app.add_middleware(AccessMiddleware, server=server)
    app.add_middleware(HeadAsGet)  # outermost: a HEAD passes the key check as its GET would
    return app


def ready_or_503(server: Server) -> None:
    if server.engine.error is not None:  # the server is on its way down
        raise ApiError(503, "the engine has stopped; the server is shutting down")
    if not server.engine.ready.is_set():
        raise ApiError(503, "the model is still loading; try again in a moment", retry_after=1)
