"""A prefix cache on disk: the KV state of a prompt's stable start, reused by a later process.

The entries are files in `<store>/cache` (their format: engine.cache_entry). A file is written to a
temporary name in the same folder and renamed, so a reader (or a second writer of the same entry)
sees a whole entry or none. The size, the checksum and the binding of tokens to state are checked,
and the declared state size against what this context can hold, before llama.cpp is given a byte:
a truncated, damaged or spliced file is a `CorruptEntry`, never a crash.

Which entries are kept: the most recently used, up to `max_bytes` in total (LRU by mtime, touched on
use); an entry whose tokens start a newly written one is superseded and deleted.

Only llmcli's own files are ever deleted: a regular file under one of its names (cache_entry's
ENTRY_NAME, TEMP_NAME) that starts with its magic. The folder is the store's: a cache folder that is
a link resolving outside the store is refused (`CacheUnusable`), so a sweep never runs elsewhere.

Library code: no printing, no environment; the caller passes the root and the cap.
"""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.engine.local.cache_entry import (
    ENTRY_NAME,
    MAGIC,
    SUFFIX,
    TEMP_NAME,
    TEMP_PREFIX,
    CacheKey,
    CorruptEntry,
    EntryInfo,
    NotAnEntry,
    encode_entry,
    encode_header,
    entry_name,
    entry_size,
    parse_entry,
    parse_header,
    read_head,
)
from llmcli.errors import RuntimeFailure
from llmcli.fsutil import write_atomic

MIN_TOKENS = 32  # a shorter prefix costs less to prefill than to find, read and check
STALE_TEMP_S = 3600  # a temporary file this old belongs to a writer that died; swept at the next write


class CacheUnusable(RuntimeFailure):
    """The cache folder itself cannot be used: not a folder, unreadable, or a link out of the store."""


def resolve_root(root: Path, store_root: Path) -> Path:
    """The cache folder with its links resolved, which must stay inside the store; CacheUnusable if not."""
    try:
        real, store = Path(root).resolve(), Path(store_root).resolve()
    except (OSError, RuntimeError) as exc:  # a loop of links (RuntimeError before Python 3.13)
        raise CacheUnusable(
            f"the prefix cache {root} cannot be resolved ({reason(exc)}); remove the link"
        ) from None
    if not real.is_relative_to(store):
        raise CacheUnusable(
            f"the prefix cache {root} is a link to {real}, outside the store {store}; "
            "remove the link (move the whole store with LLMCLI_HOME instead)"
        )
    return real


def unusable(root: Path, exc: OSError) -> CacheUnusable:
    """What is wrong with a cache folder that failed, and the fix, as one line."""
    if isinstance(exc, NotADirectoryError | FileExistsError):  # mkdir(exist_ok=True) on a file: EEXIST
        return CacheUnusable(f"the prefix cache {root} is not a folder; move that file away")
    return CacheUnusable(
        f"the prefix cache {root} is unreadable ({reason(exc)}); fix its permissions or move it away"
    )


def reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class Match:
    entry: EntryInfo
    length: int  # tokens shared with the prompt


@dataclass
class Cleared:
    entries: int = 0  # whole entries
    damaged: int = 0  # entry files of ours that are not whole (truncated, damaged)
    bytes: int = 0  # of both, and of dead temporary files


