"""The one record `pull`, `convert` and `rm` print with --json: what they did to which model."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from llmcli.hub.spec import is_sha256
from llmcli.store import ModelEntry


@dataclass(frozen=True)
class ModelRecord:
    name: str
    path: str  # the GGUF llama.cpp opens (the first part of a split model)
    size: int  # bytes, all parts
    sha256: str | None  # of the file at `path`; None when it is not known
    quant: str | None
    source: str | None  # e.g. "hf:Org/Repo", "convert:/abs/dir"

    @classmethod
    def of(cls, entry: ModelEntry, sha256: str | None) -> ModelRecord:
        return cls(
            name=entry.name,
            path=entry.path,
            size=entry.size,
            sha256=sha256,
            quant=entry.quant,
            source=entry.source,
        )


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def cached_blob_sha256(path: str | Path) -> str | None:
    """The sha256 a Hugging Face cache file is named by, without reading it; None for any other file.

    In huggingface_hub's cache, snapshots/<commit>/<name> links to blobs/<sha256> for an LFS file.
    """
    try:
        target = Path(path).resolve(strict=False)
    except (OSError, RuntimeError):
        return None
    if target.parent.name == "blobs" and is_sha256(target.name):
        return target.name
    return None
