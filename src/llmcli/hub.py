"""Hugging Face: resolve a repo to a commit, choose its files, download them resumably, verify them.

Files land in huggingface_hub's standard cache (HF_HOME / HF_HUB_CACHE, `blobs/` + `snapshots/<sha>/`),
so other Hugging Face tools share them. The one thing done by hand is the transfer of a blob:
huggingface_hub 2.x retries a broken stream within one run but deletes the partial file when the
process dies, so a killed pull would start again from zero. Here the partial bytes stay in
`blobs/<etag>.incomplete` (the name older huggingface_hub versions resumed from), the next run continues
with a Range request, and the whole file is checked against the hub's sha256 before it is used.

This module never prints: it reports through a `progress` callback that receives the small records
below, and it raises `LlmcliError`s whose message is one line naming the fix.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmcli.errors import LlmcliError, ModelNotFound, RuntimeFailure, UsageError
from llmcli.store import ModelEntry, Store

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
DEFAULT_QUANT = "Q4_K_M"
DEFAULT_OUTTYPE = "q4_k_m"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
QUANT_TAG_RE = re.compile(r"[\w.-]+")
# Prefixes people paste from a browser or from Ollama's `hf.co/...` syntax; the repo id follows.
REPO_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/", "hf:")
SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quant tag sits between separators near the end of a GGUF name: model-Q4_K_M.gguf, model.q8_0.gguf,
# model-UD-Q4_K_XL.gguf, model-IQ4_XS.gguf, model-bf16.gguf.
QUANT_TAG_RE = re.compile(
    r"(?:^|[-_.])((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]+)*|TQ[12]_0|MXFP4(?:_MOE)?|BF16|FP16|F16|FP32|F32))(?=$|[-_.])",
    re.IGNORECASE,
)
QUANT_ALIASES = {"FP16": "F16", "FP32": "F32"}
# Without a tag: Q4_K_M, else the nearest sensible one. Four-bit K and I quants first, then a bit more
# precision (better quality, a little bigger) before less, and full precision only when nothing is quantized.
QUANT_PREFERENCE = (
    "Q4_K_M", "Q4_K_XL", "Q4_K_L", "Q4_K_S", "IQ4_XS", "IQ4_NL", "Q4_0", "Q4_1",
    "Q5_K_M", "Q5_K_XL", "Q5_K_S", "Q5_0", "Q5_1", "Q6_K", "Q6_K_XL", "Q8_0", "Q8_K_XL",
    "Q3_K_XL", "Q3_K_L", "Q3_K_M", "IQ3_M", "Q3_K_S", "IQ3_XS", "IQ3_XXS", "MXFP4", "MXFP4_MOE",
    "Q2_K_XL", "Q2_K_L", "Q2_K", "IQ2_M", "IQ2_S", "IQ2_XS", "IQ2_XXS", "IQ1_M", "IQ1_S", "TQ2_0", "TQ1_0",
    "F16", "BF16", "F32",
)
# GGUFs in a model repo that are not language models: vision projectors and importance matrices.
NOT_A_MODEL = ("mmproj", "imatrix")
# What the converter reads from a transformers checkpoint, and nothing else: weights only as safetensors,
# so no pickle (*.bin, *.pt, *.pth, *.ckpt) is ever fetched.
CONVERT_INPUTS = (
    "config.json", "generation_config.json", "chat_template.jinja", "chat_template.json",
    "tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "added_tokens.json", "vocab.json", "merges.txt", "model.safetensors.index.json",
)
LOCK_TIMEOUT_S = 600


# -- errors ----------------------------------------------------------------------------------------
class RepoNotFound(ModelNotFound):
    pass


class GatedRepo(LlmcliError):
    """Gated or private: the repo exists but this token (or no token) may not read it."""


class RevisionNotFound(UsageError):
    pass


class QuantNotFound(UsageError):
    pass


class NothingToPull(UsageError):
    """The repo holds neither GGUF files nor a safetensors checkpoint."""


class OfflineMissing(LlmcliError):
    """Offline (or the hub unreachable), and the files are not in the local cache."""


class HubUnavailable(RuntimeFailure):
    """No answer, or a 5xx: the hub is down or unreachable, which the local cache may make up for."""


class NotEnoughSpace(LlmcliError):
    pass


class IntegrityError(LlmcliError):
    """A downloaded file's bytes do not match the hub's checksum."""


# -- progress records --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Note:
    """A choice or a fact worth one line: the quant picked, the outtype, 'already up to date'."""

    text: str


@dataclass(frozen=True)
class FileStarted:
    filename: str
    total: int
    resumed_from: int = 0  # bytes already on disk from an earlier, interrupted run


@dataclass(frozen=True)
class FileProgress:
    filename: str
    done: int
    total: int


@dataclass(frozen=True)
class FileVerifying:
    filename: str
    total: int


@dataclass(frozen=True)
class FileDone:
    filename: str
    size: int
    cached: bool  # True when nothing had to be downloaded


@dataclass(frozen=True)
class Converting:
    """The converter is running; `detail` is whatever it reported (a stage, a tensor name)."""

    detail: str
    done: int | None = None
    total: int | None = None


PullEvent = Note | FileStarted | FileProgress | FileVerifying | FileDone | Converting
Progress = Callable[[PullEvent], None]


def _quiet(_event: PullEvent) -> None:
    pass


# -- what the hub holds ------------------------------------------------------------------------------
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


@dataclass
class RepoSnapshot:
    repo_id: str
    revision: str  # as asked: a branch, a tag or a sha
    sha: str  # the commit it resolved to
    files: list[RemoteFile]
    from_cache: bool = False  # built from the local cache, offline: no checksums to compare against


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
    quant: str  # the GGUF quant tag, or the converter's outtype in upper case
    files: list[PlannedFile]
    notes: list[str] = field(default_factory=list)
    outtype: str | None = None  # safetensors only
    from_cache: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(f.remote.size for f in self.files)

    @property
    def bytes_to_fetch(self) -> int:
        return sum(f.remote.size - f.have for f in self.files if not f.cached)

    @property
    def default_name(self) -> str:
        return f"{self.repo_id}:{self.quant}"

    @property
    def snapshot_dir(self) -> Path:
        return hub_cache_dir() / _repo_folder(self.repo_id) / "snapshots" / self.sha


# -- environment, read at call time so tests and long-lived processes see changes -------------------------
def _truthy(value: str | None) -> bool:
    return (value or "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def is_offline() -> bool:
    return _truthy(os.environ.get("HF_HUB_OFFLINE"))


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_cache_dir() -> Path:
    """huggingface_hub's cache: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(home).expanduser() / "hub"


