"""The GGUF header is validated in Python before llama.cpp sees the file."""

from __future__ import annotations

import struct

import pytest

from llmcli.errors import BadModelFile
from llmcli.gguf_check import model_facts, read_header
from llmcli.gguf_check.rules import KEY_RULES, U32_MAX
from tests.fuzz.gguf_files import ARR, DROP, F32, I32, STR, U32, assemble, build_tiny, layout, rewrite
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


@pytest.mark.parametrize(
    "data,match",
    [
        (b"PK\x03\x04" + b"\0" * 40, "not a GGUF"),
        (_header(0, 0, version=99), "version 99"),
        (_header(2**40, 0), "tensors"),
        (_header(0, 1) + struct.pack("<Q", 2**50), "string of"),
        (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<I", 77), "unknown value type"),
        (_header(0, 1) + struct.pack("<Q", 1) + b"k" + struct.pack("<IIQ", 9, 4, 2**40), "array of"),
        (_header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<I", 9), "dimensions"),
        (
            _header(1, 0) + struct.pack("<Q", 1) + b"t" + struct.pack("<IQIQ", 1, 32, 0, 1 << 30),
            "outside the file",
        ),
    ],
)
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


# -- the table of what llama.cpp asserts on (llmcli.gguf_check.rules) ------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


def mutate(tiny, tmp_path, changes):
    return rewrite(tiny, tmp_path / "mutated.gguf", changes)


def test_the_tiny_model_passes_every_rule(tiny):
    facts = model_facts(tiny)
    assert (facts.n_layer, facts.n_head, facts.n_head_kv, facts.vocab_size) == (2, 2, 1, 261)


def _wrong_type(rule):
    return (U32, 1) if rule.type in (STR, ARR) else (STR, "1")


@pytest.mark.parametrize("rule", KEY_RULES, ids=lambda r: r.key)
def test_every_key_of_the_wrong_type_is_refused_by_name(tiny, tmp_path, rule):
    key = rule.key.format(arch="llama")
    with pytest.raises(BadModelFile, match=f"\\({key.replace('.', '[.]')} is an? .*, expected "):
        read_header(mutate(tiny, tmp_path, {key: _wrong_type(rule)}))


RANGED = [r for r in KEY_RULES if r.type == U32 and (r.low > 0 or r.high < U32_MAX)]


@pytest.mark.parametrize("rule", RANGED, ids=lambda r: r.key)
def test_every_number_out_of_its_range_is_refused(tiny, tmp_path, rule):
    key = rule.key.format(arch="llama")
    value = rule.low - 1 if rule.low > 0 else rule.high + 1
    with pytest.raises(BadModelFile, match=f"{key.replace('.', '[.]')} is {value:.0f}"):
        read_header(mutate(tiny, tmp_path, {key: (U32, int(value))}))


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"llama.block_count": (U32, 3)}, "llama.block_count is 3, but the file has tensors for 2 layers"),
        ({"llama.attention.head_count": (U32, 0)}, "head_count is 0, but the file has attention tensors"),
        ({"llama.attention.head_count": (U32, 3)}, "head_count_kv [(]1[)] does not divide|rope"),
        ({"llama.attention.head_count_kv": (U32, 0)}, "head_count_kv is 0, expected a uint32 .* in 1"),
        ({"llama.attention.head_count": (ARR, [2, 2, 2], U32)}, "has 3 items for 2 layers"),
        ({"llama.attention.head_count_kv": (ARR, [1, -1], I32)}, "head_count_kv is \\[1, -1\\]"),
        ({"llama.embedding_length": (U32, 1)}, "embedding_length [(]1[)] is smaller than"),
        ({"llama.rope.dimension_count": (U32, 7)}, "rope.dimension_count is 7, expected an even number"),
        ({"llama.rope.freq_base": (F32, float("nan"))}, "rope.freq_base is nan"),
        ({"llama.expert_count": (U32, 4)}, "expert_used_count is 0 with 4 experts"),
        (
            {
                "llama.expert_count": (U32, 8),
                "llama.expert_used_count": (U32, 2),
                "llama.expert_group_count": (U32, 3),
            },
            "expert_group_count [(]3[)] must divide",
        ),
        ({"llama.nextn_predict_layers": (U32, 3)}, "nextn_predict_layers [(]3[)] is above"),
        (
            {"tokenizer.ggml.token_type": (ARR, [1, 1], I32)},
            "token_type has 2 items, expected one per token [(]261[)]",
        ),
        ({"tokenizer.ggml.eos_token_id": (U32, 261)}, "eos_token_id is 261, expected a token id below 261"),
        ({"tokenizer.ggml.tokens": (ARR, [], STR)}, "tokenizer.ggml.tokens is empty"),
        (
            {"tokenizer.ggml.tokens": (ARR, ["a", "b"] * 130 + ["c"], STR)},
            "tokenizer.ggml.tokens repeats 258 of its 261 tokens, expected each once",
        ),
        ({"tokenizer.ggml.model": (STR, "no_vocab")}, "'no_vocab', expected a string, one of"),
        ({"tokenizer.ggml.model": DROP}, "tokenizer.ggml.model is missing"),
        ({"llama.block_count": DROP}, "llama.block_count is missing"),
        ({"general.architecture": (STR, "llama\nx")}, "general.architecture is 'llama\\\\nx', expected"),
        ({"general.alignment": (U32, 48)}, "general.alignment is 48, expected .* a power of two"),
        ({"general.alignment": (U32, 128)}, "at offset 16704 is not a multiple of general.alignment 128"),
    ],
)
def test_keys_that_disagree_are_refused(tiny, tmp_path, changes, match):
    with pytest.raises(BadModelFile, match=match) as raised:
        read_header(mutate(tiny, tmp_path, changes))
    assert "\n" not in str(raised.value)


