"""What distinguishes one model file from another, for the prefix cache's key: a hash of all its bytes.

Hashing only a file's ends let a GGUF whose middle changed (a patched tensor, a partial fine-tune
saved under the same name) reuse the original's KV states and answer differently from its own
`--no-cache`. A full hash reads the whole file once per version of it: the result is memoised in a
small file next to the cache entries, keyed by the resolved path, size, mtime (ns), inode and device,
so later runs cost one stat. Not the path alone: a moved file keeps its entries, and another file at
the same path does not inherit them.

The memo is a convenience, never trusted to be whole: an unreadable, damaged or oversized memo is
ignored and the file hashed again. Library code: no printing, no environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

MEMO_FILE = "model-identities.json"
MEMO_VERSION = 1
MAX_MEMO = 2**20  # bytes: far more than MAX_REMEMBERED rows; a larger memo is not ours and is ignored
MAX_REMEMBERED = 64  # model files: the oldest rows give way
CHUNK = 2**20
# A file changed twice within one timestamp tick keeps its mtime: a file changed this shortly before
# it was read is not remembered (git's "racily clean" rule), so the next run hashes it again.
RACY_NS = 2 * 10**9


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev]


def model_identity(path: str | Path, memo_dir: Path | None = None) -> str:
    """`<size>:<blake2b of every byte>` of the model file; memoised in `memo_dir` when given."""
    real = Path(path).resolve()
    memo = _read_memo(memo_dir) if memo_dir is not None else {}
    started = time.time_ns()
    with open(real, "rb") as fh:
        before = os.fstat(fh.fileno())
        known = memo.get(str(real))
        if (
            isinstance(known, dict)
            and known.get("stamp") == _stamp(before)
            and _is_digest(known.get("blake2b"))
        ):
            return f"{before.st_size}:{known['blake2b']}"
        digest = hashlib.blake2b(digest_size=32)
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
        after = os.fstat(fh.fileno())
    hexdigest = digest.hexdigest()
    # A write after the read began would leave a later mtime, unless within the same tick as it.
    settled = _stamp(after) == _stamp(before) and started - after.st_mtime_ns > RACY_NS
    if memo_dir is not None and settled:
        memo.pop(str(real), None)
        memo[str(real)] = {"stamp": _stamp(after), "blake2b": hexdigest}
        _write_memo(memo_dir, dict(list(memo.items())[-MAX_REMEMBERED:]))
    return f"{before.st_size}:{hexdigest}"


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _read_memo(memo_dir: Path) -> dict[str, object]:
    try:
        with open(memo_dir / MEMO_FILE, "rb") as fh:
            raw = fh.read(MAX_MEMO + 1)
        data = json.loads(raw) if len(raw) <= MAX_MEMO else None
    except (OSError, ValueError, RecursionError):
        return {}
    if not (
        isinstance(data, dict) and data.get("version") == MEMO_VERSION and isinstance(data.get("files"), dict)
    ):
        return {}
    return data["files"]


def _write_memo(memo_dir: Path, files: dict[str, object]) -> None:
    """Replace the memo whole (temp file + rename); a cache folder that cannot take it just goes without."""
    from llmcli.fsutil import write_atomic

    if not memo_dir.is_dir():
        return  # the cache folder is made by its first entry, not by a lookup
    memo = json.dumps({"version": MEMO_VERSION, "files": files}).encode("utf-8")
    try:
        write_atomic(memo_dir / MEMO_FILE, memo, prefix=".tmp-", suffix=".json", private=True)
    except OSError:
        return