def _repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


# -- REPO[:QUANT] -----------------------------------------------------------------------------------
def parse_spec(spec: str) -> tuple[str, str | None]:
    """'Org/Repo-GGUF:q4_k_m' -> ('Org/Repo-GGUF', 'Q4_K_M'); the quant is optional."""
    text = spec.strip()
    for prefix in REPO_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix):]
            break
    repo_id, _, quant = text.partition(":")
    repo_id = repo_id.strip("/")
    if not REPO_RE.match(repo_id):
        raise UsageError(
            f"'{spec}' is not a Hugging Face repo; give OWNER/NAME[:QUANT], e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
        )
    return repo_id, (quant.strip() or None)


def looks_like_repo(spec: str) -> bool:
    """True when `spec` reads as REPO[:QUANT] rather than a local name or path (for `chat`'s auto-pull)."""
    try:
        _, quant = parse_spec(spec)
    except UsageError:
        return False
    if quant and not QUANT_TAG_RE.fullmatch(quant):  # "org/x: tell me" is a prompt, not a quant tag
        return False
    if spec.lower().endswith(".gguf"):
        return False
    try:
        return not Path(spec).expanduser().exists()
    except (OSError, ValueError):  # a name no file could have (too long): not a path either
        return True


# -- quant tags and file choice ---------------------------------------------------------------------------
def quant_tag(filename: str) -> str | None:
    """The quant a GGUF's name announces ('Model-Q4_K_M-00001-of-00002.gguf' -> 'Q4_K_M'), or None."""
    stem = SPLIT_RE.sub(".gguf", Path(filename).name)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    matches = QUANT_TAG_RE.findall(stem)
    if not matches:
        return None
    tag = matches[-1].upper()
    return QUANT_ALIASES.get(tag, tag)


