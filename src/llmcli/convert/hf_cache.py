"""SRC for convert: a local folder, or a repo id whose snapshot is already in the HF cache."""

from __future__ import annotations

from pathlib import Path

from llmcli.convert.errors import NotACheckpoint
from llmcli.hub.spec import REPO_RE


def resolve_source(src: str, cache_dir: Path) -> Path:
    """`cache_dir` is huggingface_hub's hub cache (llmcli.hub.remote.HubConfig), computed in one place."""
    path = Path(src)
    if path.exists() or not REPO_RE.match(src):
        return path
    # Never the network: convert works on what is on disk; `pull` is the command that downloads.
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(src, local_files_only=True, cache_dir=cache_dir))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError, ValueError) as exc:
        raise NotACheckpoint(
            f"{src} is neither a folder nor a repo in the Hugging Face cache; "
            f"download it first (`hf download {src}`) or give a folder"
        ) from exc
