"""GGUF files for the hostile-input tests: a tiny real model, and header surgery on any GGUF.

`rewrite` keeps every tensor byte of its source and changes only the header (set, retype or drop a
key; change the alignment), so a test states exactly one thing that is wrong with a file that is
otherwise a model llama.cpp runs.
"""

from __future__ import annotations

import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FORMATS = {
    U8: "<B",
    I8: "<b",
    U16: "<H",
    I16: "<h",
    U32: "<I",
    I32: "<i",
    F32: "<f",
    BOOL: "<?",
    U64: "<Q",
    I64: "<q",
    F64: "<d",
}
DROP = object()  # rewrite(..., {"key": DROP}) removes the key


def encode_string(text: str | bytes) -> bytes:
    data = text.encode("utf-8") if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def encode_value(vtype: int, value: Any, item_type: int | None = None) -> bytes:
    """One GGUF value: a scalar, a string, or (vtype ARR) a list of item_type items."""
    if vtype == STR:
        return encode_string(value)
    if vtype == ARR:
        items = b"".join(encode_value(item_type, v) for v in value)
        return struct.pack("<IQ", item_type, len(value)) + items
    return struct.pack(FORMATS[vtype], value)


def encode_kv(key: str, vtype: int, value: Any, item_type: int | None = None) -> bytes:
    return encode_string(key) + struct.pack("<I", vtype) + encode_value(vtype, value, item_type)


@dataclass
class Layout:
    """Where things are in a GGUF: each key's raw bytes, the tensor-info block, the data section."""

    kvs: dict[str, bytes]
    tensors: list[TensorInfo]
    data_offset: int

    @property
    def tensor_infos(self) -> bytes:
        return b"".join(t.encode() for t in self.tensors)


@dataclass
class TensorInfo:
    name: bytes
    dims: list[int]
    ggml_type: int
    offset: int

    def encode(self) -> bytes:
        return (
            encode_string(self.name)
            + struct.pack("<I", len(self.dims))
            + b"".join(struct.pack("<Q", d % 2**64) for d in self.dims)
            + struct.pack("<IQ", self.ggml_type % 2**32, self.offset % 2**64)
        )


def layout(src: str | Path) -> Layout:
    """Walk a (trusted) GGUF's header; independent of llmcli's reader, which is what is under test."""
    data = Path(src).open("rb").read(64 << 20)  # headers of real models are far smaller
    pos = 4 + 4
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16

    def skip_value(vtype: int) -> None:
        nonlocal pos
        if vtype == STR:
            pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        elif vtype == ARR:
            item_type, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            if item_type == STR:
                for _ in range(count):
                    skip_value(STR)
            else:
                pos += count * struct.calcsize(FORMATS[item_type])
        else:
            pos += struct.calcsize(FORMATS[vtype])

    kvs = {}
    for _ in range(n_kv):
        start = pos
        length = struct.unpack_from("<Q", data, pos)[0]
        key = data[pos + 8 : pos + 8 + length].decode()
        pos += 8 + length
        vtype = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        skip_value(vtype)
        kvs[key] = data[start:pos]
    tensors = []
    for _ in range(n_tensors):
        length = struct.unpack_from("<Q", data, pos)[0]
        name = data[pos + 8 : pos + 8 + length]
        pos += 8 + length
        n_dims = struct.unpack_from("<I", data, pos)[0]
        dims = list(struct.unpack_from(f"<{n_dims}Q", data, pos + 4))
        ggml_type, offset = struct.unpack_from("<IQ", data, pos + 4 + 8 * n_dims)
        pos += 4 + 8 * n_dims + 12
        tensors.append(TensorInfo(name, dims, ggml_type, offset))
    alignment = _alignment_of(list(kvs.values())) or 32
    return Layout(kvs, tensors, pos + (-pos % alignment))


def assemble(
    kvs: list[bytes],
    tensors: list[TensorInfo],
    data: bytes,
    alignment: int = 32,
    counts: tuple[int, int] | None = None,
) -> bytes:
    n_tensors, n_kv = counts or (len(tensors), len(kvs))
    header = (
        b"GGUF"
        + struct.pack("<IQQ", 3, n_tensors % 2**64, n_kv % 2**64)
        + b"".join(kvs)
        + b"".join(t.encode() for t in tensors)
    )
    return header + b"\0" * (-len(header) % alignment) + data


def rewrite(src: str | Path, dst: str | Path, changes: dict[str, Any] | None = None) -> Path:
    """Copy a GGUF, with changes = {key: (vtype, value[, item_type]) | DROP}; new keys are appended.

    general.alignment is set like any key: the data section is re-padded to the new value and the
    tensors' offsets are kept, so an alignment they are not multiples of leaves them misaligned.
    """
    changes = dict(changes or {})
    source = layout(src)
    kvs = [
        encode_kv(key, *changes[key]) if key in changes else raw
        for key, raw in source.kvs.items()
        if changes.get(key) is not DROP
    ]
    kvs += [
        encode_kv(key, *change)
        for key, change in changes.items()
        if key not in source.kvs and change is not DROP
    ]
    header = (
        b"GGUF" + struct.pack("<IQQ", 3, len(source.tensors), len(kvs)) + b"".join(kvs) + source.tensor_infos
    )
    header += b"\0" * (-len(header) % (_alignment_of(kvs) or 32))
    with open(dst, "wb") as out, open(src, "rb") as data:
        out.write(header)
        data.seek(source.data_offset)
        shutil.copyfileobj(data, out, 8 << 20)
    return Path(dst)


def _alignment_of(kvs: list[bytes]) -> int | None:
    key = encode_string("general.alignment")
    for kv in kvs:
        if kv.startswith(key) and struct.unpack_from("<I", kv, len(key))[0] == U32:
            value = struct.unpack_from("<I", kv, len(key) + 4)[0]
            return value if value > 0 else None
    return None


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: the 256 single-byte tokens of a byte-level BPE vocabulary."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


TINY = dict(n_embd=16, n_head=2, n_head_kv=1, n_ff=32, n_layer=2, n_ctx=256)
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def build_tiny(path: str | Path, seed: int = 0) -> Path:
    """A llama-architecture model of ~40 KB with a byte-level BPE vocabulary: it loads and chats in ms."""
    import numpy as np
    from gguf import GGUFWriter, TokenType

    rng = np.random.default_rng(seed)
    n_embd, n_head, n_head_kv, n_ff, n_layer, n_ctx = (
        TINY[k] for k in ("n_embd", "n_head", "n_head_kv", "n_ff", "n_layer", "n_ctx")
    )
    head_dim = n_embd // n_head
    tokens = _byte_tokens() + ["hi", "Ġh", "Ġhi", "<|im_start|>", "<|im_end|>"]
    types = [TokenType.NORMAL] * (len(tokens) - 2) + [TokenType.CONTROL] * 2
    writer = GGUFWriter(str(path), "llama")
    writer.add_name("tiny")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(["h i", "Ġ h", "Ġh i"])
    writer.add_bos_token_id(len(tokens) - 2)
    writer.add_eos_token_id(len(tokens) - 1)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML)

    def weight(*shape: int) -> Any:
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(len(tokens), n_embd))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(n_head * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(n_embd, n_head * head_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)
