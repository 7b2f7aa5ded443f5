"""A GGUF's layout read without gguf-py's GGUFReader, for the test set-up that turns the test GGUF into
a transformers checkpoint (tests/assets.py).

GGUFReader builds a numpy view for every element of every metadata array, so Gemma 3's 262k-token
vocabulary costs ~30 s of CPU each time transformers opens the file. Here the vocabulary is stepped
over, the tensors come back as the rows of raw bytes gguf-py's dequantize takes, and a copy of the
file without its vocabulary arrays lets transformers read the config from the rest of the metadata.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT, GGMLQuantizationType, GGUFReader, GGUFValueType

# bytes per fixed-width metadata value, from gguf-py's own table (a class attribute: nothing is parsed)
_WIDTHS: dict[int, int] = {t: np.dtype(n).itemsize for t, n in GGUFReader.gguf_scalar_to_np.items()}
VOCABULARY = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class Entry:
    """One metadata key-value pair: where it sits in the file and, for an array, its length."""

    key: str
    value_type: int
    start: int
    end: int
    count: int = 0


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # ggml order: the row length first
    ggml_type: GGMLQuantizationType
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class Layout:
    blob: np.memmap
    version: int
    entries: list[Entry]
    values: dict[str, Any]  # the scalar and string values; arrays are only stepped over
    table: tuple[int, int]  # where the tensor table starts and ends
    tensors: list[Tensor]
    data_start: int


def read_layout(path: Path) -> Layout:
    blob: Any = np.memmap(path, dtype=np.uint8, mode="r")

    def read(fmt: str, pos: int) -> tuple[Any, ...]:
        return struct.unpack_from("<" + fmt, blob, pos)

    def string(pos: int) -> tuple[str, int]:
        (length,) = read("Q", pos)
        return bytes(blob[pos + 8 : pos + 8 + length]).decode(), pos + 8 + length

    def skip(value_type: int, pos: int) -> int:
        if value_type == GGUFValueType.STRING:
            return string(pos)[1]
        if value_type != GGUFValueType.ARRAY:
            return pos + _WIDTHS[value_type]
        item_type, count = read("IQ", pos)
        pos += 12
        if item_type in _WIDTHS:
            return pos + count * _WIDTHS[item_type]
        for _ in range(count):
            pos = skip(item_type, pos)
        return pos

    _magic, version, tensor_count, kv_count = read("4sIQQ", 0)
    pos, entries = 24, []
    values: dict[str, Any] = {}
    for _ in range(kv_count):
        start = pos
        key, pos = string(pos)
        (value_type,) = read("I", pos)
        pos += 4
        count = read("IQ", pos)[1] if value_type == GGUFValueType.ARRAY else 0
        if value_type == GGUFValueType.STRING:
            values[key] = string(pos)[0]
        elif value_type in _WIDTHS:
            values[key] = np.frombuffer(blob, GGUFReader.gguf_scalar_to_np[value_type], 1, pos)[0].item()
        pos = skip(value_type, pos)
        entries.append(Entry(key, value_type, start, pos, count))
    table_start, tensors = pos, []
    for _ in range(tensor_count):
        name, pos = string(pos)
        (dims,) = read("I", pos)
        shape = read(f"{dims}Q", pos + 4)
        ggml_type, offset = read("IQ", pos + 4 + 8 * dims)
        pos += 4 + 8 * dims + 12
        tensors.append(Tensor(name, shape, GGMLQuantizationType(ggml_type), offset))
    alignment: int = values.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    data_start = (pos + alignment - 1) // alignment * alignment
    return Layout(blob, version, entries, values, (table_start, pos), tensors, data_start)


def raw_tensors(layout: Layout) -> Iterator[tuple[str, GGMLQuantizationType, np.ndarray]]:
    """Each tensor as (name, ggml type, rows of raw bytes), the array gguf-py's reader hands to
    dequantize, read from the file only when used."""
    for tensor in layout.tensors:
        block, block_bytes = GGML_QUANT_SIZES[tensor.ggml_type]
        row_bytes = tensor.shape[0] // block * block_bytes
        rows = tuple(reversed(tensor.shape[1:]))
        start = layout.data_start + tensor.offset
        raw = layout.blob[start : start + row_bytes * int(np.prod(rows, dtype=np.int64))]
        yield tensor.name, tensor.ggml_type, raw.reshape(*rows, row_bytes)


def write_without_vocabulary(layout: Layout, dest: Path) -> None:
    """The file with its tokenizer arrays left out, the vocabulary's length stated as
    `<architecture>.vocab_size` (where transformers takes vocab_size from before it counts the
    tokens), and the tensor data a hole of the same size: the same metadata for a config, in
    a file gguf-py reads in a moment."""
    blob, architecture = layout.blob, layout.values["general.architecture"]
    kept = [
        e
        for e in layout.entries
        if not (e.key.startswith("tokenizer.ggml.") and e.value_type == GGUFValueType.ARRAY)
    ]
    size_key = f"{architecture}.vocab_size"
    stated = [] if size_key in layout.values else [_u32_entry(size_key, _count(layout, VOCABULARY))]
    with dest.open("wb") as out:
        out.write(
            struct.pack("<4sIQQ", b"GGUF", layout.version, len(layout.tensors), len(kept) + len(stated))
        )
        for e in kept:
            out.write(blob[e.start : e.end].tobytes())
        for entry in stated:
            out.write(entry)
        out.write(blob[layout.table[0] : layout.table[1]].tobytes())
        alignment = layout.values.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        out.write(b"\0" * (-out.tell() % alignment))
        out.truncate(out.tell() + len(blob) - layout.data_start)  # sparse: nothing reads the weights


def _count(layout: Layout, key: str) -> int:
    return next(e.count for e in layout.entries if e.key == key)


def _u32_entry(key: str, value: int) -> bytes:
    name = key.encode()
    return struct.pack("<Q", len(name)) + name + struct.pack("<II", GGUFValueType.UINT32, value)


def array_items(layout: Layout, key: str) -> list[Any]:
    """The items of a fixed-width metadata array (a per-layer pattern, say), as Python values."""
    entry = next(e for e in layout.entries if e.key == key)
    assert entry.value_type == GGUFValueType.ARRAY, f"{key} is not an array"
    items = _items_at(entry)
    dtype = GGUFReader.gguf_scalar_to_np[_item_type(layout, entry)]
    return np.frombuffer(layout.blob, dtype, entry.count, items).tolist()


def metadata(layout: Layout) -> dict[str, Any]:
    """Every key's value but the string arrays' (the vocabulary), which are only stepped over."""
    arrays = {
        e.key: array_items(layout, e.key)
        for e in layout.entries
        if e.value_type == GGUFValueType.ARRAY and _item_type(layout, e) in _WIDTHS
    }
    return {**layout.values, **arrays}


def _items_at(entry: Entry) -> int:
    # past the key (its length and bytes), the value type, and the array's item type and count
    return entry.start + 8 + len(entry.key.encode()) + 4 + 12


def _item_type(layout: Layout, entry: Entry) -> int:
    return struct.unpack_from("<I", layout.blob, _items_at(entry) - 12)[0]


def f32_tensor(layout: Layout, name: str) -> np.ndarray:
    """An F32 tensor's values, in gguf-py's order (rows last)."""
    tensor = next(t for t in layout.tensors if t.name == name)
    assert tensor.ggml_type == GGMLQuantizationType.F32, f"{name} is {tensor.ggml_type.name}"
    start = layout.data_start + tensor.offset
    count = int(np.prod(tensor.shape, dtype=np.int64))
    return np.frombuffer(layout.blob, np.float32, count, start).reshape(tuple(reversed(tensor.shape)))