def _base_tag(tag: str) -> str:
    return tag.removeprefix("UD-")


def _gguf_groups(files: Iterable[RemoteFile]) -> dict[str, list[RemoteFile]]:
    """GGUF models by their split-free name; a split model's parts sorted into one group."""
    groups: dict[str, list[RemoteFile]] = {}
    for f in files:
        base = Path(f.name).name.lower()
        if not base.endswith(".gguf") or any(word in base for word in NOT_A_MODEL):
            continue
        groups.setdefault(SPLIT_RE.sub(".gguf", f.name), []).append(f)
    return {key: sorted(parts, key=lambda f: f.name) for key, parts in sorted(groups.items())}


def _check_split_complete(key: str, parts: list[RemoteFile]) -> None:
    found = [SPLIT_RE.search(p.name) for p in parts]
    if not all(found):
        return
    count = int(found[0].group(2))  # type: ignore[union-attr]
    indices = sorted(int(m.group(1)) for m in found if m)  # type: ignore[union-attr]
    if indices != list(range(1, count + 1)):
        raise NothingToPull(f"the split GGUF {key} has parts {indices} of {count}; the repo is incomplete, pick another quant")


def choose_gguf(files: list[RemoteFile], quant: str | None) -> tuple[str, list[RemoteFile], str | None]:
    """Pick one GGUF model (every part of it) by quant tag: (tag, parts, a note saying why, or None).

    `quant` matches case-insensitively, with or without an 'UD-' prefix, or as a whole file name.
    """
    groups = _gguf_groups(files)
    by_tag: dict[str, list[RemoteFile]] = {}
    for key, parts in groups.items():
        # Several files with one tag (a top-level file and a folder of parts): the first in name order wins.
        by_tag.setdefault(quant_tag(key) or Path(key).stem, parts)
    available = sorted(by_tag, key=_preference_rank)
    if quant:
        wanted = QUANT_ALIASES.get(quant.upper(), quant.upper())
        exact = [t for t in by_tag if t.upper() == wanted]
        loose = [t for t in by_tag if _base_tag(t).upper() == _base_tag(wanted)]
        by_file = [t for t, parts in by_tag.items() if any(Path(p.name).name.upper() == wanted for p in parts)]
        hits = exact or loose or by_file
        if not hits:
            raise QuantNotFound(f"no {quant} GGUF in this repo; it has: {', '.join(available)}")
        tag = sorted(hits, key=_preference_rank)[0]
        note = None
    else:
        tag = available[0]
        others = [t for t in available if t != tag]
        also = f" (also here: {', '.join(others)}; pick one with REPO:QUANT)" if others else ""
        if _base_tag(tag) == DEFAULT_QUANT:
            note = f"no quant given; picked {tag}, the default{also}"
        else:
            note = f"no quant given and no {DEFAULT_QUANT} here; picked {tag}{also}"
    parts = by_tag[tag]
    _check_split_complete(tag, parts)
    return tag, parts, note


