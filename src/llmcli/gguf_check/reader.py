"""The header's bytes, read with every count, length and offset checked against the file's size and
sane limits, then handed to consistency.py (keys, tensor layout) before anything trusts it."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

from llmcli.errors import BadModelFile
from llmcli.gguf_check.consistency import check_layout, check_metadata
from llmcli.gguf_check.constants import gguf_constants
from llmcli.gguf_check.records import SPM_BYTE_TOKENS, VOCABULARY_KEY, GGUFArray, GGUFHeader, TensorInfo

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# Limits far above any real model, far below what would exhaust memory.
MAX_KV = 65_536
MAX_TENSORS = 1_000_000
MAX_STRING = 64 << 20  # a chat template or a token; 64 MiB is already absurd
_U64 = struct.Struct("<Q")
MAX_ARRAY = 16 << 20  # vocabularies are ~10^5..10^6 entries
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_NAME = 63  # GGML_MAX_NAME - 1: a longer tensor name is refused by ggml
# Numeric arrays up to this length keep their items (per-layer head counts, at most LLAMA_MAX_LAYERS);
# longer ones (scores, token types) and string arrays (tokens, merges) are counted, not kept.
KEEP_ARRAY_ITEMS = 512

# GGUF value types: id -> (struct format, size). Strings (8) and arrays (9) are handled apart.
SCALARS: dict[int, tuple[str, int]] = {
    0: ("<B", 1),
    1: ("<b", 1),
    2: ("<H", 2),
    3: ("<h", 2),
    4: ("<I", 4),
    5: ("<i", 4),
    6: ("<f", 4),
    7: ("<?", 1),
    10: ("<Q", 8),
    11: ("<q", 8),
    12: ("<d", 8),
}
STRING, ARRAY = 8, 9


class _Reader:
    """Bounds-checked little-endian reads over a memory map."""

    def __init__(self, buf: mmap.mmap | bytes, size: int, path: Path) -> None:
        self.buf, self.size, self.pos, self.path = buf, size, 0, path

    def fail(self, what: str) -> BadModelFile:
        return BadModelFile(f"{self.path} is not a valid GGUF ({what}); re-download or re-convert it")

    def take(self, n: int) -> int:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"truncated at byte {self.pos}")
        start = self.pos
        self.pos += n
        return start

    def scalar(self, fmt: str, size: int) -> Any:
        return struct.unpack_from(fmt, self.buf, self.take(size))[0]

    def u32(self) -> int:
        return self.scalar("<I", 4)

    def u64(self) -> int:
        return self.scalar("<Q", 8)

    def length(self) -> int:
        n = self.u64()
        if n > MAX_STRING:
            raise self.fail(f"string of {n} bytes at byte {self.pos}")
        return n

    def string(self) -> str:
        n = self.length()
        start = self.take(n)
        try:
            return bytes(self.buf[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"string at byte {start} is not UTF-8") from None

    def string_items(self, count: int, keep: bool) -> list[bytes]:
        """Walk `count` length-prefixed strings (the items of a string array); return them if `keep`.

        One tight loop rather than a method call per read: a vocabulary and its merges are 50,000 to
        260,000 strings each, and walking them was most of the start-up time of `show` and `chat`.
        """
        buf, size, pos = self.buf, self.size, self.pos
        unpack = _U64.unpack_from
        items: list[bytes] = []
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                raise self.fail(f"truncated at byte {pos}")
            n = unpack(buf, pos)[0]
            if n > MAX_STRING:
                raise self.fail(f"string of {n} bytes at byte {pos + 8}")
            end = pos + 8 + n
            if end > size:
                raise self.fail(f"truncated at byte {pos + 8}")
            if keep:
                items.append(buf[pos + 8 : end])
            pos = end
        self.pos = pos
        return items

    def value(self, vtype: int, vocabulary: bool = False) -> Any:
        """One value; a string array is counted, and for the vocabulary its distinct items too."""
        if vtype in SCALARS:
            return self.scalar(*SCALARS[vtype])
        if vtype == STRING:
            return self.string()
        if vtype == ARRAY:
            item_type, count = self.u32(), self.u64()
            if count > MAX_ARRAY:
                raise self.fail(f"array of {count} items")
            if item_type in SCALARS:
                # Fixed-size items: check the whole run fits, then jump over it (or keep a short one).
                fmt, size = SCALARS[item_type]
                start = self.take(count * size)
                if count <= KEEP_ARRAY_ITEMS:
                    items = struct.unpack_from(f"<{count}{fmt[1]}", self.buf, start)
                    return GGUFArray(item_type, count, items)
            elif item_type == STRING:
                strings = self.string_items(count, keep=vocabulary)
                if not vocabulary:
                    return GGUFArray(item_type, count)
                # llama.cpp asserts a vocabulary's items are distinct; it renames empty ones to
                # "[EMPTY_i]", so those count as distinct.
                found = set(strings)
                n_empty = strings.count(b"")
                return GGUFArray(
                    item_type,
                    count,
                    distinct=len(found) + max(0, n_empty - 1),
                    byte_tokens=len(found & SPM_BYTE_TOKENS),
                )
            else:
                raise self.fail(f"array of unsupported type {item_type}")
            return GGUFArray(item_type, count)
        raise self.fail(f"unknown value type {vtype}")


def _tensor_bytes(ggml_type: int, shape: tuple[int, ...], reader: _Reader) -> int:
    gc = gguf_constants()
    try:
        block, type_size = gc.GGML_QUANT_SIZES[gc.GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise reader.fail(f"unknown tensor type {ggml_type}") from None
    n = 1
    for d in shape:
        n *= d
    if shape and shape[0] % block:
        raise reader.fail(f"tensor row of {shape[0]} is not a multiple of its block size {block}")
    return n // block * type_size


def read_header(path: str | Path) -> GGUFHeader:
    """Parse and validate a GGUF's header; raise BadModelFile on anything out of bounds."""
    path = Path(path)
    try:
        fh = open(path, "rb")
    except IsADirectoryError:
        raise BadModelFile(f"{path} is a folder, not a .gguf file; give the file inside it") from None
    with fh:
        size = path.stat().st_size
        if size < 24:
            head = fh.read(4)
            if head != GGUF_MAGIC:
                raise BadModelFile(
                    f"{path} is not a GGUF file; give a .gguf model or a name from `llmcli list`"
                )
            raise BadModelFile(f"{path} is a truncated GGUF ({size} bytes); re-download it")
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, size, path)


