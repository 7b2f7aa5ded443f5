"""Opening a checkpoint's files as untrusted input: regular files only, inside the checkpoint, bounded.

A folder to convert may come from anywhere. A FIFO named model.safetensors would block a read
forever, a symlink to /dev/zero would never end, and a symlink out of the folder would read files
the user did not mean to give. So every file is opened without blocking, checked to be a regular
file after its symlinks are resolved, and must lie inside the checkpoint's root. JSON is parsed with
a size cap and its nesting errors become one clear line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from llmcli.convert.errors import BadCheckpoint

# The biggest JSON file we parse. Real tokenizer.json files are up to ~35 MB; configs a few KB.
MAX_JSON_BYTES = 256 * 1024 * 1024
MAX_TEXT_BYTES = 16 * 1024 * 1024  # a chat template file


def checkpoint_root(src: Path) -> Path:
    """The folder every file of `src` must resolve inside.

    A Hugging Face cache snapshot (models--org--name/snapshots/REV) holds symlinks to
    ../../blobs/HASH, so its root is the repo's cache folder; any other folder is its own root.
    """
    real = Path(os.path.realpath(src))
    if real.parent.name == "snapshots" and real.parent.parent.name.startswith("models--"):
        return real.parent.parent
    return real


def resolve_inside(path: Path, root: Path, what: str | None = None) -> Path:
    """`path` with its symlinks resolved; a BadCheckpoint if that leaves `root`."""
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise BadCheckpoint(
            f"{what or path.name} leads outside the checkpoint folder (to {real}); "
            "copy the real file into the folder instead of linking to it"
        )
    return real


def open_regular(path: Path, root: Path, what: str | None = None) -> int:
    """An fd open for reading on a regular file inside `root` (never blocks on a FIFO or device)."""
    real = resolve_inside(path, root, what)
    name = what or path.name
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BadCheckpoint(f"cannot open {name}: {exc.strerror or exc}; check the file") from exc
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise BadCheckpoint(f"cannot read {name}: {exc.strerror or exc}; check the file") from exc
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise BadCheckpoint(
            f"{name} is not a regular file (a pipe, device or socket); replace it with the real file"
        )
    os.set_blocking(fd, True)
    return fd


def is_present(path: Path) -> bool:
    """Whether a checkpoint file exists at all (of any kind): absent optional files are skipped,
    present ones are opened with `open_regular`, which refuses what is not a regular file."""
    return os.path.lexists(path)


def read_bytes(path: Path, root: Path, limit: int, what: str | None = None) -> bytes:
    name = what or path.name
    fd = open_regular(path, root, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise BadCheckpoint(
            f"{name} is larger than {limit // (1024 * 1024)} MB; it is not a real checkpoint file"
        )
    return data


def read_text(path: Path, root: Path, limit: int = MAX_TEXT_BYTES, what: str | None = None) -> str:
    name = what or path.name
    try:
        return read_bytes(path, root, limit, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadCheckpoint(
            f"{name} is not UTF-8 text ({exc.reason} at byte {exc.start}); fix or re-download it"
        ) from exc


def parse_json(raw: bytes | str, name: str) -> Any:
    """json.loads with every failure (syntax, encoding, nesting too deep) as one BadCheckpoint line."""
    try:
        return json.loads(raw)
    except RecursionError as exc:
        raise BadCheckpoint(
            f"{name} is nested too deeply to be a real checkpoint file; download it again"
        ) from exc
    except UnicodeDecodeError as exc:
        raise BadCheckpoint(
            f"{name} is not UTF-8 ({exc.reason} at byte {exc.start}); download it again"
        ) from exc
    except ValueError as exc:
        raise BadCheckpoint(f"{name} is not valid JSON ({exc}); download it again") from exc


def read_json(path: Path, root: Path, kind: type | None = dict, what: str | None = None) -> Any:
    """The parsed JSON of `path`, or None if there is no such file; `kind` is the required top-level type."""
    name = what or path.name
    if not is_present(path):
        return None
    value = parse_json(read_bytes(path, root, MAX_JSON_BYTES, what), name)
    if kind is not None and not isinstance(value, kind):
        names: dict[type, str] = {dict: "a JSON object", list: "a JSON array"}
        expected = names.get(kind, kind.__name__)
        raise BadCheckpoint(f"{name} is not {expected}; download it again")
    return value
