"""The FastAPI app: the middleware (CORS, HEAD, access), the lifespan that starts the engine thread,
the error shapes, /, /health, /version and /metrics; each dialect's routes are a router of their own
(openai/, ollama/, anthropic/, responses/, llama/: routes.py), and what they share is serve/state.py."""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Any

from llmcli.serve.errors import ApiError
from llmcli.serve.metrics import ServeMetrics
from llmcli.serve.state import Server, report_status, too_large
from llmcli.serve.webui import PATHS as PAGE_PATHS

# Answered without a key: a load balancer's probe, a client's "is it up?", and the chat page's static
# files (a browser sends no key when it navigates; the page asks for one on its API calls' 401).
PUBLIC = ("/", "/health", *PAGE_PATHS)
UNCOUNTED = ("/", "/health", "/metrics")  # a scraper's polls do not use up a key's rate limit


def is_ollama(path: str) -> bool:
    return path.startswith("/api/")


def error_body(exc: ApiError, path: str) -> dict:
    """The error in the shape of the dialect whose route was asked (Anthropic's, Ollama's, OpenAI's)."""
    from llmcli.serve.anthropic import routes as anthropic
    from llmcli.serve.anthropic import wire

    if path.startswith(anthropic.PATHS):
        return wire.error(exc)
    return exc.body(is_ollama(path))


def error_status(exc: ApiError, path: str) -> int:
    """The status in the dialect's terms: Anthropic's overload is 529, every other dialect's 503."""
    from llmcli.serve.anthropic import routes as anthropic
    from llmcli.serve.anthropic import wire

    return wire.status(exc) if path.startswith(anthropic.PATHS) else exc.status


