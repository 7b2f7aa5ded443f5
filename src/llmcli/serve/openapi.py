"""/openapi.json: FastAPI's description of the routes, with each POST route's request body.

The routes read their bodies themselves (serve/state.py `Server.read`: a capped stream, a strict JSON
read, one validation into the route's pydantic model), so FastAPI does not see the models; they are
added here from each dialect's table of bodies.
"""

from __future__ import annotations

from typing import Any

from pydantic.json_schema import models_json_schema

REF = "#/components/schemas/{model}"


def with_bodies(schema: dict, bodies: dict[str, type[Any]]) -> dict:
    """`schema` (FastAPI's) with a JSON request body on each path of `bodies` (path -> model)."""
    models = list(dict.fromkeys(bodies.values()))
    refs, defs = models_json_schema([(model, "validation") for model in models], ref_template=REF)
    schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
    for path, model in bodies.items():
        operation = schema.get("paths", {}).get(path, {}).get("post")
        if operation is not None:
            content = {"application/json": {"schema": refs[(model, "validation")]}}
            operation["requestBody"] = {"required": True, "content": content}
    return schema