def _is_ours(path: Path, names) -> os.stat_result | None:
    """The file's lstat when it is ours: a regular file under one of `names`, starting with the magic."""
    if not names.fullmatch(path.name):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        return st if stat.S_ISREG(st.st_mode) and os.read(fd, len(MAGIC)) == MAGIC else None
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class PrefixCache:
    root: Path
    max_bytes: int
    skipped: list[Path] = field(default_factory=list)  # damaged files met while listing, left in place
    removed: list[Path] = field(default_factory=list)  # damaged files met while listing, deleted

    # -- reading -----------------------------------------------------------------------------
    def _names(self) -> list[Path]:
        """The paths in the root named as entries; CacheUnusable when the root cannot be listed."""
        try:
            return sorted(p for p in self.root.iterdir() if ENTRY_NAME.fullmatch(p.name))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise unusable(self.root, exc) from None

    def read_info(self, path: Path) -> EntryInfo:
        """An entry's header (NotAnEntry if the file is not ours, CorruptEntry if it has no header)."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
        except OSError as exc:
            raise NotAnEntry(f"unreadable ({reason(exc)})") from exc  # a link, a vanished file
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise NotAnEntry("not a regular file")
            head = read_head(fd)
        except OSError as exc:
            raise CorruptEntry(f"unreadable ({reason(exc)})") from exc
        finally:
            os.close(fd)
        try:
            info = parse_header(head, st.st_size, path)
        except CorruptEntry as exc:
            exc.seen = st  # whole files only reach this name (temp + rename): these bytes never become valid
            raise
        info.last_used, info.seen = st.st_mtime, st
        return info

    def entries(self, key_id: str | None = None, remove_damaged: bool = False) -> list[EntryInfo]:
        """Every readable entry (of one key, when given: its file names start with the key's id).

        An entry file of ours that can never be whole is deleted when `remove_damaged` (a session's
        reads and writes), else left for `llmcli cache clear` (listing only looks). A file that is
        not ours is neither listed nor counted."""
        found = []
        self.skipped, self.removed = [], []
        for path in self._names():
            if key_id is not None and not path.name.startswith(key_id[:32] + "-"):
                continue
            try:
                found.append(self.read_info(path))
            except NotAnEntry:
                continue
            except CorruptEntry as exc:
                removed = remove_damaged and exc.seen is not None and self.remove(path, exc.seen)
                (self.removed if removed else self.skipped).append(path)
        return found

    def best(self, key_id: str, tokens: list[int], remove_damaged: bool = False) -> Match | None:
        """The entry of this key that shares the longest prefix with `tokens`."""
        best: Match | None = None
        for info in self.entries(key_id, remove_damaged):
            if info.key_id != key_id:
                continue
            n = common_prefix(info.tokens, tokens)
            if best is None or n > best.length:
                best = Match(info, n)
        return best

    def load(self, info: EntryInfo, max_state: int) -> tuple[EntryInfo, memoryview]:
        """The entry's header and state, verified; CorruptEntry if the file changed or is damaged, or
        holds a state larger than `max_state` bytes (checked before a byte of it is read)."""
        if info.state_size > max_state:
            raise CorruptEntry(
                f"declaring a state of {info.state_size} bytes, more than this context can hold ({max_state})"
            )
        try:
            fd = os.open(info.path, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size != info.size:
                    raise CorruptEntry("replaced while it was being read")
                data = bytearray(size)
                if fh.readinto(data) != size:
                    raise CorruptEntry("shorter than it was a moment ago")
        except OSError as exc:
            raise CorruptEntry(f"unreadable ({reason(exc)})") from exc
        loaded, state = parse_entry(data, info.path)
        if loaded.key_id != info.key_id or loaded.tokens != info.tokens:
            raise CorruptEntry("replaced while it was being read")
        self.touch(info.path)
        return loaded, state

    @staticmethod
    def touch(path: Path) -> None:
        try:
            os.utime(path)
        except OSError:
            pass  # a read-only cache still serves; its order just does not learn

    # -- writing -----------------------------------------------------------------------------
    def write(
        self,
        key: CacheKey,
        model_name: str,
        tokens: list[int],
        state: bytes | bytearray | memoryview,
    ) -> Path | None:
        """Write one entry (temp file + rename), supersede its prefixes, evict down to the cap.

        None when the entry alone is larger than the cap. OSError (disk full...) propagates after
        the temporary file is removed: nothing half-written remains.
        """
        header = encode_header(key, model_name, tokens, state)
        if entry_size(header, len(state)) > self.max_bytes:
            return None
        self.root.mkdir(parents=True, exist_ok=True)
        target = self.root / entry_name(key.id, tokens)
        write_atomic(target, encode_entry(header, state), prefix=TEMP_PREFIX, suffix=SUFFIX, private=True)
        self._supersede(key.id, tokens, keep=target)
        self.evict(keep=target)
        return target

    def _supersede(self, key_id: str, tokens: list[int], keep: Path) -> None:
        for info in self.entries(key_id, remove_damaged=True):
            if (
                info.path != keep
                and len(info.tokens) < len(tokens)
                and tokens[: len(info.tokens)] == info.tokens
            ):
                self.remove(info.path, info.seen)

    def _stale_temps(self) -> list[tuple[Path, os.stat_result]]:
        """Temporary files of ours whose writer died (older than STALE_TEMP_S)."""
        now = time.time()
        try:
            candidates = [p for p in self.root.iterdir() if TEMP_NAME.fullmatch(p.name)]
        except OSError:
            return []
        found = []
        for path in candidates:
            st = _is_ours(path, TEMP_NAME)
            if st is not None and now - st.st_mtime > STALE_TEMP_S:
                found.append((path, st))
        return found

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Delete the least recently used entries until the total fits the cap; sweep dead temp files.

        CacheUnusable when the folder cannot be listed."""
        names = self._names()
        for path, st in self._stale_temps():
            self.remove(path, st, temp=True)
        ours = [(path, _is_ours(path, ENTRY_NAME)) for path in names]
        files = [(st.st_mtime, path, st) for path, st in ours if st is not None]
        total = sum(st.st_size for _, _, st in files)
        evicted = []
        for _, path, st in sorted(files, key=lambda f: (f[0], str(f[1]))):
            if total <= self.max_bytes:
                break
            if path == keep or not self.remove(path, st):
                continue  # a read-only cache: it still serves, over its cap
            total -= st.st_size
            evicted.append(path)
        return evicted

    def remove(self, path: Path, seen: os.stat_result | None = None, temp: bool = False) -> bool:
        """Delete one file of ours: a regular file named as an entry (or as a temporary file when
        `temp`) directly in the root, and when `seen` is given only if the path still names that file."""
        if path.parent != self.root or not (TEMP_NAME if temp else ENTRY_NAME).fullmatch(path.name):
            return False
        try:
            now = path.lstat()
            if not stat.S_ISREG(now.st_mode):
                return False
            if seen is not None and (now.st_dev, now.st_ino) != (seen.st_dev, seen.st_ino):
                return False  # a writer renamed a new entry onto this name since it was read
            path.unlink()
        except OSError:
            return False
        return True

    def clear(self) -> Cleared:
        """Delete every entry of ours, whole or damaged, and dead temporary files: only files that are
        ours (named as ours, starting with the magic), directly in the root. A live writer's temporary
        file is left to become its entry. CacheUnusable when the folder cannot be listed."""
        cleared = Cleared()
        for path in self._names():
            try:
                info = self.read_info(path)
                whole, seen = True, info.seen
            except NotAnEntry:
                continue
            except CorruptEntry as exc:
                if exc.seen is None:
                    continue  # unreadable: its bytes prove nothing, so it is not known to be ours
                whole, seen = False, exc.seen
            if seen is not None and self.remove(path, seen):
                cleared.bytes += seen.st_size
                cleared.entries += whole
                cleared.damaged += not whole
        for path, st in self._stale_temps():
            if self.remove(path, st, temp=True):
                cleared.bytes += st.st_size
        return cleared
