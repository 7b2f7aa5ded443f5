"""The chat page at /ui: static files shipped in this package, served from the same origin as the API
it calls, under a CSP of `default-src 'self'` (no inline script or style, nothing fetched elsewhere).

The page needs no key to load (a browser sends no bearer header when it navigates, as llama-server's
page): it holds no data, and every API call it makes asks for the key on a 401. What the page
builds itself from, the parameter and stage tables, is /ui/tables.json, so its settings and its
stage bar are the CLI's rows, never a copy.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from llmcli.params import USER_PARAMS, Param
from llmcli.stages import STAGES

PAGE = "/ui"
# The files the page is made of: URL path -> (the file in this package, its media type).
FILES: dict[str, tuple[str, str]] = {
    PAGE: ("index.html", "text/html; charset=utf-8"),
    f"{PAGE}/app.js": ("app.js", "text/javascript; charset=utf-8"),
    f"{PAGE}/markdown.js": ("markdown.js", "text/javascript; charset=utf-8"),
    f"{PAGE}/style.css": ("style.css", "text/css; charset=utf-8"),
    f"{PAGE}/icon.svg": ("icon.svg", "image/svg+xml"),
}
TABLES = f"{PAGE}/tables.json"
PATHS = (*FILES, TABLES)  # answered without a key (app.py's PUBLIC)
# 'self' only: the page's own files and the server's routes. The rest is shut: no <base>, no form
# posts, no framing (a key typed into a framed page could be clickjacked).
CSP = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",  # a new llmcli's page, not the last one's, after an upgrade
}


@cache
def _read(name: str) -> bytes:
    return files(__name__).joinpath(name).read_bytes()


def _param(row: Param) -> dict:
    return {
        "name": row.name,
        "kind": row.kind.__name__,
        "default": row.default,
        "low": row.low,
        "high": row.high,
        "help": row.help,
        "flags": list(row.flags),
        # the request field the page sends it as: OpenAI's, else the first extension llmcli reads
        "field": row.openai or row.extensions[0],
        "none_means": row.none_means,
    }


def tables() -> dict:
    """What the page builds its settings and its stage bar from."""
    return {
        "params": [_param(row) for row in USER_PARAMS.values()],
        "stages": [{"key": s.key, "number": s.number, "label": s.label, "covers": s.covers} for s in STAGES],
    }


def router():
    """The page's routes (fastapi imported here: app.py reads PATHS at import)."""
    from fastapi import APIRouter
    from starlette.responses import JSONResponse, Response

    routes = APIRouter()

    def serve_file(name: str, media_type: str):
        async def page():
            return Response(_read(name), media_type=media_type, headers=HEADERS)

        return page

    for path, (name, media_type) in FILES.items():
        routes.add_api_route(path, serve_file(name, media_type), methods=["GET"], include_in_schema=False)

    async def table():
        return JSONResponse(tables(), headers=HEADERS)

    routes.add_api_route(TABLES, table, methods=["GET"], include_in_schema=False)
    return routes
