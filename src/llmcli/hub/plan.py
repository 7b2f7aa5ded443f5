"""What a pull would fetch: resolve REPO[:QUANT], choose its files, and see what is already on disk."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from llmcli.fsutil import stays_inside
from llmcli.hub.choose import RemoteFile, choose_gguf, choose_safetensors, gguf_groups
from llmcli.hub.errors import BadHubAnswer, NothingToPull, OfflineMissing, QuantNotFound
from llmcli.hub.remote import HubConfig, resolve


@dataclass
class PlannedFile:
    remote: RemoteFile
    local: Path  # snapshots/<sha>/<name> in the HF cache
    have: int  # bytes already on disk (complete, or partial from an interrupted run)
    cached: bool  # complete and in place: nothing to fetch


@dataclass
class PullPlan:
    repo_id: str
    revision: str
    sha: str
    kind: str  # "gguf" or "safetensors"
    quant: (
        str | None
    )  # the GGUF quant tag; for a checkpoint, the converter's outtype in upper case once chosen
    files: list[PlannedFile]
    snapshot_dir: Path  # snapshots/<sha> in the HF cache
    notes: list[str] = field(default_factory=list)
    outtype: str | None = None  # safetensors only, chosen by the caller (the converter owns the outtypes)
    from_cache: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(f.remote.size for f in self.files)

    @property
    def bytes_to_fetch(self) -> int:
        return sum(f.remote.size - f.have for f in self.files if not f.cached)

    @property
    def weight_bytes(self) -> int:
        return sum(f.remote.size for f in self.files if f.remote.name.endswith(".safetensors"))

    @property
    def default_name(self) -> str:
        return f"{self.repo_id}:{self.quant}"


def plan_pull(
    config: HubConfig,
    repo_id: str,
    quant: str | None,
    *,
    revision: str | None = None,
    checkpoint: bool = False,
) -> PullPlan:
    """Resolve REPO[:QUANT] and choose its files, touching nothing on disk (what --dry-run shows).

    A repo with GGUF files gives a GGUF; `checkpoint` (an outtype was asked for) takes its safetensors
    instead.
    """
    snap, note = resolve(config, repo_id, revision)
    notes = [note] if note else []
    tag: str | None
    if gguf_groups(snap.files) and not checkpoint:
        try:
            tag, chosen, why = choose_gguf(snap.files, quant)
        except QuantNotFound as exc:
            if not snap.from_cache:
                raise
            raise OfflineMissing(
                f"{repo_id}:{quant} is not in the local cache ({str(exc).split('; ')[-1]}); "
                "connect and unset HF_HUB_OFFLINE to download it"
            ) from exc
        kind = "gguf"
        notes += [why] if why else []
    else:
        chosen = choose_safetensors(snap.files)
        if not chosen:
            where = "the cached copy of " if snap.from_cache else ""
            raise NothingToPull(
                f"{where}{repo_id} has no GGUF files and no safetensors checkpoint; pick a repo that has one"
            )
        kind, tag = "safetensors", None
    storage = config.repo_dir(snap.repo_id)
    planned = [_planned(storage, snap.sha, f) for f in chosen]
    return PullPlan(
        repo_id=snap.repo_id,
        revision=snap.revision,
        sha=snap.sha,
        kind=kind,
        quant=tag,
        files=planned,
        snapshot_dir=storage / "snapshots" / snap.sha,
        notes=notes,
        from_cache=snap.from_cache,
    )


def partial_path(blob: Path) -> Path:
    """Where an unfinished blob's bytes wait for the next run (the name old huggingface_hub resumed from)."""
    return blob.with_name(blob.name + ".incomplete")


def inside_cache(storage: Path, path: Path, what: str) -> Path:
    """`path`, once its folders (symlinks resolved) are known to lie in the repo's cache folder.

    Names from the hub are checked against its formats already; this catches what a format cannot:
    a folder in the cache that is a symlink to somewhere else.
    """
    if not stays_inside(storage, path):
        raise BadHubAnswer(
            f"{what} would be written to {path}, outside {storage} once symlinks are followed; "
            "remove that symlink from the Hugging Face cache and pull again"
        )
    return path


def _planned(storage: Path, sha: str, f: RemoteFile) -> PlannedFile:
    # plan_pull's names and ids were checked against the hub's formats by `resolve`; a cached snapshot's
    # come from the files on disk. Either way every path is confined to the repo's folder.
    local = inside_cache(storage, storage / "snapshots" / sha / f.name, f.name)
    if local.exists():
        return PlannedFile(f, local, have=f.size, cached=True)
    blob = inside_cache(storage, storage / "blobs" / f.etag, f.name) if f.etag else None
    if blob is not None and blob.exists():
        return PlannedFile(f, local, have=f.size, cached=False)
    partial = partial_path(blob) if blob is not None else None
    have = partial.stat().st_size if partial is not None and partial.exists() else 0
    return PlannedFile(f, local, have=min(have, f.size), cached=False)
