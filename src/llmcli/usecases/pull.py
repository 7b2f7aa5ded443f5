"""Pull REPO[:QUANT]: plan, fetch into the HF cache, convert a checkpoint, register in the store.

The store entry is written last, once every file is complete and verified (and converted, for
safetensors repos), so an interrupted pull leaves no entry behind, only resumable bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llmcli.convert.outtypes import PULL_DEFAULT, OutType, outtype_named
from llmcli.errors import ModelNotFound, UsageError
from llmcli.hub.events import Converting, Note, Progress, ProgressScope, quiet
from llmcli.hub.plan import PullPlan, plan_pull
from llmcli.hub.remote import HubConfig
from llmcli.hub.transfer import check_space, fetch
from llmcli.model_ref import HubRepo, ModelRef
from llmcli.store import ModelEntry, Store
from llmcli.units import format_bytes
from llmcli.usecases.convert import Converted, convert_and_register


@dataclass(frozen=True)
class Pulled:
    entry: ModelEntry
    sha256: str | None  # the hub's sha256 of the main file; None for a converted checkpoint or a non-LFS file


def checkpoint_outtype(ref: HubRepo, asked: OutType | None) -> OutType:
    """What a safetensors repo is converted to: --outtype, else the REPO:QUANT tag, else PULL_DEFAULT."""
    if asked is not None and ref.quant and ref.quant.strip().lower() != asked.name:
        raise UsageError(f"{ref.text} asks for {ref.quant} but --outtype says {asked.name}; give one of them")
    return asked or outtype_named(ref.quant or PULL_DEFAULT)


def plan(
    ref: HubRepo, *, revision: str | None = None, outtype: str | None = None, config: HubConfig | None = None
) -> PullPlan:
    """What the pull would do, touching nothing on disk (what --dry-run shows)."""
    asked = outtype_named(outtype) if outtype else None  # a bad --outtype fails before any network
    p = plan_pull(
        config or HubConfig.from_hf_constants(),
        ref.repo_id,
        ref.quant,
        revision=revision,
        checkpoint=asked is not None,
    )
    if p.kind == "safetensors":
        kind = checkpoint_outtype(ref, asked)
        p.outtype, p.quant = kind.name, kind.name.upper()
        if not (asked or ref.quant):
            p.notes.append(
                f"{p.repo_id} is a safetensors checkpoint; it will be converted to GGUF {kind.name} "
                "(choose with --outtype)"
            )
    return p


def pull(
    ref: HubRepo,
    store: Store,
    *,
    revision: str | None = None,
    outtype: str | None = None,
    name: str | None = None,
    progress: Progress = quiet,
    config: HubConfig | None = None,
    listed: Sequence[ModelEntry] | None = None,
) -> Pulled:
    """Pull into the store and return the entry; a quick no-op when already up to date."""
    config = config or HubConfig.from_hf_constants()
    p = plan(ref, revision=revision, outtype=outtype, config=config)
    for text in p.notes:
        progress(Note(text))
    entry_name = name or p.default_name
    current = _up_to_date(store.list() if listed is None else listed, entry_name, p)
    if current is not None:
        progress(Note(f"{entry_name} is up to date ({p.sha[:7]})"))
        return Pulled(current, _hub_sha256(p, current))
    check_space(_space_needs(p, store, config))
    if p.bytes_to_fetch:
        progress(
            Note(
                f"pulling {p.repo_id} @ {p.sha[:7]} ({p.revision}): {format_bytes(p.bytes_to_fetch)} to fetch"
            )
        )
    paths = fetch(config, p, progress)
    if p.kind == "gguf":
        entry = store.register(_gguf_entry(entry_name, p, paths))
        return Pulled(entry, _hub_sha256(p, entry))
    return Pulled(_convert(entry_name, p, store, progress).entry, None)


def find_or_pull(
    ref: ModelRef,
    store: Store,
    *,
    pulling: ProgressScope,
    listed: Sequence[ModelEntry] | None = None,
    config: HubConfig | None = None,
) -> ModelEntry:
    """What `chat MODEL` needs: the store's model when it has one, else REPO[:QUANT] pulled first.

    A model already in the store costs no network at all (not even the up-to-date check of `pull`).
    `pulling` opens the progress display only when a pull really starts.
    """
    listed = store.list() if listed is None else listed
    try:
        return store.resolve(ref, listed)
    except ModelNotFound:
        if not isinstance(ref, HubRepo):
            raise
    with pulling() as report:
        return pull(ref, store, progress=report, config=config, listed=listed).entry


def _up_to_date(listed: Sequence[ModelEntry], name: str, p: PullPlan) -> ModelEntry | None:
    entry = {m.name: m for m in listed}.get(name)
    if entry is None or entry.revision != p.sha or entry.source != f"hf:{p.repo_id}":
        return None
    if entry.quant != p.quant or not all(Path(f).exists() for f in entry.files or [entry.path]):
        return None
    return entry


def _hub_sha256(p: PullPlan, entry: ModelEntry) -> str | None:
    """The checksum the hub gave for the entry's main file (the transfer verified the bytes against it)."""
    main = Path(entry.path)
    return next((f.remote.sha256 for f in p.files if f.local == main), None)


def _space_needs(p: PullPlan, store: Store, config: HubConfig) -> dict[Path, int]:
    needs = {config.cache_dir: p.bytes_to_fetch}
    if p.kind == "safetensors" and p.outtype:
        # Checkpoints are mostly 16-bit, so weights/2 approximates the parameter count.
        bits = outtype_named(p.outtype).bits_per_weight
        needs[store.blobs_dir] = needs.get(store.blobs_dir, 0) + int(p.weight_bytes / 2 * bits / 8)
    return needs


def _gguf_entry(name: str, p: PullPlan, paths: list[Path]) -> ModelEntry:
    arch, n_params = gguf_facts(paths)
    return ModelEntry(
        name=name,
        path=str(paths[0]),
        source=f"hf:{p.repo_id}",
        revision=p.sha,
        files=[str(f) for f in paths],
        quant=p.quant,
        size=p.total_bytes,
        arch=arch,
        n_params=n_params,
    )


def gguf_facts(paths: list[Path]) -> tuple[str | None, int | None]:
    """Architecture and parameter count from the validated headers of every part.

    A file whose header does not check out raises BadModelFile here, before it is ever registered.
    """
    from llmcli.gguf_check import model_facts, read_header

    facts = model_facts(paths[0])
    n_params = facts.n_params
    for part in paths[1:]:  # the other parts of a split model hold tensors, not the architecture
        for t in read_header(part).tensors:
            count = 1
            for d in t.shape:
                count *= d
            n_params += count
    return facts.arch, n_params


def _convert(name: str, p: PullPlan, store: Store, report: Progress) -> Converted:
    kind = outtype_named(p.outtype or PULL_DEFAULT)
    out = store.blobs_dir / f"{p.repo_id.replace('/', '--')}-{p.sha[:12]}-{kind.name}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    report(Converting(f"converting {p.repo_id} to GGUF {kind.name}"))

    def forward(stage: str, done: int, total: int) -> None:
        report(Converting(stage, done, total))

    return convert_and_register(
        store,
        p.snapshot_dir,
        out,
        kind,
        name=name,
        source=f"hf:{p.repo_id}",
        revision=p.sha,
        progress=forward,
    )