def _preference_rank(tag: str) -> tuple[int, int, str]:
    base = _base_tag(tag).upper()
    rank = QUANT_PREFERENCE.index(base) if base in QUANT_PREFERENCE else len(QUANT_PREFERENCE)
    return rank, tag.startswith("UD-"), tag


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
        raise NothingToPull("this repo has safetensors but no config.json, so it is not a checkpoint llmcli can convert")
    extras = [top[name] for name in CONVERT_INPUTS if name in top]
    return extras + sorted(weights, key=lambda f: f.name)


# -- talking to the hub -------------------------------------------------------------------------------
def _transport_errors() -> tuple[type[BaseException], ...]:
    # huggingface_hub 2.x speaks httpx2; older ones httpx. Either way, TransportError is "no answer".
    try:
        import httpx2 as httpx  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
        import httpx  # type: ignore[import-not-found,no-redef]
    from huggingface_hub.errors import OfflineModeIsEnabled

    return (httpx.TransportError, OfflineModeIsEnabled)


def _translate(exc: BaseException, repo_id: str, revision: str, what: str = "") -> LlmcliError | None:
    """huggingface_hub's exceptions -> one line naming the fix. A table; order matters (subclasses first)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    url = f"{hub_endpoint()}/{repo_id}"
    token_hint = "set HF_TOKEN to a read token from https://huggingface.co/settings/tokens"
    table: list[tuple[type[BaseException], Callable[[], LlmcliError]]] = [
        (GatedRepoError, lambda: GatedRepo(
            f"{repo_id} is gated: accept its terms at {url} while logged in, then {token_hint}"
            + (" (the token in HF_TOKEN has no access yet)" if _token_set() else ""))),
        (RepositoryNotFoundError, lambda: RepoNotFound(
            f"no model repo {repo_id} on {hub_endpoint()}; check the name"
            + ("" if _token_set() else f" (if it is private, {token_hint})"))),
        (RevisionNotFoundError, lambda: RevisionNotFound(
            f"{repo_id} has no revision '{revision}'; give a branch, tag or commit sha that exists (see {url}/tree)")),
        (RemoteEntryNotFoundError, lambda: RuntimeFailure(
            f"{what or 'a file'} vanished from {repo_id} at {revision}; run the pull again to pick up the new revision")),
    ]
    for kind, make in table:
        if isinstance(exc, kind):
            return make()
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return GatedRepo(f"{repo_id}: access denied ({status}); if it is gated or private, "
                             f"request access at {url} and {token_hint}")
        kind = HubUnavailable if status >= 500 else RuntimeFailure
        return kind(f"{hub_endpoint()} answered {status} for {repo_id}{f' {what}' if what else ''}; try again later")
    if isinstance(exc, _transport_errors()):
        return HubUnavailable(f"cannot reach {hub_endpoint()} ({type(exc).__name__})")
    return None


def _token_set() -> bool:
    return bool(os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"))


def _api() -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub_endpoint())


def resolve_remote(repo_id: str, revision: str | None = None) -> RepoSnapshot:
    """Ask the hub which commit `revision` is, then list that commit's files with sizes and checksums."""
    from huggingface_hub.hf_api import RepoFile

    rev = revision or DEFAULT_REVISION
    api = _api()
    try:
        info = api.model_info(repo_id, revision=rev)
        # The tree at the pinned sha, not at the branch: the listing and the downloads see one commit.
        tree = api.list_repo_tree(repo_id, revision=info.sha, recursive=True)
        files = [
            RemoteFile(name=f.path, size=int(f.size), sha256=f.lfs.sha256 if f.lfs else None, oid=f.blob_id)
            for f in tree
            if isinstance(f, RepoFile)
        ]
    except Exception as exc:
        mapped = _translate(exc, repo_id, rev)
        if mapped is None:
            raise
        raise mapped from exc
    if not info.sha:
        raise RuntimeFailure(f"{hub_endpoint()} gave no commit sha for {repo_id}; is HF_ENDPOINT a Hugging Face hub?")
    return RepoSnapshot(repo_id=info.id or repo_id, revision=rev, sha=info.sha, files=files)


