"""The GGUF header is validated in Python before llama.cpp sees the file."""

from __future__ import annotations

import struct

import pytest

from llmcli.errors import BadModelFile
from llmcli.gguf_check import model_facts, read_header
from tests.support.cli import cli_process


def test_embedded_model_facts(embedded_path):
    facts = model_facts(embedded_path)
    assert facts.arch == "llama" and facts.quant == "Q4_1"
    assert (facts.n_layer, facts.n_head, facts.n_head_kv, facts.head_dim_k) == (30, 9, 3, 64)
    assert facts.vocab_size == 49152 and facts.context_length == 8192
    assert facts.kv_bytes_per_token() == 2 * 30 * 3 * 64 * 2
    assert 130e6 < facts.n_params < 140e6


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


@pytest.mark.parametrize("data,match", [
    (b"PK\x03\x04" + b"\0" * 40, "not a GGUF"),
    (_header(0, 0, version=99), "version 99"),
    (_header(2**40, 0), "tensors"),
    (_header(0, 1) + struct.pack("<Q", 2**50), "string of"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 77), "unknown value type"),
    (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**40), "array of"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9), "dimensions"),
    (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 1 << 30), "outside the file"),
])
def test_hostile_headers_are_refused(tmp_path, data, match):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data + b"\0" * 64)
    with pytest.raises(BadModelFile, match=match):
        read_header(path)


@pytest.mark.parametrize("cut", [10, 30, 5000, 500_000, 50_000_000])
def test_truncated_embedded_model_is_refused(tmp_path, embedded_path, cut):
    path = tmp_path / "cut.gguf"
    with open(embedded_path, "rb") as src:
        path.write_bytes(src.read(cut))
    with pytest.raises(BadModelFile):
        read_header(path)


def test_cli_refuses_a_corrupt_gguf_without_crashing(tmp_path, embedded_path):
    path = tmp_path / "flipped.gguf"
    data = bytearray(open(embedded_path, "rb").read(2_000_000))
    path.write_bytes(bytes(data))
    result = cli_process("chat", str(path), "hi")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith("llmcli: error:") and "not a valid GGUF" in result.stderr
    assert "Traceback" not in result.stderr
