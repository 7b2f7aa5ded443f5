"""The server's models: `GET /models`, and the one that --model names among them."""

from __future__ import annotations

from dataclasses import dataclass

from llmcli.engine.openai.client import NAME_LIMIT, Endpoint, get_json
from llmcli.engine.openai.errors import RemoteError
from llmcli.errors import UsageError

NAMES_SHOWN = 8  # model ids listed in one message


@dataclass
class RemoteModel:
    id: str
    owned_by: str = ""
    created: int | None = None
    max_model_len: int | None = None  # vLLM says it; others do not


def list_models(ep: Endpoint) -> list[RemoteModel]:
    data = get_json(ep, "/models", "GET /models")
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise RemoteError(
            f"GET /models at {ep.base_url} did not return a model list; is it an OpenAI-compatible server?"
        )
    return [model for m in items if (model := _model(ep, m)) is not None]


def _model(ep: Endpoint, item: object) -> RemoteModel | None:
    """One entry of the list, or None when it has no usable id; its strings are made safe to show."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        return None
    ident = ep.shown(item["id"], NAME_LIMIT).strip()
    if not ident:
        return None
    owner = item.get("owned_by")
    return RemoteModel(
        ident,
        ep.shown(owner, NAME_LIMIT) if isinstance(owner, str) else "",
        _whole(item.get("created")),
        _whole(item.get("max_model_len")),
    )


def _whole(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def _some(names: list[str]) -> str:
    """Names for one line of a message: the first few, then how many more."""
    more = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def pick_model(ep: Endpoint, models: list[RemoteModel], spec: str | None) -> str:
    """--model among the server's models (exact, else an unambiguous prefix); none given: the only one."""
    ids = [m.id for m in models]
    if not ids:
        raise RemoteError(f"the server at {ep.base_url} lists no models; load one into the server first")
    if spec is None:
        if len(ids) == 1:
            return ids[0]
        raise UsageError(
            f"the server at {ep.base_url} serves {len(ids)} models ({_some(ids)}); pick one with -m MODEL"
        )
    if spec in ids:
        return spec
    matches = [i for i in ids if i.startswith(spec)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise UsageError(
            f"'{spec}' matches {len(matches)} of the server's models ({_some(matches)}); "
            "give more of the name"
        )
    raise UsageError(f"the server at {ep.base_url} has no model '{spec}'; it serves: {_some(ids)}")
