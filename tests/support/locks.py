"""A lock between the processes that fill one shared test cache (pytest-xdist workers, two checkouts).

The caches (tests/assets.py, tests/corpus.py) write through a temporary name and os.replace, so a
reader never sees half a file; the lock keeps two writers from downloading the same ~240 MB at
once into one pip download folder, or extracting over files another process is reading.
`shared_by_workers` builds a fixture's folder once per run for all the workers.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


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


def shared_by_workers(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """The folder `name` in the run's temporary folder, filled by `build(folder)` once per run: the first
    pytest-xdist worker that asks builds it while the others wait, then all read it. For fixtures that
    take tens of seconds of both cores (a checkpoint, a conversion), which each worker built again."""
    base = factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    folder, done = root / name, root / f".{name}.done"
    with cache_lock(root, f".{name}.lock"):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)  # a run cut short left part of it
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
