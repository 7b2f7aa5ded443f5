"""Plan and write a conversion: HF checkpoint folder -> one GGUF file.

Planning reads only headers (config.json, tokenizer files, safetensors headers), so it is cheap
and catches every input problem before a byte is written. Writing streams one tensor at a time:
the GGUF header and tensor table go first (sizes are known from the plan), then each tensor is
mapped, converted and appended, and its memory map dropped.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert import safetensors_io
from llmcli.convert.errors import (
    BadCheckpoint,
    ConversionFailed,
    NotACheckpoint,
    UnsafeCheckpoint,
    UnsupportedArchitecture,
)
from llmcli.convert.outtypes import CONVERT_DEFAULT, OutType, outtype_named
from llmcli.convert.vocab import Vocab, load_vocab
from llmcli.errors import UsageError
from llmcli.fsutil import chmod_like_new_file, space_shortfalls
from llmcli.units import format_bytes

if TYPE_CHECKING:
    import numpy as np

    from llmcli.convert.families.base import Family

Progress = Callable[[str, int, int], None]

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")
# Rows quantized at a time: bounds the temporaries of gguf.quants to a few MB per chunk.
QUANT_CHUNK_ELEMENTS = 1 << 22
# Headroom on top of the planned size when checking free space (metadata, alignment padding).
SPACE_MARGIN = 16 * 1024 * 1024


@dataclass
class PlannedTensor:
    name: str  # the GGUF name
    shape: tuple[int, ...]  # numpy order (outermost first), as HF stores it
    qtype: str  # GGML type written
    nbytes: int
    source: safetensors_io.TensorRef | None = None
    hf_name: str | None = None
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    data: np.ndarray | None = None  # tensors made by the converter (rope factors)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass
class ConversionPlan:
    src: Path
    hf_arch: str
    arch: str  # GGUF architecture name, e.g. "llama"
    outtype: OutType
    family: Family
    vocab: Vocab
    tensors: list[PlannedTensor]
    source_bytes: int
    source_dtypes: list[str]
    n_params: int
    tied_embeddings: bool
    estimated_size: int  # bytes of the final file (exact for direct types, an estimate for K-quants)
    intermediate_size: int = 0  # the f16/bf16 file a K-quant is made from, 0 otherwise
    notes: list[str] = field(default_factory=list)


@dataclass
class ConvertResult:
    path: Path
    arch: str
    n_params: int
    outtype: str
    n_tensors: int
    size: int
    hf_arch: str = ""
    seconds: float = 0.0
    tokenizer: str = ""  # e.g. "gpt2/qwen2" or "llama/default"
    n_vocab: int = 0
    has_chat_template: bool = False


def read_config(src: Path) -> dict:
    if not src.exists():
        raise NotACheckpoint(f"no such folder: {src}; give a Hugging Face model folder or a cached repo id")
    if not src.is_dir():
        raise NotACheckpoint(f"{src} is a file; give the Hugging Face model folder that holds config.json")
    path = src / "config.json"
    if not path.is_file():
        raise NotACheckpoint(
            f"no config.json in {src}; SRC must be a Hugging Face model folder (config.json, tokenizer, *.safetensors)"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadCheckpoint(f"config.json in {src} is unreadable ({exc}); download it again") from exc
    if not isinstance(config, dict):
        raise BadCheckpoint(f"config.json in {src} is not a JSON object; download it again")
    return config


def find_weights(src: Path) -> list[Path]:
    files = safetensors_io.weight_files(src)
    if files:
        return files
    pickles = sorted(p.name for pattern in PICKLE_PATTERNS for p in src.glob(pattern))
    if pickles:
        raise UnsafeCheckpoint(
            f"{src} has only pickle weights ({', '.join(pickles[:3])}); loading pickle can run arbitrary code, "
            "so llmcli converts safetensors only: get the model's .safetensors files"
        )
    raise NotACheckpoint(f"no *.safetensors weights in {src}; download the model's weight files too")


def plan_conversion(src_dir: Path, outtype: str = CONVERT_DEFAULT) -> ConversionPlan:
    """Check everything about the input and decide every output tensor; writes nothing."""
    import gguf

    from llmcli.convert.families import family_for

    src = Path(src_dir).expanduser()
    out = outtype_named(outtype)
    config = read_config(src)
    family = family_for(config, where=f"{src.name}/config.json")
    files = find_weights(src)
    refs = safetensors_io.index_tensors(files)

    allowed = set(gguf.MODEL_TENSORS[family.arch])
    planned: list[PlannedTensor] = []
    unmapped: list[str] = []
    for hf_name in sorted(refs, key=_natural_key):
        if family.skip(hf_name):
            continue
        mapped = family.map_name(hf_name)
        if mapped is None:
            unmapped.append(hf_name)
            continue
        key, gguf_name = mapped  # gguf keeps the .weight/.bias suffix it matched
        if key not in allowed:
            unmapped.append(hf_name)
            continue
        ref = refs[hf_name]
        planned.append(PlannedTensor(name=gguf_name, shape=ref.shape, qtype="", nbytes=0, source=ref,
                                     hf_name=hf_name, transform=family.transform(key, hf_name)))
    if unmapped:
        more = f" and {len(unmapped) - 3} more" if len(unmapped) > 3 else ""
        raise UnsupportedArchitecture(
            f"tensors {', '.join(unmapped[:3])}{more} have no place in llama.cpp's {family.arch_name} architecture; "
            f"this {family.hf_arch} checkpoint is a variant llmcli cannot convert"
        )

    names = [t.name for t in planned]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise BadCheckpoint(f"two checkpoint tensors map to {dup}; the checkpoint is inconsistent")
    present = set(names)
    missing = [n for n in family.required_names() if n not in present]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise BadCheckpoint(
            f"the checkpoint lacks tensors {family.hf_arch} needs ({', '.join(missing[:3])}{more}); "
            "download every shard of the model"
        )
    for name, data in family.extra_tensors():
        planned.append(PlannedTensor(name=name, shape=tuple(data.shape), qtype="F32", nbytes=0, data=data))

    embd = next(t for t in planned if t.name == "token_embd.weight")
    vocab = load_vocab(src, n_rows=embd.shape[0])

    source_dtypes = sorted({t.source.dtype for t in planned if t.source})
    direct = out.qtype or ("BF16" if source_dtypes == ["BF16"] else "F16")
    for t in planned:
        t.qtype = "F32" if t.data is not None else _tensor_type(t, direct)
        t.nbytes = _nbytes(t.shape, t.qtype)
    direct_size = sum(t.nbytes for t in planned) + _metadata_bytes(vocab)
    n_params = sum(t.n_elements for t in planned)
    if out.qtype:
        estimate, intermediate = direct_size, 0
    else:
        matrices = sum(t.n_elements for t in planned if t.qtype not in ("F32",))
        vectors = sum(t.nbytes for t in planned if t.qtype == "F32")
        estimate = int(matrices * out.bits_per_weight / 8) + vectors + _metadata_bytes(vocab)
        intermediate = direct_size

    notes = []
    if vocab.n_padding:
        notes.append(f"embedding has {vocab.n_padding} rows beyond the tokenizer: written as padding tokens")
    tied = "output.weight" not in present
    if tied:
        notes.append("tied embeddings: llama.cpp reuses token_embd for the output")
    return ConversionPlan(
        src=src, hf_arch=family.hf_arch, arch=family.arch_name, outtype=out, family=family, vocab=vocab,
        tensors=planned, source_bytes=sum(t.source.nbytes for t in planned if t.source),
        source_dtypes=source_dtypes, n_params=n_params, tied_embeddings=tied,
        estimated_size=estimate, intermediate_size=intermediate, notes=notes,
    )


def _natural_key(name: str) -> list:
    # model.layers.10 after model.layers.9, so the GGUF lists blocks in order.
    return [int(p) if p.isdigit() else p for p in name.split(".")]


# Tensor kinds llama.cpp wants in f32 whatever the output type (it computes them in f32).
ALWAYS_F32_SUFFIXES = ("_norm.weight", ".bias")


def _tensor_type(t: PlannedTensor, direct: str) -> str:
    import gguf

    if len(t.shape) <= 1 or t.name.endswith(ALWAYS_F32_SUFFIXES):
        return "F32"
    qtype = direct
    # The embedding and output matrices suffer most from 4-bit rounding; llama.cpp's own
    # quantizer keeps them wider too.
    if qtype == "Q4_0" and t.name in ("token_embd.weight", "output.weight"):
        qtype = "Q8_0"
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    if t.shape[-1] % block:
        qtype = "F16"  # rows that do not fill whole blocks cannot be block-quantized
    return qtype


def _nbytes(shape: tuple[int, ...], qtype: str) -> int:
    import gguf

    return math.prod(gguf.quant_shape_to_byte_shape(shape, gguf.GGMLQuantizationType[qtype]))


def _metadata_bytes(vocab: Vocab) -> int:
    text = sum(len(t.encode("utf-8")) + 12 for t in vocab.tokens) + sum(len(m) + 8 for m in vocab.merges)
    return text + len((vocab.chat_template or "").encode("utf-8")) + 64 * 1024


# -- writing -------------------------------------------------------------------------------------

def convert_checkpoint(src_dir: Path, out_path: Path, outtype: str = CONVERT_DEFAULT,
                       progress: Progress | None = None) -> ConvertResult:
    """Convert an HF safetensors checkpoint folder to one GGUF file at `out_path`.

    The file appears only when complete: it is written under a temporary name in the same
    folder and renamed at the end. Any error, Ctrl-C or full disk removes the temporary file.
    """
    started = time.monotonic()
    plan = plan_conversion(src_dir, outtype)
    out_path = Path(out_path).expanduser()
    folder = out_path.parent if str(out_path.parent) else Path(".")
    _check_output_folder(folder, out_path)
    _check_free_space(folder, plan.estimated_size + plan.intermediate_size + SPACE_MARGIN)

    temps: list[Path] = []
    try:
        final = _temp_path(folder, out_path, temps)
        if plan.outtype.qtype:
            _write_gguf(plan, final, progress)
        else:
            intermediate = _temp_path(folder, out_path, temps)
            _write_gguf(plan, intermediate, progress)
            if progress:
                progress("quantizing with llama.cpp", 0, 1)
            _llama_quantize(intermediate, final, plan.outtype)
            intermediate.unlink()
            if progress:
                progress("quantizing with llama.cpp", 1, 1)
        _fsync(final)
        # mkstemp made it private (0600); give the finished model the permissions of any new file.
        chmod_like_new_file(final)
        os.replace(final, out_path)
    except OSError as exc:
        _remove(temps)
        if exc.errno == errno.ENOSPC:
            raise ConversionFailed(
                f"the disk filled up while writing {out_path} (nothing was left behind); "
                f"free at least {format_bytes(plan.estimated_size + plan.intermediate_size)} and run it again"
            ) from exc
        raise ConversionFailed(f"writing {out_path} failed: {exc.strerror or exc}; nothing was left behind") from exc
    except BaseException:
        _remove(temps)
        raise
    vocab = plan.vocab
    return ConvertResult(
        path=out_path, arch=plan.arch, n_params=plan.n_params, outtype=plan.outtype.name,
        n_tensors=len(plan.tensors), size=out_path.stat().st_size, hf_arch=plan.hf_arch,
        seconds=time.monotonic() - started, tokenizer=f"{vocab.model}/{vocab.pre}",
        n_vocab=len(vocab.tokens), has_chat_template=bool(vocab.chat_template),
    )


def _check_output_folder(folder: Path, out_path: Path) -> None:
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(f"cannot write {out_path}: {folder} {what}; create it or choose another -o")
    if out_path.is_dir():
        raise UsageError(f"{out_path} is a folder; give a file name ending in .gguf")


def _check_free_space(folder: Path, needed: int) -> None:
    for short in space_shortfalls({folder: needed}):
        raise ConversionFailed(
            f"not enough free space in {folder}: the conversion needs about {format_bytes(short.needed)}, "
            f"{format_bytes(short.free)} are free; "
            "free some space or choose another -o"
        )


def _temp_path(folder: Path, out_path: Path, temps: list[Path]) -> Path:
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=f".{out_path.name}.", suffix=".partial")
    except OSError as exc:
        raise UsageError(
            f"cannot write in {folder}: {exc.strerror or exc}; choose another -o or fix the folder's permissions"
        ) from exc
    os.close(fd)
    path = Path(name)
    temps.append(path)
    return path


def _remove(paths: list[Path]) -> None:
    for p in paths:
        try:
            p.unlink(missing_ok=True)
        except OSError:
            pass


def _fsync(path: Path) -> None:
    with open(path, "rb+") as fh:
        os.fsync(fh.fileno())


def _write_gguf(plan: ConversionPlan, path: Path, progress: Progress | None) -> None:
    import gguf
    import numpy as np

    ftype = plan.outtype.ftype if plan.outtype.qtype else (
        "MOSTLY_BF16" if plan.source_dtypes == ["BF16"] else "MOSTLY_F16")
    writer = gguf.GGUFWriter(path=None, arch=plan.arch)
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(plan.src.name)
        plan.family.hparams(writer)
        writer.add_file_type(gguf.LlamaFileType[ftype])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        plan.vocab.write(writer)
        for t in plan.tensors:
            qtype = gguf.GGMLQuantizationType[t.qtype]
            if t.qtype in ("F32", "F16"):
                writer.add_tensor_info(t.name, t.shape, np.dtype(np.float32 if t.qtype == "F32" else np.float16),
                                       t.nbytes, raw_dtype=qtype)
            else:
                writer.add_tensor_info(t.name, gguf.quant_shape_to_byte_shape(t.shape, qtype), np.dtype(np.uint8),
                                       t.nbytes, raw_dtype=qtype)
        writer.write_header_to_file(path=path)
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        done, total = 0, plan.source_bytes
        for t in plan.tensors:
            writer.write_tensor_data(_tensor_data(t))
            if t.source is not None:
                done += t.source.nbytes
            if progress:
                progress(t.name, done, total)
    finally:
        writer.close()


def _tensor_data(t: PlannedTensor) -> np.ndarray:
    """Load, rearrange and encode one tensor; its memory map is gone when this returns."""
    import gguf
    import numpy as np

    if t.data is not None:
        data = np.ascontiguousarray(t.data, dtype=np.float32)
    else:
        assert t.source is not None
        data = safetensors_io.as_float32(t.source, t.source.load())
    if t.transform is not None:
        data = np.ascontiguousarray(t.transform(data))
    if data.shape != t.shape:
        raise BadCheckpoint(f"{t.hf_name} changed shape to {data.shape}; this is a bug in llmcli's converter")
    if t.qtype == "F32":
        return data
    if t.qtype == "F16":
        return data.astype(np.float16)
    qtype = gguf.GGMLQuantizationType[t.qtype]
    rows = data.reshape(-1, data.shape[-1])
    out = np.empty(gguf.quant_shape_to_byte_shape(rows.shape, qtype), dtype=np.uint8)
    step = max(1, QUANT_CHUNK_ELEMENTS // rows.shape[1])
    for i in range(0, rows.shape[0], step):
        out[i:i + step] = gguf.quants.quantize(rows[i:i + step], qtype)
    return out.reshape(gguf.quant_shape_to_byte_shape(t.shape, qtype))


def _llama_quantize(src: Path, dst: Path, out: OutType) -> None:
    import llama_cpp
    from llama_cpp._utils import suppress_stdout_stderr

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = out.llama_ftype
    params.nthread = os.cpu_count() or 1
    # llama.cpp prints a line per tensor on stderr; the caller shows its own progress.
    with suppress_stdout_stderr(disable=False):
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise ConversionFailed(f"llama.cpp's quantizer failed on {out.name} (code {rc}); try --outtype f16 or q8_0")