def test_empty_tokens_count_as_distinct(tiny, tmp_path):
    """llama.cpp renames an empty token "[EMPTY_i]", so two of them are not a repeat."""
    tokens = ["", ""] + [f"t{i}" for i in range(259)]
    assert read_header(mutate(tiny, tmp_path, {"tokenizer.ggml.tokens": (ARR, tokens, STR)}))


def test_per_layer_arrays_of_the_right_length_pass(tiny, tmp_path):
    path = mutate(
        tiny,
        tmp_path,
        {"llama.attention.head_count": (ARR, [2, 2], U32), "llama.feed_forward_length": (ARR, [32, 32], I32)},
    )
    assert model_facts(path).n_head == 2


def test_sentencepiece_needs_scores_and_its_byte_tokens(tiny, tmp_path):
    with pytest.raises(
        BadModelFile, match="'llama' [(]SentencePiece[)] but tokenizer.ggml.scores is missing"
    ):
        read_header(mutate(tiny, tmp_path, {"tokenizer.ggml.model": (STR, "llama")}))
    scores = {"tokenizer.ggml.model": (STR, "llama"), "tokenizer.ggml.scores": (ARR, [0.0] * 261, F32)}
    with pytest.raises(BadModelFile, match="has 0 of the 256 byte tokens"):
        read_header(mutate(tiny, tmp_path, scores))


def _with_tensor(tiny, tmp_path, index, **fields):
    src = layout(tiny)
    data = tiny.read_bytes()[src.data_offset :]
    for key, value in fields.items():
        setattr(src.tensors[index], key, value)
    path = tmp_path / "tensors.gguf"
    path.write_bytes(assemble(list(src.kvs.values()), src.tensors, data))
    return path


def test_overlapping_tensors_are_refused(tiny, tmp_path):
    with pytest.raises(BadModelFile, match="overlaps tensor"):
        read_header(_with_tensor(tiny, tmp_path, 1, offset=0))


def test_a_tensor_past_the_end_is_refused(tiny, tmp_path):
    last = layout(tiny).tensors[-1].offset
    with pytest.raises(BadModelFile, match="lies outside the file"):
        read_header(_with_tensor(tiny, tmp_path, -1, offset=last + 4096))


def test_repeated_tensor_names_are_refused(tiny, tmp_path):
    with pytest.raises(BadModelFile, match="too long or repeated"):
        read_header(_with_tensor(tiny, tmp_path, 1, name=b"token_embd.weight"))
