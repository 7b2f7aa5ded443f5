"""Fixtures for the hub tests: real GGUF quants made from the embedded model, fake repos, a loopback hub.

The fake hub is the only fake: llama.cpp quantizes the fixtures and loads what was pulled.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hub.fake_hub import FakeFile, FakeHub, FakeRepo
from tests.support.cli import fresh_hf_constants
from tests.support.locks import cache_lock

GGUF_REPO = "llmcli-test/SmolLM2-135M-Instruct-GGUF"
NO_DEFAULT_REPO = "llmcli-test/SmolLM2-NoQ4KM-GGUF"
GATED_REPO = "llmcli-test/Gated-GGUF"
HUGE_REPO = "llmcli-test/Huge-GGUF"
ST_REPO = "llmcli-test/SmolLM2-135M-Instruct"
GRANTED_TOKEN = "hf_granted_test_token"
STEM = "SmolLM2-135M-Instruct"
# quant name -> llama.cpp file type; the embedded model is Q4_1, requantized (quality is beside the point).
QUANTS = {
    "Q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0",
    "Q4_K_M": "LLAMA_FTYPE_MOSTLY_Q4_K_M",
    "Q4_0": "LLAMA_FTYPE_MOSTLY_Q4_0",
}
SPLIT_QUANT, SPLIT_PARTS = "Q4_0", 3
REPO_ROOT = Path(__file__).resolve().parents[2]


def _quantize(src: Path, dst: Path, ftype_name: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    params.allow_requantize = True
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    assert rc == 0, f"quantizing to {ftype_name} failed ({rc})"


def _split(src: Path, out_dir: Path, parts: int) -> list[Path]:
    """A real split GGUF (llama.cpp loads it from part 1), written with gguf-py's splitting writer."""
    import gguf
    from gguf.scripts.gguf_new_metadata import copy_with_new_metadata

    reader = gguf.GGUFReader(str(src))
    arch = reader.fields["general.architecture"].contents()
    per_part = -(-len(reader.tensors) // parts)
    writer = gguf.GGUFWriter(str(out_dir / src.name), arch, split_max_tensors=per_part)
    copy_with_new_metadata(reader, writer, {}, [])
    return sorted(out_dir.glob(f"{src.stem}-*-of-*.gguf"))


@dataclass
class Fixtures:
    quants: dict[str, Path]  # single-file quants
    split: list[Path]  # the parts of SPLIT_QUANT
    small: dict[str, Path]  # README.md and friends


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory, embedded_path: str) -> Fixtures:
    # Made once per run and shared by its pytest-xdist workers (the parent of a worker's base temp
    # folder is the run's): the quantizations are a few seconds of both cores each.
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "gguf-fixtures"
    with cache_lock(root.parent, ".gguf-fixtures.lock"):
        if not (root / ".done").exists():
            shutil.rmtree(root, ignore_errors=True)  # a run cut short left part of it
            root.mkdir()
            _build_fixtures(Path(embedded_path), root)
            (root / ".done").touch()
    return Fixtures(
        quants={quant: root / f"{STEM}-{quant}.gguf" for quant in QUANTS},
        split=sorted((root / "split").glob(f"{STEM}-{SPLIT_QUANT}-*-of-*.gguf")),
        small={name: root / name for name in ("README.md", "huge.gguf", "pytorch_model.bin")},
    )


def _build_fixtures(src: Path, root: Path) -> None:
    for quant, ftype in QUANTS.items():
        _quantize(src, root / f"{STEM}-{quant}.gguf", ftype)
    split_dir = root / "split"
    split_dir.mkdir()
    assert len(_split(root / f"{STEM}-{SPLIT_QUANT}.gguf", split_dir, SPLIT_PARTS)) == SPLIT_PARTS
    (root / "README.md").write_text("# SmolLM2-135M-Instruct, GGUF\nFixture repo for llmcli's hub tests.\n")
    (root / "huge.gguf").write_bytes(b"GGUF" + b"\0" * 1000)
    (root / "pytorch_model.bin").write_bytes(b"\x80\x04 a pickle: pull must never fetch this")


@pytest.fixture(scope="session")
def repos(fixtures: Fixtures) -> list[FakeRepo]:
    readme = FakeFile.from_path("README.md", fixtures.small["README.md"])
    single = {p.name: FakeFile.from_path(p.name, p) for q, p in fixtures.quants.items() if q != SPLIT_QUANT}
    parts = {p.name: FakeFile.from_path(p.name, p) for p in fixtures.split}
    no_default = {
        p.name: FakeFile.from_path(p.name, p) for q, p in fixtures.quants.items() if q in ("Q8_0", "Q4_0")
    }
    q4km = fixtures.quants["Q4_K_M"]
    huge = FakeFile.from_path("Huge-Q4_K_M.gguf", fixtures.small["huge.gguf"])
    huge.size = 10**15  # the hub claims a petabyte: the space check must refuse before fetching a byte
    return [
        FakeRepo(GGUF_REPO, {"README.md": readme, **single, **parts}),
        FakeRepo(NO_DEFAULT_REPO, {"README.md": readme, **no_default}),
        FakeRepo(
            GATED_REPO,
            {q4km.name: FakeFile.from_path(q4km.name, q4km)},
            gated=True,
            allowed_tokens={GRANTED_TOKEN},
        ),
        FakeRepo(HUGE_REPO, {huge.name: huge}),
    ]


@pytest.fixture(scope="session")
def st_repo(fixtures: Fixtures, tmp_path_factory: pytest.TempPathFactory) -> FakeRepo:
    """The embedded model exported to a safetensors checkpoint by the converter's export, plus a pickle."""
    from llmcli.convert.export_hf import export_gguf_to_hf
    from llmcli.store import embedded_model_path

    checkpoint = tmp_path_factory.mktemp("checkpoint")
    export_gguf_to_hf(embedded_model_path(), checkpoint, "bf16")  # bf16, as most checkpoints on the hub are
    files = {p.name: FakeFile.from_path(p.name, p) for p in sorted(checkpoint.iterdir())}
    for extra in ("README.md", "pytorch_model.bin"):
        files[extra] = FakeFile.from_path(extra, fixtures.small[extra])
    return FakeRepo(ST_REPO, files)


@pytest.fixture
def st_hub(hub: FakeHub, st_repo: FakeRepo) -> FakeHub:
    hub.add(st_repo)
    return hub


@contextmanager
def loopback_hub(repos: list[FakeRepo], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A loopback hub serving `repos`, with HF and llmcli pointed at temp dirs while it runs."""
    with FakeHub(repos) as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        monkeypatch.setenv("LLMCLI_HOME", str(tmp_path / "store"))
        monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "LLMCLI_MODEL"):
            monkeypatch.delenv(var, raising=False)
        fresh_hf_constants()
        yield fake
    monkeypatch.undo()
    fresh_hf_constants()  # later tests see the environment they set, not this hub's


@pytest.fixture
def hub(repos: list[FakeRepo], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeHub]:
    """A fresh loopback hub per test (clean faults and log), with HF and llmcli pointed at temp dirs."""
    with loopback_hub(repos, tmp_path, monkeypatch) as fake:
        yield fake


def hf_repo_dir(repo_id: str) -> Path:
    return Path(os.environ["HF_HOME"]) / "hub" / ("models--" + repo_id.replace("/", "--"))
