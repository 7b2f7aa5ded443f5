"""One file's bytes from the hub, bounded by what the hub declared: never more bytes than its listing
gave as the file's size (the LFS pointer's size for an LFS file), never a wait for a byte longer than
the stall limit, and a resume from the bytes on disk after a dropped connection.

huggingface_hub's http_get wrote whatever a server streamed (a hub that advertised 1 MB and never
stopped filled the disk), and retried a silent server five times; this loop stops at once instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from llmcli.hub.errors import HubUnavailable, IntegrityError
from llmcli.units import format_bytes

RETRIES = 5  # dropped connections in a row, with no byte between them, before the pull gives up
REPORT_EVERY_S = 0.2  # a progress record at least this often while bytes come (a stop is seen there)
REPORT_EVERY_BYTES = 1 << 20
TRUST = "is HF_ENDPOINT a Hugging Face hub you trust?"


class Oversize(IntegrityError):
    """The hub sent, or announced, more bytes than it declared for the file."""


class Stalled(HubUnavailable):
    """No byte came for the stall limit."""


@dataclass(frozen=True)
class Target:
    url: str
    name: str  # the file's name in the repo, for messages
    size: int  # what the hub's listing declared
    headers: dict[str, str]


def download(
    target: Target,
    partial: Path,
    progress: Callable[[int], None],
    stall_s: float,
    note: Callable[[str], None] = lambda _text: None,
) -> None:
    """Append the rest of the file to `partial` (which holds a prefix of it). Oversize: more bytes
    than declared (the partial file is removed: those bytes can never verify); Stalled: nothing for
    stall_s (what arrived stays, for a resume); transport errors after RETRIES drops in a row.
    `progress(done)` is called at least every REPORT_EVERY_S while bytes come: a callback that raises
    stops the download there, with what arrived on disk."""
    httpx = _httpx()
    dropped = 0
    while True:
        have = partial.stat().st_size if partial.exists() else 0
        if have >= target.size:
            return
        try:
            _attempt(target, partial, have, progress, stall_s)
            return
        except Oversize:
            partial.unlink(missing_ok=True)
            raise
        except httpx.TimeoutException:
            raise Stalled(
                f"the hub sent no byte of {target.name} for {stall_s:g} s, so the pull stopped; what arrived "
                "is kept: run the pull again to resume it"
            ) from None
        except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError, httpx.WriteError) as exc:
            now = partial.stat().st_size if partial.exists() else 0
            dropped = 1 if now > have else dropped + 1
            if dropped > RETRIES:
                raise
            note(f"{target.name}: the connection dropped at {format_bytes(now)} ({exc}); resuming")
            time.sleep(min(dropped - 1, 1))


def _attempt(
    target: Target, partial: Path, have: int, progress: Callable[[int], None], stall_s: float
) -> None:
    from huggingface_hub.utils import get_session, hf_raise_for_status

    httpx = _httpx()
    headers = dict(target.headers)
    if have:
        headers["Range"] = f"bytes={have}-"
    timeout = httpx.Timeout(stall_s)
    with get_session().stream(
        "GET", target.url, headers=headers, timeout=timeout, follow_redirects=True
    ) as response:
        hf_raise_for_status(response)
        with open(partial, "ab") as fh:
            if have and response.status_code == 200:  # the range was ignored: the whole file again
                fh.truncate(0)
                have = 0
            _check_advertised(target, response.headers.get("Content-Length"), have)
            _copy(target, response.iter_bytes(), fh, have, progress)


def _httpx() -> Any:
    """The HTTP client module huggingface_hub speaks: httpx2 from 2.x on, httpx before."""
    try:
        import httpx2

        return httpx2
    except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
        import httpx

        return httpx


def _check_advertised(target: Target, length: str | None, have: int) -> None:
    """A Content-Length past the declared size is refused before a byte of the body is written."""
    if length is None or not length.strip().isdigit():
        return
    if have + int(length) > target.size:
        raise Oversize(
            f"the hub announced {format_bytes(have + int(length))} for {target.name}, which its listing "
            f"declared as {format_bytes(target.size)}; the download was stopped and its partial file "
            f"removed; {TRUST}"
        )


def _copy(target: Target, chunks, fh: BinaryIO, have: int, progress: Callable[[int], None]) -> None:
    done, reported, t_reported = have, have, time.monotonic()
    for chunk in chunks:
        if done + len(chunk) > target.size:
            raise Oversize(
                f"the hub sent more than the {format_bytes(target.size)} it declared for {target.name}; "
                f"the download was stopped and its partial file removed; {TRUST}"
            )
        fh.write(chunk)
        done += len(chunk)
        now = time.monotonic()
        if done - reported >= REPORT_EVERY_BYTES or now - t_reported >= REPORT_EVERY_S:
            fh.flush()  # what a progress record counts is on disk, for a resume if the callback stops us
            progress(done)
            reported, t_reported = done, now
    fh.flush()
    if done > reported:
        progress(done)
