"""A SentencePiece tokenizer.model, read without sentencepiece or protobuf: a minimal reader of the
protobuf wire format, for the three fields a GGUF vocabulary needs. Untrusted input: every length is
bounds-checked.
"""

from __future__ import annotations

import struct
from pathlib import Path

from llmcli.convert import files
from llmcli.convert.errors import BadCheckpoint

MAX_SPM_BYTES = 64 * 1024 * 1024  # a tokenizer.model; real ones are under 5 MB
# SentencePiece's piece types (ModelProto.SentencePiece.Type), which gguf's TokenType numbers repeat.
NORMAL, BYTE = 1, 6


def read_sentencepiece_model(
    path: Path, root: Path | None = None
) -> tuple[list[tuple[str, float, int]], bool]:
    """(piece, score, type) for each piece, and add_dummy_prefix, from a tokenizer.model.

    A minimal reader of the protobuf wire format, for the three fields we need, so that converting
    needs neither sentencepiece nor protobuf. Untrusted input: every length is bounds-checked.
    """
    data = files.read_bytes(path, root or files.checkpoint_root(path.parent), MAX_SPM_BYTES)
    pieces: list[tuple[str, float, int]] = []
    add_dummy_prefix = True
    try:
        for fnum, value in _fields(data):
            if fnum == 1 and isinstance(value, bytes):  # ModelProto.pieces
                piece, score, kind = "", 0.0, NORMAL
                for f, v in _fields(value):
                    if f == 1 and isinstance(v, bytes):
                        piece = v.decode("utf-8")
                    elif f == 2 and isinstance(v, float):
                        score = v
                    elif f == 3 and isinstance(v, int):
                        kind = v
                pieces.append((piece, score, kind))
            elif fnum == 3 and isinstance(value, bytes):  # ModelProto.normalizer_spec
                for f, v in _fields(value):
                    if f == 3 and isinstance(v, int):  # NormalizerSpec.add_dummy_prefix
                        add_dummy_prefix = bool(v)
    except (ValueError, UnicodeDecodeError, struct.error) as exc:
        raise BadCheckpoint(
            f"{path.name} is not a valid SentencePiece model ({exc}); download it again"
        ) from exc
    if not pieces:
        raise BadCheckpoint(f"{path.name} has no pieces; download it again")
    if any(not NORMAL <= kind <= BYTE for _, _, kind in pieces):
        raise BadCheckpoint(f"{path.name} has a piece of unknown type; download it again")
    return pieces, add_dummy_prefix


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes):
    """Yield (field number, value) of one protobuf message: int, float, or bytes."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        fnum, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield fnum, value
        elif wire == 1:
            if pos + 8 > len(data):
                raise ValueError("truncated 64-bit field")
            pos += 8
        elif wire == 2:
            n, pos = _varint(data, pos)
            if pos + n > len(data):
                raise ValueError("length past the end")
            yield fnum, data[pos : pos + n]
            pos += n
        elif wire == 5:
            if pos + 4 > len(data):
                raise ValueError("truncated 32-bit field")
            yield fnum, struct.unpack("<f", data[pos : pos + 4])[0]
            pos += 4
        else:
            raise ValueError(f"unknown wire type {wire}")
