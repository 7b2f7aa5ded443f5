"""Write a conversion: HF checkpoint folder -> one GGUF file, from the plan `plan.py` makes.

Planning reads only headers and catches every input problem before a byte is written. Writing
streams one tensor at a time:
the GGUF header and tensor table go first (sizes are known from the plan), then each tensor is
mapped, converted and appended, and its memory map dropped.
"""

from __future__ import annotations

import ctypes
import errno
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert import safetensors_io
from llmcli.convert.errors import BadCheckpoint, ConversionFailed
from llmcli.convert.outtypes import CONVERT_DEFAULT, OutType
from llmcli.convert.plan import ConversionPlan, PlannedTensor, plan_conversion
from llmcli.errors import UsageError
from llmcli.fsutil import chmod_like_new_file, replace_atomic, space_shortfalls
from llmcli.units import format_bytes

if TYPE_CHECKING:
    import numpy as np

    from llmcli.convert.vocab_record import PreCheck

Progress = Callable[[str, int, int], None]

# Rows quantized at a time: bounds the temporaries of gguf.quants to a few MB per chunk.
QUANT_CHUNK_ELEMENTS = 1 << 22
# Headroom on top of the planned size when checking free space (metadata, alignment padding).
SPACE_MARGIN = 16 * 1024 * 1024


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
    pre_check: PreCheck | None = None  # how tokenizer.ggml.pre was chosen (byte-level BPE)


# -- writing -------------------------------------------------------------------------------------


def convert_checkpoint(
    src_dir: Path, out_path: Path, outtype: str = CONVERT_DEFAULT, progress: Progress | None = None
) -> ConvertResult:
    """Convert an HF safetensors checkpoint folder to one GGUF file at `out_path`.

    The file appears only when complete: it is written under a temporary name in the same
    folder and renamed at the end. Any error, Ctrl-C or full disk removes the temporary file.
    """
    started = time.monotonic()
    plan = plan_conversion(src_dir, outtype)
    out_path = Path(out_path)
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
        # mkstemp made it private (0600); give the finished model the permissions of any new file.
        chmod_like_new_file(final)
        replace_atomic(final, out_path)
    except OSError as exc:
        _remove(temps)
        if exc.errno == errno.ENOSPC:
            raise ConversionFailed(
                f"the disk filled up while writing {out_path} (nothing was left behind); "
                f"free at least {format_bytes(plan.estimated_size + plan.intermediate_size)} and run it again"
            ) from exc
        raise ConversionFailed(
            f"writing {out_path} failed: {exc.strerror or exc}; nothing was left behind"
        ) from exc
    except BaseException:
        _remove(temps)
        raise
    vocab = plan.vocab
    return ConvertResult(
        path=out_path,
        arch=plan.arch,
        n_params=plan.n_params,
        outtype=plan.outtype.name,
        n_tensors=len(plan.tensors),
        size=out_path.stat().st_size,
        hf_arch=plan.hf_arch,
        seconds=time.monotonic() - started,
        tokenizer=f"{vocab.model}/{vocab.pre}",
        n_vocab=len(vocab.tokens),
        pre_check=vocab.pre_check,
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
            f"cannot write in {folder}: {exc.strerror or exc}; "
            "choose another -o or fix the folder's permissions"
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


def _write_gguf(plan: ConversionPlan, path: Path, progress: Progress | None) -> None:
    import gguf
    import numpy as np

    from llmcli.convert.gguf_write import GGUFWriter

    ftype = (
        plan.outtype.ftype
        if plan.outtype.qtype
        else ("MOSTLY_BF16" if plan.source_dtypes == ["BF16"] else "MOSTLY_F16")
    )
    writer = GGUFWriter(path=None, arch=plan.arch)
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
                writer.add_tensor_info(
                    t.name,
                    t.shape,
                    np.dtype(np.float32 if t.qtype == "F32" else np.float16),
                    t.nbytes,
                    raw_dtype=qtype,
                )
            else:
                writer.add_tensor_info(
                    t.name,
                    gguf.quant_shape_to_byte_shape(t.shape, qtype),
                    np.dtype(np.uint8),
                    t.nbytes,
                    raw_dtype=qtype,
                )
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
    # Overflow is checked below, not warned about: a warning would be lines of noise on stderr.
    with np.errstate(over="ignore", invalid="ignore"):
        if t.qtype == "F16":
            half = data.astype(np.float16)
            if not np.isfinite(half).all() and np.isfinite(data).all():
                raise BadCheckpoint(
                    f"{t.hf_name} has values beyond float16's range "
                    "(65504); choose the f32 or bf16 output type"
                )
            return half
        qtype = gguf.GGMLQuantizationType[t.qtype]
        rows = data.reshape(-1, data.shape[-1])
        out = np.empty(gguf.quant_shape_to_byte_shape(rows.shape, qtype), dtype=np.uint8)
        step = max(1, QUANT_CHUNK_ELEMENTS // rows.shape[1])
        for i in range(0, rows.shape[0], step):
            out[i : i + step] = gguf.quants.quantize(rows[i : i + step], qtype)
    return out.reshape(gguf.quant_shape_to_byte_shape(t.shape, qtype))


def _llama_quantize(src: Path, dst: Path, out: OutType) -> None:
    from llmcli import llama_lib

    llama_cpp = llama_lib.load()
    suppress_stdout_stderr = llama_lib.load("_utils").suppress_stdout_stderr

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = out.llama_ftype
    params.nthread = os.cpu_count() or 1
    # llama.cpp prints a line per tensor on stderr; the caller shows its own progress.
    with suppress_stdout_stderr(disable=False):
        rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0:
        raise ConversionFailed(
            f"llama.cpp's quantizer failed on {out.name} (code {rc}); try --outtype f16 or q8_0"
        )
