"""Talking to the hub: its settings, which commit a revision is, the files there, and the offline fallback.

Settings (endpoint, cache folder, offline mode, token) come from huggingface_hub's own constants, so
llmcli and every other Hugging Face tool agree on HF_HOME, HF_HUB_CACHE, HF_ENDPOINT and HF_HUB_OFFLINE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmcli.display import printable
from llmcli.errors import LlmcliError, RuntimeFailure
from llmcli.hub.choose import RemoteFile
from llmcli.hub.errors import (
    BadHubAnswer,
    GatedRepo,
    HubUnavailable,
    OfflineMissing,
    RepoNotFound,
    RevisionNotFound,
)
from llmcli.hub.spec import REPO_RE, SHA_RE, is_commit, is_repo_path, is_revision, is_sha256, repo_folder

DEFAULT_REVISION = "main"
TOKEN_HINT = "set HF_TOKEN to a read token from https://huggingface.co/settings/tokens"


@dataclass(frozen=True)
class HubConfig:
    endpoint: str  # no trailing slash
    cache_dir: Path  # huggingface_hub's hub cache: models--org--name/{blobs,snapshots,refs}
    offline: bool
    token_set: bool  # a token will be sent (HF_TOKEN, or one saved by `hf auth login`)
    # A download that gets no byte for this long stops: HF_HUB_DOWNLOAD_TIMEOUT (huggingface_hub's
    # own), or serve's --timeout for a pull over the API.
    stall_s: float = 10.0

    @classmethod
    def from_hf_constants(cls) -> HubConfig:
        """The settings huggingface_hub itself uses in this process (it reads the environment on import)."""
        from huggingface_hub import constants, get_token

        stall = constants.HF_HUB_DOWNLOAD_TIMEOUT  # any integer: none or less would fail every read
        return cls(
            endpoint=constants.ENDPOINT.rstrip("/"),
            cache_dir=Path(constants.HF_HUB_CACHE),
            offline=bool(constants.HF_HUB_OFFLINE),
            token_set=get_token() is not None,
            stall_s=float(stall) if stall > 0 else cls.stall_s,
        )

    def repo_dir(self, repo_id: str) -> Path:
        return self.cache_dir / repo_folder(repo_id)


@dataclass
class RepoSnapshot:
    repo_id: str
    revision: str  # as asked: a branch, a tag or a sha
    sha: str  # the commit it resolved to
    files: list[RemoteFile]
    from_cache: bool = False  # built from the local cache, offline: no checksums to compare against


def _transport_errors() -> tuple[tuple[type[BaseException], ...], type[BaseException]]:
    """(what means "no answer", any other failed request: a redirect loop, a bad URL)."""
    # huggingface_hub 2.x speaks httpx2; older ones httpx. Either way, TransportError is "no answer".
    try:
        import httpx2 as httpx
    except ImportError:  # pragma: no cover - depends on the installed huggingface_hub
        import httpx  # type: ignore[import-not-found,no-redef,unused-ignore]
    from huggingface_hub.errors import OfflineModeIsEnabled

    return (httpx.TransportError, OfflineModeIsEnabled), httpx.RequestError


def translate(
    exc: BaseException, config: HubConfig, repo_id: str, revision: str, what: str = ""
) -> LlmcliError | None:
    """huggingface_hub's exceptions -> one line naming the fix. A table; order matters (subclasses first)."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = config.endpoint
    url = f"{endpoint}/{repo_id}"
    table: list[tuple[type[BaseException], Callable[[], LlmcliError]]] = [
        (
            GatedRepoError,
            lambda: GatedRepo(
                f"{repo_id} is gated: accept its terms at {url} while logged in, then {TOKEN_HINT}"
                + (" (the token in HF_TOKEN has no access yet)" if config.token_set else "")
            ),
        ),
        (
            RepositoryNotFoundError,
            lambda: RepoNotFound(
                f"no model repo {repo_id} on {endpoint}; check the name"
                + ("" if config.token_set else f" (if it is private, {TOKEN_HINT})")
            ),
        ),
        (
            RevisionNotFoundError,
            lambda: RevisionNotFound(
                f"{repo_id} has no revision '{revision}'; give a "
                f"branch, tag or commit sha that exists (see {url}/tree)"
            ),
        ),
        (
            RemoteEntryNotFoundError,
            lambda: RuntimeFailure(
                f"{what or 'a file'} vanished from {repo_id} at "
                f"{revision}; run the pull again to pick up the new revision"
            ),
        ),
    ]
    for kind, make in table:
        if isinstance(exc, kind):
            return make()
    if isinstance(exc, HfHubHTTPError) and exc.response is not None:
        status = exc.response.status_code
        if status in (401, 403):
            return GatedRepo(
                f"{repo_id}: access denied ({status}); if it is gated or private, "
                f"request access at {url} and {TOKEN_HINT}"
            )
        kind = HubUnavailable if status >= 500 else RuntimeFailure
        return kind(
            f"{endpoint} answered {status} for {repo_id}{f' {what}' if what else ''}; try again later"
        )
    transport, request_error = _transport_errors()
    if isinstance(exc, transport):
        return HubUnavailable(f"cannot reach {endpoint} ({type(exc).__name__})")
    if type(exc).__name__ == "TooManyRedirects":
        return RuntimeFailure(
            f"{endpoint} redirected {what or repo_id} in a loop; check HF_ENDPOINT "
            "(or the proxy in front of it) and try again"
        )
    if isinstance(exc, request_error):
        return RuntimeFailure(
            f"the request to {endpoint} for {what or repo_id} failed ({type(exc).__name__}); "
            "check HF_ENDPOINT and try again"
        )
    return None


