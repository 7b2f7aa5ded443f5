"""Small file-system facts shared by the code that writes files: atomic writes, free space, new-file modes.

Library code: no printing, no exits. Callers word the error, since only they know the fix
(another -o, HF_HOME, LLMCLI_HOME...).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shortfall:
    where: Path  # an existing folder on the filesystem that lacks room
    needed: int  # bytes, summed over every target on that filesystem
    free: int


def existing_parent(path: Path) -> Path:
    """The path itself if it exists, else its nearest existing ancestor (what disk_usage can measure)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def space_shortfalls(needs: dict[Path, int]) -> list[Shortfall]:
    """The filesystems that lack room for `needs` (target path -> bytes); targets on one filesystem add up."""
    by_device: dict[int, tuple[Path, int]] = {}
    for path, amount in needs.items():
        where = existing_parent(path)
        first, total = by_device.get(where.stat().st_dev, (where, 0))
        by_device[where.stat().st_dev] = (first, total + amount)
    short = []
    for where, amount in by_device.values():
        free = shutil.disk_usage(where).free
        if amount > free:
            short.append(Shortfall(where, amount, free))
    return short


def expand_home(path: str | os.PathLike[str], home: Path) -> Path:
    """`~` or `~/...` at the start of PATH names HOME (the caller's $HOME, passed in); `~user/...` that
    user's home, from the password database; any other path is as given."""
    text = os.fspath(path)
    if text == "~" or text.startswith("~/"):
        return home / text[2:]
    # `~user`: Python looks the user up in the password database and reads no variable
    return Path(text).expanduser() if text.startswith("~") else Path(text)


def current_umask() -> int:
    # os.umask can only be read by setting it; put it straight back.
    mask = os.umask(0)
    os.umask(mask)
    return mask


def chmod_like_new_file(path: Path, mode: int = 0o666) -> None:
    """Give a file made private by mkstemp (0600) the permissions any new file of the user gets."""
    os.chmod(path, mode & ~current_umask())


def fsync_dir(folder: Path) -> None:
    """Make a rename in FOLDER survive a crash; a no-op where a folder cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse to fsync a folder; the rename itself is done
        pass
    finally:
        os.close(fd)


def replace_atomic(tmp: Path | str, target: Path) -> None:
    """Move a finished temporary file over TARGET (in the same folder): fsync it, rename it, fsync
    the folder. Readers see the old file or the new one, never half of one, even after a crash."""
    with open(tmp, "rb+") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, target)
    fsync_dir(Path(target).parent)


Chunks = bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview]


def write_atomic(
    path: Path,
    data: Chunks,
    *,
    prefix: str | None = None,
    suffix: str = ".tmp",
    private: bool = False,
    follow_symlink: bool = False,
) -> Path:
    """Write DATA (bytes, or an iterable of chunks) to PATH through a temporary file beside it.

    The temporary file is named PREFIX...SUFFIX (default `.NAME.` ... `.tmp`) and removed on any
    failure. `private` keeps it 0600, as mkstemp makes it; otherwise it gets the old file's mode,
    or a new file's. `follow_symlink` writes through a symlink at PATH (as write_text would) instead
    of replacing the link. Returns the path written.
    """
    target = Path(os.path.realpath(path)) if follow_symlink else Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix or f".{target.name}.", suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
                fh.write(chunk)
        if not private:
            try:
                os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
            except FileNotFoundError:
                chmod_like_new_file(Path(tmp))
        replace_atomic(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def stays_inside(root: Path, path: Path) -> bool:
    """True when `path`'s folder, with every symlink resolved, is `root` (resolved) or inside it.

    The last component is not followed: it is the file about to be written or linked, and its own
    name must be a plain one.
    """
    if path.name in ("", ".", ".."):
        return False
    real_root = Path(os.path.realpath(root))
    folder = Path(os.path.realpath(path.parent))
    return folder == real_root or real_root in folder.parents


def read_text_file(path: Path, *, what: str, fix: str, limit: int) -> str:
    """A user-named text file: regular (a FIFO would block), at most `limit` bytes, strict UTF-8.

    Every failure is one UsageError line: `what` names the file's role, `fix` what to give instead.
    """
    import stat

    from llmcli.errors import UsageError

    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once, and fstat then refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                raise UsageError(f"{path} is a folder; {fix}")
            if not stat.S_ISREG(info.st_mode):
                raise UsageError(f"{path} is not a regular file (a pipe, device or socket); {fix}")
            if info.st_size > limit:
                raise UsageError(
                    f"{path} is {info.st_size:,} bytes, over the {limit:,}-byte limit for a {what}; {fix}"
                )
            with os.fdopen(fd, "rb", closefd=False) as fh:
                raw = fh.read(limit + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise UsageError(f"no such {what}: {path}; {fix}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a folder; {fix}") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path} ({exc.strerror or exc}); {fix}") from None
    except ValueError:  # a NUL or an unencodable character in the path
        raise UsageError(f"cannot read {path!r}: not a usable file name; {fix}") from None
    if len(raw) > limit:
        raise UsageError(f"{path} grew past the {limit:,}-byte limit for a {what}; {fix}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 text (a bad byte at offset {exc.start}); {fix}") from None
