"""The models a server answers for, by the names its clients send.

`llmcli serve` with no MODEL serves the store: every model `llmcli list` shows, by its store name or
its Ollama-style `name:latest`, or by `REPO[:QUANT]` once pulled. `llmcli serve MODEL` serves that one
model, whatever name a request gives, as llama-server's one-model mode does. A route turns a request's
`model` into a `Served` once, at the boundary, or refuses it with a 404 that names the fix; nothing
after it reads the text again.

A request's name is untrusted text and is never a path: it is only ever compared with the names the
store lists, so `../x`, `/etc/passwd`, a NUL or a fullwidth `ｓｍｏｌｌｍ２` reach no file (unlike the
CLI's MODEL, which may be a GGUF path on disk).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from llmcli.display import printable
from llmcli.store import MAX_NAME, NAME_SHAPE, ModelEntry, Store

# The names a client may send have the store's name shape, ASCII only, so that a confusable (a
# Cyrillic `а`, a fullwidth `ｓ`) never looks like a name it is not (store.NAME_SHAPE); `hf.co/` may lead
# a repo.
LATEST = ":latest"  # Ollama's tag for a name given without one
HUB_PREFIXES = ("hf.co/", "huggingface.co/")  # as `llmcli pull` and Ollama's hf.co/ names accept them
SHOWN = 80  # characters of a refused name a message repeats


@dataclass(frozen=True)
class Served:
    """A model a client may name, found."""

    name: str  # the store's name: the pool's key, /api/ps's name and the metrics' model label
    path: Path  # the GGUF llama.cpp opens
    # The file's size and modification time when the request named it: a model pulled or converted
    # again under the same name changes it, and the pool loads the new file (as Ollama reloads).
    stamp: tuple[int, int] = (0, 0)


class UnknownModel(Exception):
    """A request named no model this server has; `message` names the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def not_found(text: str) -> UnknownModel:
    return UnknownModel(f"model '{printable(text, SHOWN)}' not found, try pulling it first")


def well_formed(text: object) -> str | None:
    """The name if it has a name's shape (a length, an alphabet, no empty or dot-led part), else None."""
    if not isinstance(text, str) or len(text) > MAX_NAME + len(LATEST) or not NAME_SHAPE.fullmatch(text):
        return None
    return text


def lookup(text: str, models: Sequence[ModelEntry], prefix: bool = True) -> ModelEntry:
    """The entry `text` names among `models`, by these rules, first match wins:

    1. the store name itself, with or without `:latest` (Ollama's clients add it);
    2. `REPO[:QUANT]` (or `hf.co/REPO:QUANT`) of a pulled model: its source repo and quant, any case;
    3. `prefix`: the one store name that begins with the text (as `llmcli chat` takes one).
    UnknownModel otherwise, or when a rule matches several (naming them)."""
    name = well_formed(text)
    if name is None:
        raise not_found(text)
    by_name = {m.name: m for m in models}
    for candidate in (name, name.removesuffix(LATEST)):
        if candidate in by_name:
            return by_name[candidate]
    bare = name.removesuffix(LATEST)
    for lead in HUB_PREFIXES:
        if bare.lower().startswith(lead):
            bare = bare[len(lead) :]
    repo, _, quant = bare.partition(":")
    pulled = [
        m
        for m in models
        if (m.source or "").lower() == f"hf:{repo.lower()}"
        and (not quant or (m.quant or "").lower() == quant.lower())
    ]
    if not pulled and prefix and name == bare:
        pulled = [m for m in models if m.name.startswith(name)]
    if len(pulled) == 1:
        return pulled[0]
    if pulled:
        several = ", ".join(sorted(printable(m.name, SHOWN) for m in pulled))
        raise UnknownModel(f"model '{printable(text, SHOWN)}' names several models ({several}); give one")
    raise not_found(text)


def aliased(text: str, aliases: Sequence[tuple[str, str]]) -> str:
    """The model an alias names for `text` (`--alias 'claude-*=qwen3'`: the first pattern that matches,
    case-sensitive, as the names are), else `text` itself."""
    return next((model for pattern, model in aliases if fnmatchcase(text, pattern)), text)


class Catalog:
    """One model (`one`) or the store's (`store`); `aliases`: (NAME pattern, MODEL) pairs of --alias,
    so that a client that asks for names of its own (Claude Code's configured and background models)
    finds a model."""

    def __init__(
        self, store: Store | None = None, one: Served | None = None, aliases: Sequence[tuple[str, str]] = ()
    ) -> None:
        assert (store is None) != (one is None)
        self.store, self.one, self.aliases = store, one, tuple(aliases)

    def find(self, text: str | None, *, prefix: bool = True) -> Served:
        """The model a request names (UnknownModel if none has that name). `prefix`: a unique start
        of a name finds it too (a route that deletes asks for the whole name)."""
        if self.one is not None:
            return self.one
        entry = lookup(aliased(text or "", self.aliases), self.entries(), prefix)
        if entry.missing:
            shown = printable(entry.name, SHOWN)
            raise UnknownModel(f"the file of model '{shown}' is gone; pull it again, or delete it")
        return served(entry)

    def entries(self) -> list[ModelEntry]:
        """The store's entries (a broken manifest is the store's UsageError: the server's 500)."""
        assert self.store is not None
        return self.store.list()

    def all(self) -> list[Served]:
        if self.one is not None:
            return [self.one]
        return [served(m) for m in self.entries() if not m.missing]


def served(entry: ModelEntry) -> Served:
    path = Path(entry.path)
    try:
        stat = path.stat()
    except OSError:  # gone since the store was read: the load will say so
        return Served(entry.name, path)
    return Served(entry.name, path, (stat.st_size, stat.st_mtime_ns))