def _api(config: HubConfig) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=config.endpoint)


def resolve_remote(config: HubConfig, repo_id: str, revision: str | None = None) -> RepoSnapshot:
    """Ask the hub which commit `revision` is, then list that commit's files with sizes and checksums."""
    from huggingface_hub.hf_api import RepoFile

    rev = revision or DEFAULT_REVISION
    api = _api(config)
    try:
        info = api.model_info(repo_id, revision=rev)
        if not info.sha:
            raise RuntimeFailure(
                f"{config.endpoint} gave no commit sha for {repo_id}; is HF_ENDPOINT a Hugging Face hub?"
            )
        # Checked before the sha goes into a URL or a path: it becomes snapshots/<sha> and refs/<branch>.
        canonical = _checked(config, repo_id, "commit sha", info.sha, is_commit)
        canonical_id = _checked(
            config, repo_id, "repo id", info.id or repo_id, lambda v: bool(REPO_RE.fullmatch(v))
        )
        # The tree at the pinned sha, not at the branch: the listing and the downloads see one commit.
        tree = api.list_repo_tree(repo_id, revision=canonical, recursive=True)
        files = [_remote_file(config, repo_id, f) for f in tree if isinstance(f, RepoFile)]
    except LlmcliError:
        raise
    except Exception as exc:
        mapped = translate(exc, config, repo_id, rev)
        if mapped is None:
            if isinstance(exc, (KeyError, TypeError, ValueError, AttributeError)):  # JSON of the wrong shape
                raise BadHubAnswer(
                    f"{config.endpoint} sent an answer about {repo_id} that is not the hub's "
                    f"({type(exc).__name__}); is HF_ENDPOINT a Hugging Face hub?"
                ) from exc
            raise
        raise mapped from exc
    return RepoSnapshot(repo_id=canonical_id, revision=rev, sha=canonical, files=files)


def _checked(config: HubConfig, repo_id: str, what: str, value: Any, valid: Callable[[Any], bool]) -> Any:
    """`value` from the server if it has the hub's format; else nothing of this answer is used."""
    if not isinstance(value, str) or not valid(value):
        shown = printable(value, 160) if isinstance(value, str) else type(value).__name__
        raise BadHubAnswer(
            f"{config.endpoint} sent a {what} for {repo_id} that is not in the hub's format "
            f"({shown}); nothing was written; is HF_ENDPOINT a Hugging Face hub you trust?"
        )
    return value


def _remote_file(config: HubConfig, repo_id: str, f: Any) -> RemoteFile:
    """One tree entry, every part of it checked: its name becomes a path, its ids become file names."""
    name = _checked(config, repo_id, "file name", f.path, is_repo_path)
    size = f.size
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        _checked(config, repo_id, f"size of {name}", str(size), lambda _v: False)
    sha256 = _checked(config, repo_id, f"sha256 of {name}", f.lfs.sha256, is_sha256) if f.lfs else None
    oid = (
        _checked(config, repo_id, f"git id of {name}", f.blob_id, is_commit)
        if f.blob_id is not None
        else None
    )
    return RemoteFile(name=name, size=size, sha256=sha256, oid=oid)


def resolve_cached(config: HubConfig, repo_id: str, revision: str | None = None) -> RepoSnapshot | None:
    """The snapshot the local HF cache holds for `revision`, or None. Offline, this is all there is."""
    rev = revision or DEFAULT_REVISION
    storage = config.repo_dir(repo_id)
    sha = rev if SHA_RE.match(rev) else None
    if sha is None:
        try:
            sha = (storage / "refs" / rev).read_text().strip()
        except (OSError, ValueError):
            return None
        if not is_commit(sha):
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


def resolve(config: HubConfig, repo_id: str, revision: str | None = None) -> tuple[RepoSnapshot, str | None]:
    """The hub's view when it answers; the cache's when offline or unreachable (with a note saying so)."""
    rev = revision or DEFAULT_REVISION
    if not is_revision(rev):
        raise RevisionNotFound(
            f"'{printable(rev, 60)}' is not a branch, tag or commit sha; "
            f"give one that exists (see {config.endpoint}/{repo_id}/tree)"
        )
    if config.offline:
        cached = resolve_cached(config, repo_id, rev)
        if cached is None:
            raise OfflineMissing(
                f"HF_HUB_OFFLINE is set and {repo_id}@{rev} is not in the Hugging "
                f"Face cache ({config.cache_dir}); unset HF_HUB_OFFLINE to download it"
            )
        return cached, f"offline: using the cached {repo_id} at {cached.sha[:7]}"
    try:
        return resolve_remote(config, repo_id, rev), None
    except HubUnavailable as exc:
        # As huggingface_hub does: when the hub cannot answer, what the cache holds is still good.
        cached = resolve_cached(config, repo_id, rev)
        if cached is None:
            raise OfflineMissing(
                f"{exc} and {repo_id} is not in the local cache; check your connection or HF_ENDPOINT"
            ) from exc
        return cached, f"{exc}; using the cached {repo_id} at {cached.sha[:7]}"