def resolve_cached(repo_id: str, revision: str | None = None) -> RepoSnapshot | None:
    """The snapshot the local HF cache holds for `revision`, or None. Offline, this is all there is."""
    rev = revision or DEFAULT_REVISION
    storage = hub_cache_dir() / _repo_folder(repo_id)
    sha = rev if SHA_RE.match(rev) else None
    if sha is None:
        try:
            sha = (storage / "refs" / rev).read_text().strip()
        except OSError:
            return None
    snapdir = storage / "snapshots" / sha
    if not snapdir.is_dir():
        return None
    files = [
        RemoteFile(name=p.relative_to(snapdir).as_posix(), size=p.stat().st_size)
        for p in sorted(snapdir.rglob("*"))
        if p.is_file()
    ]
    return RepoSnapshot(repo_id=repo_id, revision=rev, sha=sha, files=files, from_cache=True)


def resolve(repo_id: str, revision: str | None = None) -> tuple[RepoSnapshot, str | None]:
    """The hub's view when it answers; the cache's when offline or unreachable (with a note saying so)."""
    rev = revision or DEFAULT_REVISION
    if is_offline():
        cached = resolve_cached(repo_id, rev)
        if cached is None:
            raise OfflineMissing(
                f"HF_HUB_OFFLINE is set and {repo_id}@{rev} is not in the Hugging Face cache ({hub_cache_dir()}); "
                "unset HF_HUB_OFFLINE to download it"
            )
        return cached, f"offline: using the cached {repo_id} at {cached.sha[:7]}"
    try:
        return resolve_remote(repo_id, rev), None
    except HubUnavailable as exc:
        # As huggingface_hub does: when the hub cannot answer, what the cache holds is still good.
        cached = resolve_cached(repo_id, rev)
        if cached is None:
            raise OfflineMissing(
                f"{exc} and {repo_id} is not in the local cache; check your connection or HF_ENDPOINT"
            ) from exc
        return cached, f"{exc}; using the cached {repo_id} at {cached.sha[:7]}"


# -- planning ---------------------------------------------------------------------------------------
def plan_pull(spec: str, *, revision: str | None = None, outtype: str | None = None) -> PullPlan:
    """Resolve REPO[:QUANT] and choose its files, touching nothing on disk (what --dry-run shows)."""
    repo_id, quant = parse_spec(spec)
    snap, note = resolve(repo_id, revision)
    notes = [note] if note else []
    if _gguf_groups(snap.files) and not outtype:
        try:
            tag, chosen, why = choose_gguf(snap.files, quant)
        except QuantNotFound as exc:
            if not snap.from_cache:
                raise
            raise OfflineMissing(f"{repo_id}:{quant} is not in the local cache ({str(exc).split('; ')[-1]}); "
                                 "connect and unset HF_HUB_OFFLINE to download it") from exc
        kind, out = "gguf", None
        notes += [why] if why else []
    else:
        chosen = choose_safetensors(snap.files)
        if not chosen:
            where = "the cached copy of " if snap.from_cache else ""
            raise NothingToPull(
                f"{where}{repo_id} has no GGUF files and no safetensors checkpoint; pick a repo that has one"
            )
        if quant and outtype and quant.lower() != outtype.lower():
            raise UsageError(f"{spec} asks for {quant} but --outtype says {outtype}; give one of them")
        out = (outtype or quant or DEFAULT_OUTTYPE).lower()
        if out not in _outtypes():
            raise UsageError(f"unknown outtype '{out}'; use one of {', '.join(_outtypes())}")
        kind, tag = "safetensors", out.upper()
        if not (outtype or quant):
            notes.append(f"{repo_id} is a safetensors checkpoint; it will be converted to GGUF {out} "
                         "(choose with --outtype)")
    storage = hub_cache_dir() / _repo_folder(snap.repo_id)
    planned = [_planned(storage, snap.sha, f) for f in chosen]
    return PullPlan(repo_id=snap.repo_id, revision=snap.revision, sha=snap.sha, kind=kind, quant=tag,
                    files=planned, notes=notes, outtype=out, from_cache=snap.from_cache)


