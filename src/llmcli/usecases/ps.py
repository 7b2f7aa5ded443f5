"""`llmcli ps`: the models a running `llmcli serve` (or Ollama) has loaded, read from its /api/ps."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from llmcli.address import HOST, PORT
from llmcli.engine.openai.errors import RemoteError

if TYPE_CHECKING:
    from llmcli.engine.openai.client import Endpoint

DEFAULT_SERVER = f"http://{HOST}:{PORT}"  # `llmcli serve`'s own default address


@dataclass
class Loaded:
    """One loaded model, as the server reports it (its text is the server's: shown escaped)."""

    name: str
    digest: str
    size: int  # bytes
    size_vram: int  # of those, on a device
    context_length: int | None
    expires_at: datetime | None  # None: the server gave none, or one that is not a time


def server_endpoint(url: str | None, api_key: str | None, timeout: float | None) -> Endpoint:
    """The server `ps` asks: `url` (--endpoint or $LLMCLI_ENDPOINT), else `llmcli serve`'s own default."""
    from llmcli.engine.openai.client import Endpoint

    return Endpoint.parse(url or DEFAULT_SERVER, api_key, timeout)


def loaded_models(endpoint: Endpoint) -> list[Loaded]:
    from llmcli.engine.openai.client import get_json

    root = replace(endpoint, base_url=endpoint.base_url.removesuffix(endpoint.parts.path))
    data = get_json(root, "/api/ps", "the server's loaded models")
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, list) or not all(isinstance(m, dict) for m in models):
        raise RemoteError(f"{root} answered /api/ps without a list of models; is it `llmcli serve`?")
    return [
        Loaded(
            str(m.get("name", "")),
            str(m.get("digest", "")),
            _count(m.get("size")),
            _count(m.get("size_vram")),
            _count(m.get("context_length")) or None,
            _time(m.get("expires_at")),
        )
        for m in models
    ]


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _time(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)