def error_response(exc: ApiError, path: str, metrics: ServeMetrics | None = None):
    from starlette.responses import JSONResponse

    status = error_status(exc, path)
    if metrics is not None:
        metrics.refused.labels(status=str(status)).inc()
    return JSONResponse(error_body(exc, path), status_code=status, headers=exc.headers)


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
    arrival time, checks the key (401), its rate limit (429) and a declared Content-Length (413)
    before any route runs (serve/access.py's Door), and closes the request's call, if it left one
    open, when the request ends."""

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
                who = self.server.door.identify(headers.get("authorization"), headers.get("x-api-key"))
                state["who"] = who
                if path not in UNCOUNTED:
                    self.server.door.count(who)
                length = headers.get("content-length")
                if length is not None and length.isdigit() and int(length) > self.server.config.max_body:
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
        finally:
            # The request's call (Server.start) closes itself when its events end; a stream whose
            # client left before its first piece, or one abandoned at a send, never got there.
            call = state.get("call")
            if call is not None:
                call.close()


def create_app(server: Server):
    from fastapi import FastAPI, Request
    from starlette.exceptions import HTTPException
    from starlette.responses import JSONResponse, Response

    from llmcli.errors import LlmcliError
    from llmcli.serve.anthropic.routes import router as anthropic_router
    from llmcli.serve.call import ClientLeft
    from llmcli.serve.llama.routes import router as llama_router
    from llmcli.serve.ollama.manage import router as manage_router
    from llmcli.serve.ollama.routes import router as ollama_router
    from llmcli.serve.openai.routes import router as openai_router
    from llmcli.serve.responses.routes import router as responses_router

    @asynccontextmanager
    async def lifespan(app):
        server.engine.start()
        status = asyncio.create_task(report_status(server)) if server.on_status else None
        one = server.catalog.one
        loading = asyncio.create_task(preload(one)) if one is not None else None
        try:
            yield
        finally:
            if status is not None:
                status.cancel()
            if loading is not None:
                loading.cancel()
            server.engine.stop(timeout=server.config.grace + 30)
            server.close_mailbox()
            server.pool.close()
            server.renderer.shutdown(wait=False, cancel_futures=True)

    async def preload(one) -> None:
        """`llmcli serve MODEL`: its model loads at start; a load that fails stops the server."""
        try:
            await server.pool.preload(one)
        except Exception:
            server.engine.on_fatal()

    # /openapi.json documents every route and body (behind the key, as every route but / and /health)
    app = FastAPI(lifespan=lifespan, title="llmcli serve", docs_url=None, redoc_url=None)
    app.state.server = server

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return error_response(exc, request.url.path, server.metrics)

    @app.exception_handler(LlmcliError)
    async def store_error(request: Request, exc: LlmcliError):
        # The store's own trouble (a broken manifest) while a route reads it: its one line, as 500.
        return error_response(ApiError(500, str(exc)), request.url.path, server.metrics)

    @app.exception_handler(ClientLeft)
    async def client_left(request: Request, exc: ClientLeft):
        return Response(status_code=499)  # nobody reads it: the sequence is cancelled

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(ApiError(exc.status_code, str(exc.detail)), request.url.path, server.metrics)

    @app.get("/")
    async def root():  # Ollama's clients probe for exactly these words before they use a server
        return Response("Ollama is running", media_type="text/plain")

    @app.get("/health")
    async def health():
        if server.engine.error is not None or server.pool.error is not None:
            return JSONResponse({"status": "error"}, status_code=500)
        if server.pool.starting:
            return JSONResponse({"status": "loading model"}, status_code=503, headers={"Retry-After": "1"})
        return {"status": "ok"}

    @app.get("/version")
    async def version():
        """llmcli's own version (/api/version answers the Ollama API level clients check)."""
        from llmcli.serve.ollama.routes import VERSION_HEADER, llmcli_version

        return JSONResponse({"version": llmcli_version()}, headers={VERSION_HEADER: llmcli_version()})

    @app.get("/metrics")
    async def metrics():
        data, content_type = server.metrics.render()
        return Response(data, media_type=content_type)

    def openapi() -> dict:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            from llmcli.serve.anthropic.routes import BODIES as ANTHROPIC_BODIES
            from llmcli.serve.llama.routes import BODIES as LLAMA_BODIES
            from llmcli.serve.ollama.manage import BODIES as MANAGE_BODIES
            from llmcli.serve.ollama.routes import BODIES as OLLAMA_BODIES
            from llmcli.serve.openai.routes import BODIES as OPENAI_BODIES
            from llmcli.serve.openapi import with_bodies
            from llmcli.serve.responses.routes import BODIES as RESPONSES_BODIES

            schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
            bodies: dict[str, Any] = {f"/v1{path}": model for path, model in OPENAI_BODIES.items()}
            bodies |= OLLAMA_BODIES | MANAGE_BODIES | ANTHROPIC_BODIES | RESPONSES_BODIES | LLAMA_BODIES
            from llmcli.serve.rerank import BODIES as EMBED_BODIES

            bodies |= EMBED_BODIES
            app.openapi_schema = with_bodies(schema, bodies)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.include_router(anthropic_router)  # before OpenAI's: /v1/messages is Anthropic's
    app.include_router(openai_router, prefix="/v1")
    app.include_router(openai_router, include_in_schema=False)  # llama-server's un-prefixed aliases
    app.include_router(responses_router, prefix="/v1")
    app.include_router(responses_router, include_in_schema=False)
    app.include_router(ollama_router)
    app.include_router(llama_router)
    app.include_router(manage_router)
    from llmcli.serve.ollama.embed import router as ollama_embed_router
    from llmcli.serve.openai.embeddings import router as openai_embed_router

    app.include_router(openai_embed_router, prefix="/v1")
    app.include_router(openai_embed_router, include_in_schema=False)
    app.include_router(ollama_embed_router)
    from llmcli.serve.rerank import router as rerank_router

    app.include_router(rerank_router, prefix="/v1")
    app.include_router(rerank_router, include_in_schema=False)
    if server.config.ui:
        from llmcli.serve import webui

        app.include_router(webui.router())
    app.add_middleware(AccessMiddleware, server=server)
    app.add_middleware(HeadAsGet)  # a HEAD passes the key check as its GET would
    from starlette.middleware.cors import CORSMiddleware

    from llmcli.serve.config import LOOPBACK_ORIGINS

    # Outermost: a browser's preflight (OPTIONS, no key) is answered here, before the key check. A
    # page served from this machine may call (as Ollama allows), other origins only when named.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=[origin for origin in server.config.cors_origins if origin != "localhost"],
        allow_origin_regex=LOOPBACK_ORIGINS,
        allow_methods=["GET", "POST", "DELETE", "HEAD", "OPTIONS"],
        allow_headers=["Authorization", "Content-Type", "X-Api-Key", "Anthropic-Version", "Anthropic-Beta"],
        expose_headers=["Retry-After", "X-Llmcli-Timings", "X-Llmcli-Version"],
        max_age=600,
    )
    return app
