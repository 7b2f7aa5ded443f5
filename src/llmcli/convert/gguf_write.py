"""gguf-py's GGUFWriter with its metadata arrays packed whole instead of item by item.

gguf-py packs an array through one method call and one bytearray per item: the vocabulary of a
151k-token tokenizer (its tokens, types and merges, about 600k items) took seconds to pack, at every
conversion and again for every candidate a pre-tokenizer check by behaviour writes (vocab_verify.py).
Here an array of strings, ints or floats is packed in a few calls; the bytes are gguf-py's own
(tests/convert/test_gguf_write.py compares them), and anything else goes to gguf-py unchanged.
"""

from __future__ import annotations

import struct
from itertools import chain
from typing import Any

import gguf

T = gguf.GGUFValueType
_LENGTH = struct.Struct("<Q")


def _item_type(items: list) -> Any:
    """The GGUF type gguf-py would give every item (as GGUFValueType.get_type), or None when mixed
    or not a plain string, int or float: then gguf-py packs it, or raises its own error."""
    kinds = set(map(type, items))
    if kinds == {str}:
        return T.STRING
    if all(issubclass(k, int) and not issubclass(k, bool) for k in kinds):
        return T.INT32
    if kinds == {float}:
        return T.FLOAT32
    return None


def packed_array(val: Any, sub_type: Any) -> bytes | None:
    """A little-endian GGUF array's bytes after its value type (item type, count, items), or None."""
    if not isinstance(val, list) or not val:
        return None
    item = _item_type(val)
    if item is None or (sub_type is not None and sub_type != item):
        return None
    head = struct.pack("<IQ", item, len(val))
    if item == T.STRING:
        encoded = [s.encode("utf-8") for s in val]
        lengths = map(_LENGTH.pack, map(len, encoded))
        return head + b"".join(chain.from_iterable(zip(lengths, encoded, strict=True)))
    fmt = gguf.GGUFWriter._simple_value_packing[item]
    return head + struct.pack(f"<{len(val)}{fmt}", *val)


class GGUFWriter(gguf.GGUFWriter):
    def _pack_val(self, val: Any, vtype: Any, add_vtype: bool, sub_type: Any = None) -> bytes:
        if vtype == T.ARRAY and self.endianess == gguf.GGUFEndian.LITTLE:
            packed = packed_array(val, sub_type)
            if packed is not None:
                return (struct.pack("<I", vtype) if add_vtype else b"") + packed
        return super()._pack_val(val, vtype, add_vtype, sub_type)
