"""One prefix-cache entry file: its format, its name, and the checks made before llama.cpp sees a byte.

    magic "LLMCLIKV" · u32 format version · u32 header length · header (JSON) ·
    u64 state length · state (llama_state_seq_get_data of sequence 0) · u32 CRC-32 of all before it

The header names the key (what makes a KV state valid: the model file's identity, the llama.cpp
version, the context and cache parameters), the token ids the state holds, when it was made, and
`binding`: a digest over the key, the tokens and the state together. The CRC says the file is whole;
the binding says these tokens belong to this state, so an entry spliced from two others (one's
header, another's state, a fresh CRC) is refused instead of answering about the wrong document.

The policy (which entries to keep, where they live) is engine.prefix_cache's; this module only
reads and writes bytes. Library code: no printing, no environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

MAGIC = b"LLMCLIKV"
FORMAT_VERSION = 2
SUFFIX = ".kv"
TEMP_PREFIX = ".tmp-"
MAX_HEADER = 32 * 2**20  # a header holds token ids as JSON: a million tokens fit well within this
MAX_TOKEN_ID = 2**31 - 1
_PREFIX = struct.Struct("<8sII")  # magic, version, header length
_STATE_LEN = struct.Struct("<Q")
_CRC = struct.Struct("<I")
OVERHEAD = _PREFIX.size + _STATE_LEN.size + _CRC.size  # an entry's bytes besides its header and state

# The only names llmcli gives its files: `<key id>-<tokens digest>.kv`, and tempfile.mkstemp's
# `.tmp-<8 characters>.kv` while one is written. Anything else in the folder is someone else's.
ENTRY_NAME = re.compile(r"[0-9a-f]{32}-[0-9a-f]{24}\.kv")
TEMP_NAME = re.compile(r"\.tmp-[a-z0-9_]{8}\.kv")


class CorruptEntry(Exception):
    """An entry file that is truncated, damaged or not an entry at all.

    `seen` is the file as it was read (its os.stat_result) when its bytes prove it can never be a
    valid entry: a remover checks the path still names that file, not one a writer renamed onto it
    since. None when the file could not be read (its bytes proved nothing).
    """

    seen: os.stat_result | None = None


class NotAnEntry(CorruptEntry):
    """A file under one of our names whose first bytes are not our magic: not ours, never removed."""


@dataclass(frozen=True)
class CacheKey:
    """Everything that changes the bytes of a KV state for the same tokens.

    n_threads is not here: the prefill's KV state is byte-identical at 1 and 2 threads (measured).
    n_batch is: the state differs between 256 and 512 (measured), as does flash attention.
    """

    model: str  # engine.model_identity.model_identity()
    llama_cpp: str  # llama_cpp.__version__: the llama.cpp vendored in it
    n_ctx: int
    n_batch: int
    n_ubatch: int
    flash_attn: int  # llama.cpp's flash_attn_type
    type_k: int  # ggml types of the KV cache
    type_v: int

    @property
    def id(self) -> str:
        text = json.dumps(asdict(self), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


@dataclass
class EntryInfo:
    """An entry as its header describes it (the state itself is read only to load it)."""

    path: Path
    key_id: str
    key: dict
    model_name: str  # what to show for the model (`llmcli cache`)
    tokens: list[int]
    created: str
    size: int  # bytes on disk
    last_used: float  # mtime: touched on every use
    binding: str = ""
    state_offset: int = 0
    state_size: int = 0
    seen: os.stat_result | None = None  # the file that was read: a remover checks it is still that one


def _packed(tokens: list[int]) -> bytes:
    return struct.pack(f"<{len(tokens)}i", *tokens)


def entry_name(key_id: str, tokens: list[int]) -> str:
    """One file name per (key, tokens): two writers of the same entry replace each other, whole."""
    digest = hashlib.sha256(_packed(tokens)).hexdigest()[:24]
    return f"{key_id[:32]}-{digest}{SUFFIX}"


def binding(key_id: str, tokens: list[int], state: bytes | bytearray | memoryview) -> str:
    """The digest that ties a state to the tokens it holds (and to its key)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(key_id.encode() + b"\0" + struct.pack("<Q", len(tokens)) + _packed(tokens))
    digest.update(state)
    return digest.hexdigest()


