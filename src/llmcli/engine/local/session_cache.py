"""A chat session's use of the disk prefix cache: its key, restoring a prefix, saving the tip.

Every failure of the cache costs only the cache: an entry that cannot be used falls back to a full
prefill with one note (shown with --stats), and a folder that cannot be used (not a folder,
unreadable, a link out of the store) is left alone for the session, with one warning when the tip
would have been saved. Either way the reply is the one `--no-cache` gives.

Library code: no printing, no environment.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from llmcli.engine.local.cache_entry import CacheKey, CorruptEntry
from llmcli.engine.local.prefix_cache import (
    MIN_TOKENS,
    CacheUnusable,
    PrefixCache,
    reason,
    resolve_root,
    unusable,
)
from llmcli.errors import RuntimeFailure


def _unusable(cache: PrefixCache, exc: OSError | CacheUnusable) -> str:
    return str(exc if isinstance(exc, CacheUnusable) else unusable(cache.root, exc))


def _prepare(cache: PrefixCache) -> str | None:
    """Make the folder and evict down to the cap; why the folder is unusable, if it is."""
    try:
        cache.root.mkdir(parents=True, exist_ok=True)
        cache.evict()
    except (OSError, CacheUnusable) as exc:
        return _unusable(cache, exc)
    return None


def cache_key(runtime, memo_dir: Path | None = None) -> CacheKey:
    """The key for states made by this runtime (an engine.runtime.Runtime); the model file's hash
    is memoised in `memo_dir` (the cache folder) when given."""
    from llmcli import llama_lib
    from llmcli.engine.local.model_identity import model_identity

    params = runtime.kv_params
    return CacheKey(
        model=model_identity(runtime.path, memo_dir),
        llama_cpp=llama_lib.version(),
        n_ctx=runtime.n_ctx,
        n_batch=runtime.n_batch,
        n_ubatch=params["n_ubatch"],
        flash_attn=params["flash_attn"],
        type_k=params["type_k"],
        type_v=params["type_v"],
    )


@dataclass
class Restored:
    """What ② schedule got from the disk: tokens now in the KV cache, and a note when an entry failed."""

    reused: int  # 0 when nothing was loaded
    note: str | None = None


@dataclass
class Saved:
    """What saving a tip has to say: a warning (shown always) or a note (shown with --stats)."""

    warning: str | None = None
    note: str | None = None


@dataclass
class SessionCache:
    """One session's view of the cache: its key, the name to list its model under, whether to save.

    `unusable`: why the cache folder itself failed (not a folder, unreadable, a link out of the
    store). The session then neither reads nor writes it, and says so once, as the warning of the
    next save: the reply is the same as with --no-cache."""

    cache: PrefixCache
    key: CacheKey | None  # None only when unusable: the model file is then not hashed at all
    model_name: str
    save: bool = True  # write conversation tips (False: only read)
    unusable: str | None = None

    @classmethod
    def open(cls, root: Path, store_root: Path, max_bytes: int, runtime, model_name: str) -> SessionCache:
        """The session's cache in `root` (which must stay inside `store_root`), its cap applied now."""
        try:
            cache, unusable = PrefixCache(resolve_root(root, store_root), max_bytes), None
            unusable = _prepare(cache)
        except CacheUnusable as exc:
            cache, unusable = PrefixCache(Path(root), max_bytes), str(exc)
        # The model's hash, remembered in the cache folder when it can be used.
        key = cache_key(runtime, cache.root) if unusable is None else None
        return cls(cache, key, model_name, unusable=unusable)

    def _fail(self, exc: OSError | CacheUnusable) -> None:
        self.unusable = _unusable(self.cache, exc)

    def restore(self, runtime, tokens: list[int], better_than: int, limit: int) -> Restored:
        """Load the entry sharing the longest prefix with `tokens` (at most `limit` of them) when it
        beats `better_than` tokens already in the KV cache. Any failure leaves the runtime cleared
        or untouched, and says why in one note."""
        if self.unusable is not None or self.key is None or limit < MIN_TOKENS or limit <= better_than:
            return Restored(0)  # nothing the disk could add: not even a look
        try:
            match = self.cache.best(self.key.id, tokens, remove_damaged=True)
        except (OSError, CacheUnusable) as exc:
            self._fail(exc)
            return Restored(0) if self.save else Restored(0, f"{self.unusable}; prefilled in full")
        note = (
            "; ".join(
                f"{verb} {n} damaged prefix-cache entr{'y' if n == 1 else 'ies'}"
                for verb, n in (("removed", len(self.cache.removed)), ("skipped", len(self.cache.skipped)))
                if n
            )
            or None
        )
        if match is None:
            return Restored(0, note)
        length = min(match.length, limit)
        if length < MIN_TOKENS or length <= better_than:
            return Restored(0, note)
        try:
            _, state = self.cache.load(match.entry, runtime.state_bound())
        except CorruptEntry as exc:
            self.cache.remove(match.entry.path, match.entry.seen)
            return Restored(
                0,
                f"the prefix-cache entry {match.entry.path.name} is {exc}; removed it and prefilled in full",
            )
        if not runtime.load_state(state, match.entry.tokens):
            self.cache.remove(match.entry.path, match.entry.seen)
            return Restored(
                0,
                f"llama.cpp refused the prefix-cache entry {match.entry.path.name} "
                f"({runtime.last_log()}); removed it and prefilled in full",
            )
        return Restored(runtime.keep_prefix(length), note)

    def save_tip(self, runtime) -> Saved:
        """Write what the KV cache holds now as an entry; a warning (disk full...) instead of raising,
        and a note (shown with --stats) when the entry alone is larger than the cap."""
        tokens = list(runtime.kv_tokens)
        if not self.save or len(tokens) < MIN_TOKENS:
            return Saved()
        if self.unusable is not None or self.key is None:
            self.save = False  # said once: the session saves nothing more
            return Saved(warning=f"{self.unusable}; answered without the cache")
        from llmcli.units import format_bytes

        try:
            state = runtime.state_bytes()
            written = self.cache.write(self.key, self.model_name, tokens, state)
        except (OSError, RuntimeFailure) as exc:
            return Saved(
                warning=f"could not save the prompt cache in {self.cache.root} ({reason(exc)}); "
                "the reply is complete"
            )
        if written is None:
            return Saved(
                note=f"the prompt's KV state ({format_bytes(len(state))}) is larger than "
                f"LLMCLI_CACHE_MAX ({format_bytes(self.cache.max_bytes)}); not saved"
            )
        return Saved()