def _outtypes() -> dict[str, Any]:
    from llmcli.convert import OUTTYPES

    return OUTTYPES


def _planned(storage: Path, sha: str, f: RemoteFile) -> PlannedFile:
    local = storage / "snapshots" / sha / f.name
    if local.exists():
        return PlannedFile(f, local, have=f.size, cached=True)
    blob = storage / "blobs" / f.etag if f.etag else None
    if blob is not None and blob.exists():
        return PlannedFile(f, local, have=f.size, cached=False)
    partial = _partial_path(blob) if blob is not None else None
    have = partial.stat().st_size if partial is not None and partial.exists() else 0
    return PlannedFile(f, local, have=min(have, f.size), cached=False)


def _partial_path(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


# -- disk space ---------------------------------------------------------------------------------------
def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_space(needs: dict[Path, int]) -> None:
    """Raise before any download if a target filesystem lacks room; needs on one filesystem add up."""
    by_device: dict[int, tuple[Path, int]] = {}
    for path, amount in needs.items():
        where = _existing_parent(path)
        dev = where.stat().st_dev
        prev = by_device.get(dev, (where, 0))
        by_device[dev] = (prev[0], prev[1] + amount)
    for where, amount in by_device.values():
        free = shutil.disk_usage(where).free
        if amount > free:
            raise NotEnoughSpace(
                f"this pull needs {_gb(amount)} free under {where} but only {_gb(free)} is free; free some space, "
                "or point HF_HOME (downloads) or LLMCLI_HOME (converted models) at a bigger disk"
            )


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


# -- downloading ------------------------------------------------------------------------------------
def fetch(plan: PullPlan, progress: Progress = _quiet) -> list[Path]:
    """Bring every planned file into the HF cache, resuming partial ones; return the snapshot paths."""
    storage = hub_cache_dir() / _repo_folder(plan.repo_id)
    paths = []
    for pf in plan.files:
        if pf.cached:
            progress(FileDone(pf.remote.name, pf.remote.size, cached=True))
        elif plan.from_cache:  # cannot happen: a cached snapshot lists only what is on disk
            raise OfflineMissing(f"{pf.remote.name} is not in the local cache; unset HF_HUB_OFFLINE to download it")
        else:
            _fetch_one(storage, plan, pf, progress)
        paths.append(pf.local)
    if not plan.from_cache and not SHA_RE.match(plan.revision):
        # What huggingface_hub writes too: refs/<branch> -> sha, so an offline run finds this snapshot.
        ref = storage / "refs" / plan.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        ref.write_text(plan.sha)
    return paths


def _fetch_one(storage: Path, plan: PullPlan, pf: PlannedFile, progress: Progress) -> None:
    from huggingface_hub.utils import WeakFileLock

    f = pf.remote
    if not f.etag:
        raise RuntimeFailure(f"the hub gave no checksum for {f.name} in {plan.repo_id}; cannot verify it, so not using it")
    blob = storage / "blobs" / f.etag
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock = hub_cache_dir() / ".locks" / _repo_folder(plan.repo_id) / f"{f.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    # The same lock huggingface_hub takes for this blob, so a parallel `hf download` waits for us.
    with WeakFileLock(str(lock), timeout=LOCK_TIMEOUT_S):
        cached = blob.exists()
        if not cached:
            _download_blob(plan, f, blob, progress)
        elif blob.stat().st_size != f.size:
            raise IntegrityError(f"{blob} has {blob.stat().st_size} bytes, the hub says {f.size}; delete it and pull again")
    pf.local.parent.mkdir(parents=True, exist_ok=True)
    _link(blob, pf.local)
    progress(FileDone(f.name, f.size, cached=cached))


def _download_blob(plan: PullPlan, f: RemoteFile, blob: Path, progress: Progress) -> None:
    from huggingface_hub import hf_hub_url
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers

    partial = _partial_path(blob)
    have = partial.stat().st_size if partial.exists() else 0
    if have > f.size:  # not a prefix of this file: start over
        partial.unlink()
        have = 0
    progress(FileStarted(f.name, f.size, resumed_from=have))
    if have < f.size:
        url = hf_hub_url(plan.repo_id, f.name, revision=plan.sha, endpoint=hub_endpoint())
        headers = build_hf_headers()
        headers["Accept-Encoding"] = "identity"  # byte offsets must be offsets into the file itself
        # Append mode: bytes land after those already on disk; on a kill they stay for the next run.
        with open(partial, "ab") as fh:
            try:
                http_get(url, fh, resume_size=have, headers=headers, expected_size=f.size,
                         displayed_filename=f.name, tqdm_class=_progress_bar_class(progress, f.name, f.size))
            except Exception as exc:
                mapped = _translate(exc, plan.repo_id, plan.revision, f.name)
                if isinstance(mapped, HubUnavailable):
                    # huggingface_hub already retried while bytes kept coming; what arrived stays on disk.
                    mapped = HubUnavailable(f"the download of {f.name} from {hub_endpoint()} failed ({mapped}); "
                                            "run the pull again to resume it")
                if mapped is None:
                    raise
                raise mapped from exc
    progress(FileVerifying(f.name, f.size))
    _verify(partial, f)
    os.chmod(partial, 0o644 & ~_umask())
    os.replace(partial, blob)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _verify(path: Path, f: RemoteFile) -> None:
    """sha256 for LFS files; for small git files the git blob id (sha1 of a 'blob <size>' header + bytes)."""
    size = path.stat().st_size
    if size != f.size:
        path.unlink()
        raise IntegrityError(f"{f.name} arrived with {size} bytes instead of {f.size}; run the pull again")
    if f.sha256:
        digest, expected = hashlib.sha256(), f.sha256
    else:
        digest, expected = hashlib.sha1(), f.oid
        digest.update(f"blob {size}\0".encode())
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != expected:
        # Which bytes are bad is unknowable, so none of them are kept.
        path.unlink()
        raise IntegrityError(
            f"{f.name} is corrupt: its {'sha256' if f.sha256 else 'git sha1'} is {digest.hexdigest()[:12]}…, "
            f"the hub says {expected[:12]}…; the bad copy was removed, run the pull again"  # type: ignore[index]
        )


def _link(blob: Path, pointer: Path) -> None:
    """snapshots/<sha>/<name> -> ../../blobs/<etag>, relative, as huggingface_hub lays out its cache."""
    if pointer.is_symlink() or pointer.exists():
        pointer.unlink()
    try:
        os.symlink(os.path.relpath(blob, pointer.parent), pointer)
    except OSError:  # no symlinks here (some Windows setups): a copy costs space but works
        shutil.copyfile(blob, pointer)


def _progress_bar_class(progress: Progress, filename: str, total: int) -> type:
    """A stand-in for tqdm that huggingface_hub's http_get drives; it forwards byte counts to `progress`."""

    class _Bar:
        def __init__(self, *, initial: int = 0, **_kwargs: Any) -> None:
            self.n = initial

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: int = 1) -> None:
            self.n += n
            progress(FileProgress(filename, self.n, total))

    return _Bar