def encode_header(
    key: CacheKey, model_name: str, tokens: list[int], state: bytes | bytearray | memoryview
) -> bytes:
    header = {
        "key_id": key.id,
        "key": asdict(key),
        "model_name": model_name,
        "tokens": tokens,
        "n_tokens": len(tokens),
        "binding": binding(key.id, tokens, state),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return json.dumps(header, separators=(",", ":")).encode()


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_hex(size: int):
    return lambda v: isinstance(v, str) and len(v) == size and all(c in "0123456789abcdef" for c in v)


# header field -> accepts (what it must be)
HEADER_FIELDS = {
    "key_id": _is_hex(32),
    "key": lambda v: (
        isinstance(v, dict) and all(isinstance(x, str | int) and not isinstance(x, bool) for x in v.values())
    ),
    "model_name": lambda v: isinstance(v, str) and len(v) <= 4096,
    "tokens": lambda v: isinstance(v, list) and all(_is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in v),
    "n_tokens": _is_int,
    "binding": _is_hex(32),
    "created": lambda v: isinstance(v, str) and len(v) <= 64,
}


def header_length(head: bytes | bytearray) -> int:
    """How many header bytes follow the prefix (0 when `head` does not start with an entry's prefix)."""
    if len(head) < _PREFIX.size or head[: len(MAGIC)] != MAGIC:
        return 0
    return min(_PREFIX.unpack_from(head)[2], MAX_HEADER)


def parse_header(head: bytes, file_size: int, path: Path = Path("?")) -> EntryInfo:
    """The header of an entry from the file's first bytes (at least up to the state length).

    Raises NotAnEntry without our magic, CorruptEntry for anything else that is not a whole,
    well-formed header of this format.
    """
    if len(head) < len(MAGIC) or head[: len(MAGIC)] != MAGIC:
        raise NotAnEntry("not a prefix-cache entry")
    if len(head) < _PREFIX.size:
        raise CorruptEntry("shorter than an entry's header")
    _, version, header_len = _PREFIX.unpack_from(head)
    if version != FORMAT_VERSION:
        raise CorruptEntry(f"format version {version}, not {FORMAT_VERSION}")
    if header_len > MAX_HEADER:
        raise CorruptEntry(f"a header of {header_len} bytes")
    state_at = _PREFIX.size + header_len + _STATE_LEN.size
    if len(head) < state_at:
        raise CorruptEntry("truncated in its header")
    try:
        header = json.loads(head[_PREFIX.size : _PREFIX.size + header_len].decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CorruptEntry("a header that is not JSON") from exc
    if not isinstance(header, dict):
        raise CorruptEntry("a header that is not an object")
    for name, accepts in HEADER_FIELDS.items():
        if name not in header or not accepts(header[name]):
            raise CorruptEntry(f"a bad '{name}' in its header")
    if header["n_tokens"] != len(header["tokens"]):
        raise CorruptEntry("a token count that disagrees with its tokens")
    (state_size,) = _STATE_LEN.unpack_from(head, state_at - _STATE_LEN.size)
    if state_at + state_size + _CRC.size != file_size:
        raise CorruptEntry(f"{file_size} bytes where its header promises {state_at + state_size + _CRC.size}")
    return EntryInfo(
        path=path,
        key_id=header["key_id"],
        key=header["key"],
        model_name=header["model_name"],
        tokens=header["tokens"],
        created=header["created"],
        size=file_size,
        last_used=0.0,
        binding=header["binding"],
        state_offset=state_at,
        state_size=state_size,
    )


def parse_entry(data: bytes | bytearray, path: Path = Path("?")) -> tuple[EntryInfo, memoryview]:
    """A whole entry file -> its header and a view of its state, checksum and binding verified."""
    info = parse_header(bytes(data[: _PREFIX.size + header_length(data) + _STATE_LEN.size]), len(data), path)
    body = memoryview(data)[: len(data) - _CRC.size]
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise CorruptEntry("damaged (its checksum does not match)")
    state = memoryview(data)[info.state_offset : info.state_offset + info.state_size]
    if binding(info.key_id, info.tokens, state) != info.binding:
        raise CorruptEntry("a state that is not the state of its tokens (its binding does not match)")
    return info, state


def encode_entry(header: bytes, state: bytes | bytearray | memoryview) -> Iterator[bytes | memoryview]:
    """The pieces of an entry file, in order, the checksum last (streamed: the state is not copied)."""
    prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header)) + header + _STATE_LEN.pack(len(state))
    crc = zlib.crc32(state, zlib.crc32(prefix))
    yield prefix
    yield memoryview(state)
    yield _CRC.pack(crc)


def entry_size(header: bytes, state_size: int) -> int:
    return OVERHEAD + len(header) + state_size


def read_head(fd: int) -> bytes:
    """An open entry file's prefix, header and state length: what parse_header needs, no more."""
    head = os.read(fd, _PREFIX.size)
    want = _PREFIX.size + header_length(head) + _STATE_LEN.size
    while len(head) < want:
        more = os.read(fd, want - len(head))
        if not more:
            break
        head += more
    return head
