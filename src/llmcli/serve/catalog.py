"""The models a server answers for, by the names its clients send.

`llmcli serve` with no MODEL serves the store: every model `llmcli list` shows, by its store name or
its Ollama-style `name:latest`. `llmcli serve MODEL` serves that one model, whatever name a request
gives, as llama-server's one-model mode does. A route turns a request's `model` into a `Served` once,
at the boundary, or refuses it with a 404 that names the fix; nothing after it reads the text again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmcli.errors import ModelNotFound, UsageError
from llmcli.model_ref import StoreName
from llmcli.store import Store


@dataclass(frozen=True)
class Served:
    """A model a client may name, found."""

    name: str  # the store's name: the pool's key, /api/ps's name and the metrics' model label
    path: Path  # the GGUF llama.cpp opens


class UnknownModel(Exception):
    """A request named no model this server has; `message` names the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Catalog:
    """One model (`one`) or the store's (`store`)."""

    def __init__(self, store: Store | None = None, one: Served | None = None) -> None:
        assert (store is None) != (one is None)
        self.store, self.one = store, one

    def find(self, text: str | None) -> Served:
        """The model a request names (UnknownModel if none has that name)."""
        if self.one is not None:
            return self.one
        assert self.store is not None
        name = (text or "").removesuffix(":latest")
        try:
            entry = self.store.resolve(StoreName(name))
        except (ModelNotFound, UsageError) as exc:
            shown = (text or "")[:200]
            raise UnknownModel(f"model '{shown}' not found, try pulling it first ({exc})") from None
        return Served(entry.name, Path(entry.path))

    def all(self) -> list[Served]:
        if self.one is not None:
            return [self.one]
        assert self.store is not None
        return [Served(m.name, Path(m.path)) for m in self.store.list() if not m.missing]
