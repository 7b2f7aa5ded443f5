"""Reading safetensors checkpoints without torch: a validated header, then one tensor at a time.

The header is untrusted input (a checkpoint may come from anywhere), so it is checked before any
offset in it is used: sizes, dtypes, shapes, offsets inside the file, no overlaps. Each tensor is
read through its own memory map, which is dropped after use, so the process holds the largest
tensor, not the model.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert.errors import BadCheckpoint

if TYPE_CHECKING:
    import numpy as np

# The largest header we accept. Real headers are a few hundred KiB; the cap keeps a hostile file
# from making us parse gigabytes of JSON.
MAX_HEADER_BYTES = 100 * 1024 * 1024

# safetensors dtype -> (bytes per element, numpy dtype name used to read it). bf16 has no numpy
# dtype: it is read as uint16 and widened by `as_float32`.
DTYPES: dict[str, tuple[int, str]] = {
    "F32": (4, "<f4"),
    "F16": (2, "<f2"),
    "BF16": (2, "<u2"),
}
# Present in some checkpoints, never weights we convert; listed so the error can say what they are.
OTHER_DTYPES = {"F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64"}


@dataclass(frozen=True)
class TensorRef:
    """Where one tensor lives: its file, dtype, shape and byte range (absolute, in the file)."""

    name: str
    file: Path
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    def load(self) -> np.ndarray:
        """The tensor in its source dtype (bf16 as uint16), backed by a private memory map."""
        import numpy as np

        itemsize, np_dtype = DTYPES[self.dtype]
        if self.nbytes == 0:
            return np.zeros(self.shape, dtype=np_dtype)
        mm = np.memmap(self.file, dtype=np.uint8, mode="r", offset=self.start, shape=(self.nbytes,))
        return mm.view(np_dtype).reshape(self.shape)


def as_float32(ref: TensorRef, data: np.ndarray) -> np.ndarray:
    """Widen a tensor read by `TensorRef.load` to float32 (a new array; the map can be dropped)."""
    import numpy as np

    if ref.dtype == "BF16":
        # bf16 is the top half of an f32: shifting the bits back is exact.
        return (data.astype(np.uint32) << 16).view(np.float32)
    return data.astype(np.float32)


def read_header(path: Path) -> tuple[dict[str, TensorRef], dict[str, str]]:
    """Parse and validate one .safetensors header; returns (tensors by name, __metadata__)."""
    name = path.name
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise BadCheckpoint(f"{name} is not a safetensors file (only {size} bytes); download it again")
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise BadCheckpoint(
                    f"{name} has a corrupt safetensors header (claims {n} bytes in a {size}-byte file); "
                    "download it again"
                )
            raw = fh.read(n)
    except OSError as exc:
        raise BadCheckpoint(f"cannot read {path}: {exc.strerror or exc}; check the file") from exc

    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadCheckpoint(f"{name} has a corrupt safetensors header (not JSON: {exc}); download it again") from exc
    if not isinstance(header, dict):
        raise BadCheckpoint(f"{name} has a corrupt safetensors header (not a JSON object); download it again")

    meta = header.pop("__metadata__", None) or {}
    if not isinstance(meta, dict):
        raise BadCheckpoint(f"{name}: __metadata__ is not an object; download it again")
    data_start = 8 + n
    data_size = size - data_start
    tensors: dict[str, TensorRef] = {}
    for tname, info in header.items():
        tensors[tname] = _tensor_ref(path, tname, info, data_start, data_size)

    # Overlapping ranges would let two tensors alias one another's bytes: a sign of a forged file.
    spans = sorted((t.start, t.end, t.name) for t in tensors.values() if t.nbytes)
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            raise BadCheckpoint(f"{name}: tensors {a} and {b} overlap; the file is corrupt, download it again")
    return tensors, {str(k): str(v) for k, v in meta.items()}


def _tensor_ref(path: Path, tname: str, info: object, data_start: int, data_size: int) -> TensorRef:
    bad = f"{path.name}: tensor {tname!r}"
    if not isinstance(info, dict):
        raise BadCheckpoint(f"{bad} has no description; the file is corrupt, download it again")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    if dtype not in DTYPES:
        if dtype in OTHER_DTYPES:
            raise BadCheckpoint(
                f"{bad} is {dtype}; llmcli converts BF16, F16 and F32 weights only "
                "(dequantize the checkpoint first)"
            )
        raise BadCheckpoint(f"{bad} has an unknown dtype {dtype!r}; the file is corrupt, download it again")
    if (not isinstance(shape, list) or len(shape) > 8
            or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise BadCheckpoint(f"{bad} has an invalid shape {shape!r}; the file is corrupt, download it again")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        raise BadCheckpoint(f"{bad} has invalid data_offsets; the file is corrupt, download it again")
    begin, end = offsets
    itemsize = DTYPES[dtype][0]
    if not 0 <= begin <= end <= data_size:
        raise BadCheckpoint(f"{bad} points outside the file (truncated download?); download it again")
    if end - begin != math.prod(shape) * itemsize:
        raise BadCheckpoint(f"{bad}: its byte size does not match its shape; the file is corrupt")
    return TensorRef(tname, path, dtype, tuple(shape), data_start + begin, data_start + end)


def weight_files(src: Path) -> list[Path]:
    """The checkpoint's safetensors files: from model.safetensors.index.json if sharded."""
    index = src / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            names = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadCheckpoint(f"{index.name} is unreadable ({exc}); download it again") from exc
        files = []
        for n in names:
            p = (src / n).resolve()
            # A shard name like "../../etc/passwd" must not lead us out of the checkpoint.
            if src.resolve() not in p.parents:
                raise BadCheckpoint(f"{index.name} names a shard outside the folder: {n!r}")
            if not p.is_file():
                raise BadCheckpoint(f"shard {n} listed in {index.name} is missing; download it again")
            files.append(p)
        return files
    single = src / "model.safetensors"
    if single.is_file():
        return [single]
    return sorted(src.glob("*.safetensors"))


def index_tensors(files: list[Path]) -> dict[str, TensorRef]:
    """Every tensor of the checkpoint by name, each read from its own file's validated header."""
    tensors: dict[str, TensorRef] = {}
    for f in files:
        found, _ = read_header(f)
        for name, ref in found.items():
            if name in tensors:
                raise BadCheckpoint(f"tensor {name} appears in both {tensors[name].file.name} and {f.name}")
            tensors[name] = ref
    return tensors