# -- the whole pull ---------------------------------------------------------------------------------
def pull_model(
    spec: str,
    store: Store | None = None,
    *,
    revision: str | None = None,
    outtype: str | None = None,
    name: str | None = None,
    progress: Progress | None = None,
) -> ModelEntry:
    """Pull REPO[:QUANT] into the store and return its entry; a quick no-op when already up to date.

    The store entry is written last, once every file is complete and verified (and converted, for
    safetensors repos), so an interrupted pull leaves no entry behind, only resumable bytes.
    """
    store = store or Store()
    report = progress or _quiet
    plan = plan_pull(spec, revision=revision, outtype=outtype)
    for text in plan.notes:
        report(Note(text))
    entry_name = name or plan.default_name
    current = _up_to_date(store, entry_name, plan)
    if current is not None:
        report(Note(f"{entry_name} is up to date ({plan.sha[:7]})"))
        return current
    check_space(_space_needs(plan, store))
    if plan.bytes_to_fetch:
        report(Note(f"pulling {plan.repo_id} @ {plan.sha[:7]} ({plan.revision}): {_gb(plan.bytes_to_fetch)} to fetch"))
    paths = fetch(plan, report)
    if plan.kind == "gguf":
        entry = _gguf_entry(entry_name, plan, paths)
    else:
        entry = _convert(entry_name, plan, store, report)
    return store.register(entry)


