"""GGUFs that made llama.cpp abort (SIGABRT, exit 134, a gdb backtrace on stdout) are refused first.

Each file is the embedded model with exactly one header change (tests/fuzz/gguf_files.rewrite);
before gguf_check/rules.py, `chat` on each of the first six died with SIGABRT, and the chat template
case answered with "-201" used as a template.

`chat` runs in a child, so that a file that got past the checks aborts that child and fails its test,
not the run; `show` reads only the header, in Python, and runs in this process through the CLI's
error boundary.
"""

from __future__ import annotations

import pytest

from tests.fuzz.gguf_files import ARR, DROP, F32, I32, STR, U32, rewrite
from tests.support.cli import cli, cli_process

CHAT = ("chat", "hi", "-n", "4", "-t", "1", "--seed", "1")

# name -> (header change, what the one line must say)
ABORTS = {
    "block_count_0": ({"llama.block_count": (U32, 0)}, "llama.block_count is 0, expected a uint32 in 1..512"),
    "block_count_1000": ({"llama.block_count": (U32, 1000)}, "llama.block_count is 1000"),
    "block_count_u32_max": ({"llama.block_count": (U32, 2**32 - 1)}, "llama.block_count is 4294967295"),
    "alignment_1": (
        {"general.alignment": (U32, 1)},
        "general.alignment is 1, expected a uint32 in 32..65536",
    ),
    "alignment_16": ({"general.alignment": (U32, 16)}, "general.alignment is 16"),
    "spm_model_on_bpe_vocab": (
        {"tokenizer.ggml.model": (STR, "llama")},
        "tokenizer.ggml.model is 'llama' (SentencePiece) but tokenizer.ggml.scores is missing",
    ),
    "no_vocab": (
        {"tokenizer.ggml.model": (STR, "none")},
        "tokenizer.ggml.model is 'none', expected a string, one of",
    ),
    "template_int": (
        {"tokenizer.chat_template": (I32, -201)},
        "tokenizer.chat_template is an int32, expected a string",
    ),
}

# Wrong types and ranges that `show` used to meet in Python arithmetic ("internal error: TypeError").
WRONG_TYPES = {
    "block_count_string": (
        {"llama.block_count": (STR, "thirty")},
        "llama.block_count is a string, expected a uint32",
    ),
    "heads_string": (
        {"llama.attention.head_count": (STR, "9")},
        "llama.attention.head_count is a string, expected a uint32",
    ),
    "context_float": (
        {"llama.context_length": (F32, 8192.0)},
        "llama.context_length is a float32, expected a uint32",
    ),
    "embedding_array": (
        {"llama.embedding_length": (ARR, [576], U32)},
        "llama.embedding_length is an array of uint32, expected a uint32",
    ),
    "key_length_i32": ({"llama.attention.key_length": (I32, 64)}, "llama.attention.key_length is an int32"),
    "file_type_string": ({"general.file_type": (STR, "Q4_1")}, "general.file_type is a string"),
    "architecture_int": (
        {"general.architecture": (U32, 7)},
        "general.architecture is a uint32, expected a string",
    ),
    "tokens_int_array": (
        {"tokenizer.ggml.tokens": (ARR, [1, 2], I32)},
        "tokenizer.ggml.tokens is an array of int32, expected an array of string",
    ),
    "kv_heads_not_dividing": (
        {"llama.attention.head_count_kv": (U32, 2)},
        "llama.attention.head_count_kv (2) does not divide llama.attention.head_count (9)",
    ),
    "block_count_not_matching_tensors": (
        {"llama.block_count": (U32, 29)},
        "llama.block_count is 29, but the file has tensors for 30 layers",
    ),
    "bos_out_of_range": (
        {"tokenizer.ggml.bos_token_id": (U32, 49152)},
        "tokenizer.ggml.bos_token_id is 49152, expected a token id below 49152",
    ),
    "bpe_without_merges": ({"tokenizer.ggml.merges": DROP}, "tokenizer.ggml.merges is missing"),
    "rope_scaling_unknown": ({"llama.rope.scaling.type": (STR, "warp")}, "llama.rope.scaling.type is 'warp'"),
    "experts_used_above_count": (
        {"llama.expert_count": (U32, 0), "llama.expert_used_count": (U32, 2)},
        "llama.expert_used_count (2) is above llama.expert_count (0)",
    ),
}


@pytest.fixture
def mutated(tmp_path, embedded_path):
    """The embedded model with one header change; removed after the test (each copy is ~100 MB)."""
    made = []

    def make(changes: dict) -> str:
        path = rewrite(embedded_path, tmp_path / f"mutated{len(made)}.gguf", changes)
        made.append(path)
        return str(path)

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def assert_one_line_refusal(result, message: str) -> None:
    assert result.exit_code == 2, result.stderr[-2000:]
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert lines[0].startswith("llmcli: error: ") and "is not a valid GGUF" in lines[0]
    assert message in lines[0]


def test_an_unchanged_rewrite_still_chats(mutated):
    """The control: header surgery alone keeps a model llama.cpp runs, so each case below is its change."""
    path = mutated({})
    assert cli("show", path).exit_code == 0
    result = cli_process(CHAT[0], path, *CHAT[1:])
    assert result.exit_code == 0 and result.stdout.strip(), result.stderr


@pytest.mark.parametrize("name", ABORTS)
def test_file_that_aborted_llama_cpp_is_one_line_and_exit_2(mutated, name):
    changes, message = ABORTS[name]
    path = mutated(changes)
    assert_one_line_refusal(cli("show", path), message)
    assert_one_line_refusal(cli_process(CHAT[0], path, *CHAT[1:]), message)


@pytest.mark.parametrize("name", WRONG_TYPES)
def test_show_on_a_wrong_typed_key_is_one_line_and_exit_2(mutated, name):
    changes, message = WRONG_TYPES[name]
    path = mutated(changes)
    assert_one_line_refusal(cli("show", path), message)
    assert_one_line_refusal(cli("show", path, "--json"), message)
