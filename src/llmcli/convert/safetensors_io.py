"""Reading safetensors checkpoints without torch: a validated header, then one tensor at a time.

The header is untrusted input (a checkpoint may come from anywhere), so it is checked before any
offset in it is used: sizes, dtypes, shapes, offsets inside the file, no overlaps. Each tensor is
read through its own memory map, which is dropped after use, so the process holds the largest
tensor, not the model.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert import files
from llmcli.convert.errors import BadCheckpoint, shown

if TYPE_CHECKING:
    import numpy as np

# The largest header we accept. Real headers are a few hundred KiB; the cap keeps a hostile file
# from making us parse gigabytes of JSON.
MAX_HEADER_BYTES = 100 * 1024 * 1024
# The largest dimension we accept: an empty tensor ([10**8, 0]) occupies no bytes, so the byte
# range alone does not bound its shape.
MAX_DIM = 1 << 40

# safetensors dtype -> (bytes per element, numpy dtype name used to read it). bf16 has no numpy
# dtype: it is read as uint16 and widened by `as_float32`.
DTYPES: dict[str, tuple[int, str]] = {
    "F32": (4, "<f4"),
    "F16": (2, "<f2"),
    "BF16": (2, "<u2"),
}
# Present in some checkpoints, never weights we convert; listed so the error can say what they are.
OTHER_DTYPES = {"F64", "I64", "I32", "I16", "I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "U16", "U32", "U64"}
# Integer buffers transformers saved beside the weights (BERT's embeddings.position_ids, an arange):
# indexed so that their byte ranges are checked, then skipped by every family (base.SKIPPED_SUFFIXES);
# their bytes are never read.
BUFFER_DTYPES: dict[str, int] = {"I64": 8, "I32": 4}
BUFFER_SUFFIXES = (".position_ids",)


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


def read_header(path: Path, root: Path | None = None) -> tuple[dict[str, TensorRef], dict[str, str]]:
    """Parse and validate one .safetensors header; returns (tensors by name, __metadata__).

    The file must be a regular file inside `root` (default: its own folder).
    """
    name = path.name
    fd = files.open_regular(path, root or files.checkpoint_root(path.parent))
    try:
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(8)
            if len(head) < 8:
                raise BadCheckpoint(
                    f"{name} is not a safetensors file (only {size} bytes); download it again"
                )
            (n,) = struct.unpack("<Q", head)
            if n == 0 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise BadCheckpoint(
                    f"{name} has a corrupt safetensors header (claims {n} bytes in a {size}-byte file); "
                    "download it again"
                )
            raw = fh.read(n)
    except OSError as exc:
        raise BadCheckpoint(f"cannot read {path}: {exc.strerror or exc}; check the file") from exc
    if len(raw) != n:
        raise BadCheckpoint(f"{name} changed while it was read; check the file and run it again")

    try:
        raw_text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadCheckpoint(
            f"{name} has a corrupt safetensors header (not UTF-8); download it again"
        ) from exc
    try:
        header = json.loads(raw_text)
    except RecursionError as exc:
        raise BadCheckpoint(
            f"{name} has a corrupt safetensors header (nested too deeply); download it again"
        ) from exc
    except ValueError as exc:
        raise BadCheckpoint(
            f"{name} has a corrupt safetensors header (not JSON: {exc}); download it again"
        ) from exc
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
            raise BadCheckpoint(
                f"{name}: tensors {shown(repr(a))} and {shown(repr(b))} "
                "overlap; the file is corrupt, download it again"
            )
    return tensors, {k: v for k, v in meta.items() if isinstance(v, str)}


def _tensor_ref(path: Path, tname: str, info: object, data_start: int, data_size: int) -> TensorRef:
    bad = f"{path.name}: tensor {shown(repr(tname))}"
    if not isinstance(info, dict):
        raise BadCheckpoint(f"{bad} has no description; the file is corrupt, download it again")
    dtype, shape, offsets = info.get("dtype"), info.get("shape"), info.get("data_offsets")
    buffer = isinstance(dtype, str) and dtype in BUFFER_DTYPES and tname.endswith(BUFFER_SUFFIXES)
    if not isinstance(dtype, str) or not (buffer or dtype in DTYPES):
        if isinstance(dtype, str) and dtype in OTHER_DTYPES:
            raise BadCheckpoint(
                f"{bad} is {dtype}; llmcli converts BF16, F16 and F32 weights only "
                "(dequantize the checkpoint first)"
            )
        raise BadCheckpoint(
            f"{bad} has an unknown dtype {shown(repr(dtype))}; the file is corrupt, download it again"
        )
    if (
        not isinstance(shape, list)
        or len(shape) > 8
        or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape)
    ):
        raise BadCheckpoint(
            f"{bad} has an invalid shape {shown(repr(shape))}; the file is corrupt, download it again"
        )
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
    ):
        raise BadCheckpoint(f"{bad} has invalid data_offsets; the file is corrupt, download it again")
    begin, end = offsets
    itemsize = BUFFER_DTYPES[dtype] if buffer else DTYPES[dtype][0]
    if not 0 <= begin <= end <= data_size:
        raise BadCheckpoint(f"{bad} points outside the file (truncated download?); download it again")
    if end - begin != math.prod(shape) * itemsize:
        raise BadCheckpoint(f"{bad}: its byte size does not match its shape; the file is corrupt")
    return TensorRef(tname, path, dtype, tuple(shape), data_start + begin, data_start + end)


def weight_files(src: Path) -> list[Path]:
    """The checkpoint's safetensors files: from model.safetensors.index.json if sharded."""
    root = files.checkpoint_root(src)
    index = src / "model.safetensors.index.json"
    if files.is_present(index):
        weight_map = files.read_json(index, root)
        weight_map = weight_map.get("weight_map")
        if (
            not isinstance(weight_map, dict)
            or not weight_map
            or not all(isinstance(v, str) and v.endswith(".safetensors") for v in weight_map.values())
        ):
            raise BadCheckpoint(
                f"{index.name} has no weight_map of tensor names "
                "to .safetensors shard names; download it again"
            )
        found = []
        for n in sorted(set(weight_map.values())):
            p = src / n
            # A shard name like "../../etc/passwd" must not lead us out of the checkpoint.
            files.resolve_inside(p, root, what=f"shard {shown(repr(n))} listed in {index.name}")
            if not files.is_present(p):
                raise BadCheckpoint(
                    f"shard {shown(repr(n))} listed in {index.name} is missing; download it again"
                )
            found.append(p)
        return found
    single = src / "model.safetensors"
    if files.is_present(single):
        return [single]
    return sorted(src.glob("*.safetensors"))


def index_tensors(paths: list[Path], root: Path | None = None) -> dict[str, TensorRef]:
    """Every tensor of the checkpoint by name, each read from its own file's validated header."""
    tensors: dict[str, TensorRef] = {}
    for f in paths:
        found, _ = read_header(f, root)
        for name, ref in found.items():
            if name in tensors:
                raise BadCheckpoint(
                    f"tensor {shown(repr(name))} appears in both {tensors[name].file.name} and {f.name}"
                )
            tensors[name] = ref
    return tensors
