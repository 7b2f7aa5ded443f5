"""`cache`: the disk prefix cache's entries, newest use first, and clearing it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.store import Store

if TYPE_CHECKING:
    from llmcli.engine.local.prefix_cache import Cleared, EntryInfo


@dataclass
class CacheListing:
    root: Path
    entries: list[EntryInfo]  # most recently used first
    damaged: int  # files that are not entries, left in place (`cache clear` removes them)


def _cache(store: Store):
    from llmcli.engine.local.prefix_cache import PrefixCache, resolve_root

    # Links resolved, and refused when they lead out of the store: a clear deletes only in the store.
    return PrefixCache(
        resolve_root(store.cache_dir, store.root), max_bytes=0
    )  # the cap matters only to writers


def list_cache(store: Store) -> CacheListing:
    cache = _cache(store)
    entries = sorted(cache.entries(), key=lambda e: e.last_used, reverse=True)
    return CacheListing(store.cache_dir, entries, len(cache.skipped))


def clear_cache(store: Store) -> Cleared:
    return _cache(store).clear()
