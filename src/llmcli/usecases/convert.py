"""Convert a checkpoint to GGUF and register it: `llmcli convert`, and the second half of pulling one."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert.outtypes import CONVERT_DEFAULT, OutType, outtype_named
from llmcli.errors import UsageError
from llmcli.store import ModelEntry, Store, blob_file_name

if TYPE_CHECKING:
    from llmcli.convert import ConversionPlan, ConvertResult
    from llmcli.hub.remote import HubConfig

ConvertProgress = Callable[[str, int, int], None]  # (stage or tensor, done, total), as the converter reports


@dataclass(frozen=True)
class ConvertJob:
    src_dir: Path
    out: Path
    outtype: OutType
    name: str
    into_store: bool  # `out` is under the store's blobs/ (no -o given)


@dataclass(frozen=True)
class Converted:
    entry: ModelEntry
    result: ConvertResult


def source_dir(src: str, config: HubConfig | None = None) -> Path:
    """SRC as a folder: a path (its `~` expanded by the command), or a repo id whose snapshot is in the
    HF cache (never the network)."""
    from llmcli.convert.hf_cache import resolve_source
    from llmcli.hub.remote import HubConfig

    path = Path(src)
    if path.exists():  # a folder: no need to load huggingface_hub for its settings
        return path
    return resolve_source(src, (config or HubConfig.from_hf_constants()).cache_dir)


def default_name(src_dir: Path, outtype: OutType) -> str:
    base = re.sub(r"[^a-z0-9._-]+", "-", src_dir.resolve().name.lower()).strip("-") or "model"
    return f"{base}-{outtype.name}"


def prepare(
    src: str, store: Store, *, outtype: str | None = None, name: str | None = None, output: Path | None = None
) -> ConvertJob:
    """Check the outtype, find the source and decide the output; writes nothing."""
    kind = outtype_named(outtype or CONVERT_DEFAULT)
    if output is not None and output.suffix.lower() != ".gguf":
        raise UsageError(f"-o {output}: the converter writes a GGUF; give a file name ending in .gguf")
    src_dir = source_dir(src)
    model_name = name or default_name(src_dir, kind)
    out = output if output is not None else store.blobs_dir / blob_file_name(model_name)
    _refuse_another_models_file(store, out, model_name)
    return ConvertJob(src_dir, out, kind, model_name, into_store=output is None)


def _refuse_another_models_file(store: Store, out: Path, name: str) -> None:
    """Converting again under a model's own name replaces its file; any other model's file stays."""
    target = out.resolve()
    for entry in store.list():
        if entry.name != name and any(Path(f).resolve() == target for f in entry.files or [entry.path]):
            raise UsageError(f"{out} is the file of the model {entry.name}; choose another -o or --name")


def plan(job: ConvertJob) -> ConversionPlan:
    """The dry run: every tensor decided, nothing written."""
    from llmcli.convert import plan_conversion

    return plan_conversion(job.src_dir, job.outtype.name)


def run(job: ConvertJob, store: Store, progress: ConvertProgress | None = None) -> Converted:
    if job.into_store:
        job.out.parent.mkdir(parents=True, exist_ok=True)
    return convert_and_register(
        store,
        job.src_dir,
        job.out,
        job.outtype,
        name=job.name,
        source=f"convert:{job.src_dir.resolve()}",
        progress=progress,
    )


def convert_and_register(
    store: Store,
    src_dir: Path,
    out: Path,
    outtype: OutType,
    *,
    name: str,
    source: str,
    revision: str | None = None,
    progress: ConvertProgress | None = None,
) -> Converted:
    """The one place a converted model's store entry is made (for `convert` and for `pull` of a checkpoint).

    The converter writes under a temporary name and renames when whole, so `out` is complete or absent,
    and the entry is written only after that.
    """
    from llmcli.convert import convert_checkpoint

    result = convert_checkpoint(src_dir, out, outtype.name, progress=progress)
    path = str(result.path.resolve())
    entry = ModelEntry(
        name=name,
        path=path,
        source=source,
        revision=revision,
        files=[path],
        quant=outtype.name.upper(),
        size=result.size,
        arch=result.arch,
        n_params=result.n_params,
        hf_dir=str(Path(src_dir).resolve()),
    )
    return Converted(store.register(entry), result)
