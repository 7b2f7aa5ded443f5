"""llmcli's GGUFWriter packs metadata arrays whole; the file it writes is gguf-py's, byte for byte."""

from __future__ import annotations

import enum
from pathlib import Path

import gguf
import pytest

from llmcli.convert.gguf_write import GGUFWriter, packed_array


class Kind(enum.IntEnum):
    NORMAL = 1
    CONTROL = 3


ARRAYS = {
    "tokens": ["a", "Ġb", "", "<|im_end|>", "éü", "🦙", "a b"],
    "types": [1, 3, Kind.CONTROL, 5, 0, -(2**31), 2**31 - 1],
    "scores": [0.0, -1000.0, 3.25, -1e-9],
    "flags": [True, False],  # not packed whole: gguf-py's own path
    "one": ["x"],
}


def written(cls: type, path: Path, arrays: dict) -> bytes:
    writer = cls(path=str(path), arch="llama")
    writer.add_string("general.name", "t")
    for key, values in arrays.items():
        writer.add_array(key, values)
    writer.add_key_value("typed", [1, 2], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.UINT32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path.read_bytes()


def test_arrays_are_written_as_gguf_py_writes_them(tmp_path):
    whole = {key for key, values in ARRAYS.items() if packed_array(values, None) is not None}
    assert whole == {"tokens", "types", "scores", "one"}  # the rest goes through gguf-py's own packing
    assert written(GGUFWriter, tmp_path / "ours.gguf", ARRAYS) == written(
        gguf.GGUFWriter, tmp_path / "theirs.gguf", ARRAYS
    )


@pytest.mark.parametrize("bad", [[1, "a"], [1, 2.5], [2**31]], ids=["str-int", "int-float", "past-int32"])
def test_an_array_gguf_py_refuses_is_refused(tmp_path, bad):
    errors = []
    for cls in (GGUFWriter, gguf.GGUFWriter):
        with pytest.raises(Exception) as refused:
            written(cls, tmp_path / f"{cls.__module__}.gguf", {"bad": bad})
        errors.append(type(refused.value))
    assert errors[0] is errors[1]