def _parse(buf: mmap.mmap, size: int, path: Path) -> GGUFHeader:
    r = _Reader(buf, size, path)
    if bytes(buf[0:4]) != GGUF_MAGIC:
        raise BadModelFile(f"{path} is not a GGUF file; give a .gguf model or a name from `llmcli list`")
    r.take(4)
    version = r.u32()
    if version not in SUPPORTED_VERSIONS:
        raise r.fail(f"version {version}; llmcli reads GGUF v2 and v3")
    n_tensors, n_kv = r.u64(), r.u64()
    if n_tensors > MAX_TENSORS or n_kv > MAX_KV:
        raise r.fail(f"{n_tensors} tensors and {n_kv} metadata keys")
    metadata: dict[str, Any] = {}
    types: dict[str, int] = {}
    for _ in range(n_kv):
        key = r.string()
        if key in metadata or not key:
            raise r.fail(f"metadata key {key[:80]!r} is empty or repeated")
        types[key] = vtype = r.u32()
        metadata[key] = r.value(vtype, vocabulary=key == VOCABULARY_KEY)
    tensors = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = r.string()
        if len(name.encode()) > MAX_NAME or name in names:
            raise r.fail(f"tensor name {name[:80]!r} is too long or repeated")
        names.add(name)
        n_dims = r.u32()
        if not 1 <= n_dims <= MAX_DIMS:
            raise r.fail(f"tensor {name!r} has {n_dims} dimensions")
        shape = tuple(r.u64() for _ in range(n_dims))
        if any(d <= 0 or d > 1 << 40 for d in shape):
            raise r.fail(f"tensor {name!r} has shape {shape}")
        ggml_type, offset = r.u32(), r.u64()
        tensors.append(TensorInfo(name, shape, ggml_type, offset, _tensor_bytes(ggml_type, shape, r)))
    header = GGUFHeader(path, version, size, metadata, tensors, 0, types)
    check_metadata(header, r.fail)  # general.alignment is checked here, before it places the data
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    header.data_offset = (r.pos + alignment - 1) // alignment * alignment
    check_layout(header, alignment, r.fail)
    return header
