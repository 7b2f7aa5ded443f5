"""Safe GGUF header reading: validate a file in Python before llama.cpp ever opens it.

llama.cpp trusts the header it reads; a truncated or hostile file can make it allocate wildly or
read past the end and take the process down. So every count, length and offset is checked here
against the file size and against sane limits first; tensors must be aligned, inside the file
and not overlap. Then every metadata key llama.cpp reads is checked against llmcli.gguf_rules, the
table of types and ranges llama.cpp asserts on (it aborts the process on a bad one). The facts
llmcli shows (architecture, layers, heads, KV bytes per token) come from the same pass.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import mmap
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from llmcli.errors import BadModelFile

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


@dataclass
class GGUFArray:
    """An array value: its item type and length; items only for short numeric arrays (KEEP_ARRAY_ITEMS)."""

    item_type: int
    count: int
    items: tuple[Any, ...] | None = None
    byte_tokens: int = 0  # how many of SentencePiece's 256 byte tokens a string array holds
    distinct: int = 0  # how many different strings a string array holds


VOCABULARY_KEY = "tokenizer.ggml.tokens"
SPM_BYTE_TOKENS = frozenset(f"<0x{b:02X}>".encode() for b in range(256))


@dataclass
class TensorInfo:
    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int  # relative to the data section
    n_bytes: int


@dataclass
class GGUFHeader:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    types: dict[str, int] = field(default_factory=dict)  # key -> GGUF value type, as llama.cpp checks it


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


@functools.cache
def _gguf_constants() -> ModuleType:
    """gguf-py's constants.py (enums and tables, standard library only), loaded by itself.

    `import gguf.constants` first runs gguf/__init__, which imports numpy, sentencepiece and yaml: a
    quarter of a second that `llmcli list` and `show` would pay for three enums and one table.
    """
    if "gguf" in sys.modules:  # already paid for (convert, bench): use the real one
        return importlib.import_module("gguf.constants")
    spec = importlib.util.find_spec("gguf")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the gguf package is not installed; reinstall llmcli")
    path = Path(list(spec.submodule_search_locations)[0]) / "constants.py"
    module_spec = importlib.util.spec_from_file_location("llmcli._gguf_constants", path)
    if module_spec is None or module_spec.loader is None:
        raise ModuleNotFoundError(f"cannot load {path}; reinstall llmcli")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _tensor_bytes(ggml_type: int, shape: tuple[int, ...], reader: _Reader) -> int:
    gc = _gguf_constants()
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
    from llmcli.gguf_consistency import check_layout, check_metadata

    check_metadata(header, r.fail)  # general.alignment is checked here, before it places the data
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    header.data_offset = (r.pos + alignment - 1) // alignment * alignment
    check_layout(header, alignment, r.fail)
    return header


@dataclass
class ModelFacts:
    """What `show` prints and what the engine plans with, read from a validated header."""

    path: str
    arch: str
    name: str | None
    quant: str | None
    size: int
    n_params: int
    context_length: int | None
    n_layer: int | None
    n_embd: int | None
    n_head: int | None
    n_head_kv: int | None
    head_dim_k: int | None
    head_dim_v: int | None
    vocab_size: int | None
    chat_template: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    def kv_bytes_per_token(self, bytes_per_element: float = 2.0) -> int | None:
        """2 × layers × kv_heads × head_dim × bytes (K and V; f16 cache by default)."""
        layers, kv_heads, k, v = self.n_layer, self.n_head_kv, self.head_dim_k, self.head_dim_v
        if layers is None or kv_heads is None or k is None or v is None:
            return None
        return int(layers * kv_heads * (k + v) * bytes_per_element)


def _file_type_name(value: Any) -> str | None:
    try:
        return _gguf_constants().LlamaFileType(value).name.removeprefix("MOSTLY_")
    except ValueError:
        return None


def model_facts(path: str | Path) -> ModelFacts:
    return facts_from_header(read_header(path))


def facts_from_header(header: GGUFHeader) -> ModelFacts:
    path = header.path
    md = header.metadata
    arch = md.get("general.architecture")
    if not isinstance(arch, str):
        raise BadModelFile(f"{path} has no general.architecture; it is not a model llama.cpp can run")

    def key(suffix: str) -> Any:
        value = md.get(f"{arch}.{suffix}")
        if isinstance(value, GGUFArray):  # one value a layer: the largest layer plans the KV cache
            return max(value.items) if value.items else None
        return value

    n_head, n_head_kv, n_embd = (
        key("attention.head_count"),
        key("attention.head_count_kv"),
        key("embedding_length"),
    )
    n_head_kv = n_head_kv or n_head
    default_head_dim = n_embd // n_head if n_embd and n_head else None
    tokens = md.get("tokenizer.ggml.tokens")
    n_params = 0
    for t in header.tensors:
        count = 1
        for d in t.shape:
            count *= d
        n_params += count
    return ModelFacts(
        path=str(header.path),
        arch=arch,
        name=md.get("general.name") if isinstance(md.get("general.name"), str) else None,
        quant=_file_type_name(md.get("general.file_type")),
        size=header.file_size,
        n_params=n_params,
        context_length=key("context_length"),
        n_layer=key("block_count"),
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim_k=key("attention.key_length") or default_head_dim,
        head_dim_v=key("attention.value_length") or default_head_dim,
        vocab_size=tokens.count if isinstance(tokens, GGUFArray) else key("vocab_size"),
        chat_template=md.get("tokenizer.chat_template")
        if isinstance(md.get("tokenizer.chat_template"), str)
        else None,
    )