def find_or_pull(spec: str | None, store: Store | None = None, *, progress: Progress | None = None) -> ModelEntry:
    """What `chat MODEL` needs: the store's model when it has one, else REPO[:QUANT] pulled first.

    A model already in the store costs no network at all (not even the up-to-date check of `pull`).
    """
    store = store or Store()
    try:
        return store.resolve(spec)
    except ModelNotFound:
        if not spec or not looks_like_repo(spec):
            raise
    return pull_model(spec, store, progress=progress)


def _up_to_date(store: Store, name: str, plan: PullPlan) -> ModelEntry | None:
    entry = {m.name: m for m in store.list()}.get(name)
    if entry is None or entry.revision != plan.sha or entry.source != f"hf:{plan.repo_id}":
        return None
    if entry.quant != plan.quant or not all(Path(p).exists() for p in entry.files or [entry.path]):
        return None
    return entry


def _space_needs(plan: PullPlan, store: Store) -> dict[Path, int]:
    needs = {hub_cache_dir(): plan.bytes_to_fetch}
    if plan.kind == "safetensors":
        weights = sum(f.remote.size for f in plan.files if f.remote.name.endswith(".safetensors"))
        # Checkpoints are mostly 16-bit, so weights/2 approximates the parameter count.
        bits = _outtypes()[plan.outtype or DEFAULT_OUTTYPE].bits_per_weight
        needs[store.blobs_dir] = needs.get(store.blobs_dir, 0) + int(weights / 2 * bits / 8)
    return needs


def _gguf_entry(name: str, plan: PullPlan, paths: list[Path]) -> ModelEntry:
    arch, n_params = gguf_facts(paths)
    return ModelEntry(
        name=name, path=str(paths[0]), source=f"hf:{plan.repo_id}", revision=plan.sha,
        files=[str(p) for p in paths], quant=plan.quant, size=plan.total_bytes, arch=arch, n_params=n_params,
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


def _convert(name: str, plan: PullPlan, store: Store, report: Progress) -> ModelEntry:
    from llmcli.convert import convert_checkpoint

    out = store.blobs_dir / f"{plan.repo_id.replace('/', '--')}-{plan.sha[:12]}-{plan.outtype}.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)
    report(Converting(f"converting {plan.repo_id} to GGUF {plan.outtype}"))

    def forward(stage: str, done: int, total: int) -> None:
        report(Converting(stage, done, total))

    # The converter writes under a temporary name and renames when whole, so `out` is complete or absent.
    result = convert_checkpoint(plan.snapshot_dir, out, outtype=plan.outtype or DEFAULT_OUTTYPE, progress=forward)
    return ModelEntry(
        name=name, path=str(result.path), source=f"hf:{plan.repo_id}", revision=plan.sha, files=[str(result.path)],
        quant=plan.quant, size=result.size, arch=result.arch, n_params=result.n_params, hf_dir=str(plan.snapshot_dir),
    )
