"""Bytes from the hub into its cache: the free-space check, resumable download, verify, link."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from llmcli.errors import LlmcliError, RuntimeFailure
from llmcli.fsutil import chmod_like_new_file, replace_atomic, space_shortfalls
from llmcli.hub.bounded import Target, download
from llmcli.hub.choose import RemoteFile
from llmcli.hub.errors import HubUnavailable, IntegrityError, NotEnoughSpace, OfflineMissing
from llmcli.hub.events import FileDone, FileProgress, FileStarted, FileVerifying, Note, Progress, quiet
from llmcli.hub.plan import PlannedFile, PullPlan, inside_cache, partial_path
from llmcli.hub.remote import HubConfig, translate
from llmcli.hub.spec import SHA_RE, repo_folder
from llmcli.units import format_bytes

LOCK_TIMEOUT_S = 600


def check_space(needs: dict[Path, int]) -> None:
    """Raise before any download if a target filesystem lacks room; needs on one filesystem add up."""
    for short in space_shortfalls(needs):
        raise NotEnoughSpace(
            f"this pull needs {format_bytes(short.needed)} free under {short.where} but only "
            f"{format_bytes(short.free)} is free; free some space, or point HF_HOME (downloads) or "
            "LLMCLI_HOME (converted models) at a bigger disk"
        )


# -- downloading ------------------------------------------------------------------------------------
def fetch(config: HubConfig, plan: PullPlan, progress: Progress = quiet) -> list[Path]:
    """Bring every planned file into the HF cache, resuming partial ones; return the snapshot paths."""
    storage = config.repo_dir(plan.repo_id)
    paths = []
    for pf in plan.files:
        if pf.cached:
            progress(FileDone(pf.remote.name, pf.remote.size, cached=True, sha256=pf.remote.sha256))
        elif plan.from_cache:  # cannot happen: a cached snapshot lists only what is on disk
            raise OfflineMissing(
                f"{pf.remote.name} is not in the local cache; unset HF_HUB_OFFLINE to download it"
            )
        else:
            _fetch_one(config, storage, plan, pf, progress)
        paths.append(pf.local)
    if not plan.from_cache and not SHA_RE.match(plan.revision):
        # What huggingface_hub writes too: refs/<branch> -> sha, so an offline run finds this snapshot.
        ref = inside_cache(storage, storage / "refs" / plan.revision, f"the ref {plan.revision}")
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(plan.sha)
    return paths


def _fetch_one(config: HubConfig, storage: Path, plan: PullPlan, pf: PlannedFile, progress: Progress) -> None:
    from huggingface_hub.utils import WeakFileLock

    f = pf.remote
    if not f.etag:
        raise RuntimeFailure(
            f"the hub gave no checksum for {f.name} in {plan.repo_id}; cannot verify it, so not using it"
        )
    blob = inside_cache(storage, storage / "blobs" / f.etag, f.name)
    blob.parent.mkdir(parents=True, exist_ok=True)
    locks = config.cache_dir / ".locks" / repo_folder(plan.repo_id)
    lock = inside_cache(locks, locks / f"{f.etag}.lock", f.name)
    lock.parent.mkdir(parents=True, exist_ok=True)
    inside_cache(storage, pf.local, f.name)
    # The same lock huggingface_hub takes for this blob, so a parallel `hf download` waits for us.
    with WeakFileLock(str(lock), timeout=LOCK_TIMEOUT_S):
        cached = blob.exists()
        if not cached:
            _download_blob(config, plan, f, blob, progress)
        elif blob.stat().st_size != f.size:
            raise IntegrityError(
                f"{blob} has {blob.stat().st_size} bytes, the hub says {f.size}; delete it and pull again"
            )
    pf.local.parent.mkdir(parents=True, exist_ok=True)
    _link(blob, pf.local)
    progress(FileDone(f.name, f.size, cached=cached, sha256=f.sha256))


def _download_blob(config: HubConfig, plan: PullPlan, f: RemoteFile, blob: Path, progress: Progress) -> None:
    partial = partial_path(blob)
    have = partial.stat().st_size if partial.exists() else 0
    if have > f.size:  # not a prefix of this file: start over
        partial.unlink()
        have = 0
    progress(FileStarted(f.name, f.size, resumed_from=have, sha256=f.sha256))
    if have < f.size:
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers

        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets into the file itself
        target = Target(
            hf_hub_url(plan.repo_id, f.name, revision=plan.sha, endpoint=config.endpoint),
            f.name,
            f.size,
            headers,
        )
        try:
            download(
                target,
                partial,
                lambda done: progress(FileProgress(f.name, done, f.size)),
                stall_s=config.stall_s,
                note=lambda text: progress(Note(text)),
            )
        except LlmcliError:
            raise
        except Exception as exc:
            mapped = translate(exc, config, plan.repo_id, plan.revision, f.name)
            if isinstance(mapped, HubUnavailable):
                # Dropped connections were retried while bytes kept coming; what arrived stays on disk.
                mapped = HubUnavailable(
                    f"the download of {f.name} from {config.endpoint} failed ({mapped}); "
                    "run the pull again to resume it"
                )
            if mapped is None:
                raise
            raise mapped from exc
    progress(FileVerifying(f.name, f.size))
    _verify(partial, f)
    chmod_like_new_file(partial, 0o644)
    replace_atomic(partial, blob)


def _verify(path: Path, f: RemoteFile) -> None:
    """sha256 for LFS files; for small git files the git blob id (sha1 of a 'blob <size>' header + bytes)."""
    size = path.stat().st_size
    if size != f.size:
        path.unlink()
        raise IntegrityError(f"{f.name} arrived with {size} bytes instead of {f.size}; run the pull again")
    if f.sha256:
        digest, expected = hashlib.sha256(), f.sha256
    elif f.oid:
        digest, expected = hashlib.sha1(), f.oid
        digest.update(f"blob {size}\0".encode())
    else:  # unreachable: _fetch_one refuses a file without a checksum before downloading it
        raise RuntimeFailure(f"the hub gave no checksum for {f.name}; cannot verify it, so not using it")
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        # Which bytes are bad is unknowable, so none of them are kept.
        path.unlink()
        raise IntegrityError(
            f"{f.name} is corrupt: its {'sha256' if f.sha256 else 'git sha1'} is {digest.hexdigest()[:12]}…, "
            f"the hub says {expected[:12]}…; the bad copy was removed, run the pull again"
        )


def _link(blob: Path, pointer: Path) -> None:
    """snapshots/<sha>/<name> -> ../../blobs/<etag>, relative, as huggingface_hub lays out its cache."""
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except OSError:  # no symlinks here (some Windows setups): a copy costs space but works
        shutil.copyfile(blob, pointer)
