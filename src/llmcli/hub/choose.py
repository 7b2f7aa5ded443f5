"""Which files of a repo listing to fetch: one GGUF quant (every part of it), or a checkpoint's inputs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from llmcli.hub.errors import NothingToPull, QuantNotFound
from llmcli.hub.spec import (
    CONVERT_INPUTS,
    DEFAULT_QUANT,
    NOT_A_MODEL,
    QUANT_ALIASES,
    SPLIT_RE,
    base_tag,
    preference_rank,
    quant_tag,
)


@dataclass(frozen=True)
class RemoteFile:
    name: str  # path in the repo
    size: int
    sha256: str | None = None  # LFS files: the content's sha256, also the blob's etag
    oid: str | None = None  # the git blob id (sha1 of "blob <size>\\0" + content)

    @property
    def etag(self) -> str | None:
        """The name huggingface_hub gives the blob in its cache: sha256 for LFS files, else the git oid."""
        return self.sha256 or self.oid


def gguf_groups(files: Iterable[RemoteFile]) -> dict[str, list[RemoteFile]]:
    """GGUF models by their split-free name; a split model's parts sorted into one group."""
    groups: dict[str, list[RemoteFile]] = {}
    for f in files:
        base = PurePosixPath(f.name).name.lower()
        if not base.endswith(".gguf") or any(word in base for word in NOT_A_MODEL):
            continue
        groups.setdefault(SPLIT_RE.sub(".gguf", f.name), []).append(f)
    return {key: sorted(parts, key=lambda f: f.name) for key, parts in sorted(groups.items())}


def _check_split_complete(key: str, parts: list[RemoteFile]) -> None:
    found = [m for p in parts if (m := SPLIT_RE.search(p.name))]
    if not found or len(found) != len(parts):
        return
    count = int(found[0].group(2))
    indices = sorted(int(m.group(1)) for m in found)
    if indices != list(range(1, count + 1)):
        raise NothingToPull(
            f"the split GGUF {key} has parts {indices} of {count}; the repo is incomplete, pick another quant"
        )


def choose_gguf(files: list[RemoteFile], quant: str | None) -> tuple[str, list[RemoteFile], str | None]:
    """Pick one GGUF model (every part of it) by quant tag: (tag, parts, a note saying why, or None).

    `quant` matches case-insensitively, with or without an 'UD-' prefix, or as a whole file name.
    """
    by_tag: dict[str, list[RemoteFile]] = {}
    for key, parts in gguf_groups(files).items():
        # Several files with one tag (a top-level file and a folder of parts): the first in name order wins.
        by_tag.setdefault(quant_tag(key) or PurePosixPath(key).stem, parts)
    available = sorted(by_tag, key=preference_rank)
    if quant:
        wanted = QUANT_ALIASES.get(quant.upper(), quant.upper())
        exact = [t for t in by_tag if t.upper() == wanted]
        loose = [t for t in by_tag if base_tag(t).upper() == base_tag(wanted)]
        by_file = [
            t
            for t, parts in by_tag.items()
            if any(PurePosixPath(p.name).name.upper() == wanted for p in parts)
        ]
        hits = exact or loose or by_file
        if not hits:
            raise QuantNotFound(f"no {quant} GGUF in this repo; it has: {', '.join(available)}")
        tag = sorted(hits, key=preference_rank)[0]
        note = None
    else:
        tag = available[0]
        others = [t for t in available if t != tag]
        also = f" (also here: {', '.join(others)}; pick one with REPO:QUANT)" if others else ""
        if base_tag(tag) == DEFAULT_QUANT:
            note = f"no quant given; picked {tag}, the default{also}"
        else:
            note = f"no quant given and no {DEFAULT_QUANT} here; picked {tag}{also}"
    parts = by_tag[tag]
    _check_split_complete(tag, parts)
    return tag, parts, note


def choose_safetensors(files: list[RemoteFile]) -> list[RemoteFile]:
    """The files conversion needs from a transformers checkpoint, top level only."""
    top = {f.name: f for f in files if "/" not in f.name}
    weights = [f for name, f in top.items() if name.endswith(".safetensors")]
    # Mistral-style repos carry consolidated.safetensors next to the HF shards: the same weights twice.
    hf_shards = [f for f in weights if not f.name.startswith("consolidated")]
    weights = hf_shards or weights
    if not weights:
        return []
    if "config.json" not in top:
        raise NothingToPull(
            "this repo has safetensors but no config.json, so it is not a checkpoint llmcli can convert"
        )
    extras = [top[name] for name in CONVERT_INPUTS if name in top]
    return extras + sorted(weights, key=lambda f: f.name)
