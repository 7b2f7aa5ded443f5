"""Gemma 3: a real checkpoint as transformers 5 saves it, converted and checked
against transformers, and the Gemma-specific config checks.

The real checkpoint is Gemma 3 270M, made from the test GGUF by transformers itself (tests/assets.py):
f32 safetensors, config.json with layer_types and rope_parameters per layer type, and tokenizer.json
without tokenizer.model. The tiny random Gemma 3 of the other converter tests (fixtures.py) covers
the output types, a sliding window shorter than the prompt and linear rope on the full layers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmcli.errors import ExitStatus
from tests.convert.conftest import hf_logits, llama, llama_logits, nmse
from tests.convert.test_bad_inputs import assert_clean_error, copy_checkpoint
from tests.convert.test_tokenizer import CORPUS
from tests.support.cli import cli
from tests.support.gguf_layout import f32_tensor, metadata, read_layout
from tests.support.locks import shared_by_workers

PROMPTS = [
    "The capital of France is Paris. The capital of Germany is",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
    "<start_of_turn>user\nWhat is 17 times 23?<end_of_turn>\n<start_of_turn>model\n",
    "Die Katze sitzt auf der Matte. 猫はマットの上に座っています。 Le chat est assis sur le tapis.",
]
# What Gemma's 262k vocabulary is for: many scripts, and its own whitespace and markup tokens.
MULTILINGUAL = [
    "Привет, как дела? Это тест.",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "안녕하세요 세계",
    "Γειά σου Κόσμε",
    "Tiếng Việt có dấu",
    "שלום עולם",
    "<start_of_turn>user\nhi<end_of_turn>\n",
    "<table><tr><td>x</td></tr></table>",
    "a  b   c    d",
    "ﬁ ﬀ Å Å",
    "\u200b zero width",
    "tab\tand\r\nCRLF",
    "x" * 300,
    "👍🏽 👨‍👩‍👧",
    "\x00\x01 control",
]
# The bar: at least as close as llama.cpp's own converter on this checkpoint. Its f32 GGUF
# has the same tensors byte for byte as llmcli's, so both measure NMSE max 1.7e-6 (mean 1.6e-7) here.
MAX_NMSE = 1e-5


@pytest.fixture(scope="module")
def gemma3_f32(tmp_path_factory, gemma3_hf):
    """The 270M checkpoint converted to f32 once per run, for all the workers (half a minute each)."""
    from llmcli.convert import convert_checkpoint

    def convert(folder):
        convert_checkpoint(gemma3_hf, folder / "gemma3-270m-f32.gguf", "f32")

    return shared_by_workers(tmp_path_factory, "gemma3-270m-f32", convert) / "gemma3-270m-f32.gguf"


def test_checkpoint_is_what_transformers_5_saves(gemma3_hf):
    config = json.loads((gemma3_hf / "config.json").read_text())
    tj = json.loads((gemma3_hf / "tokenizer.json").read_text(encoding="utf-8"))
    assert not (gemma3_hf / "tokenizer.model").exists()
    assert tj["model"]["type"] == "BPE" and tj["model"]["byte_fallback"] is True
    assert len(tj["model"]["vocab"]) == 262144
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert set(config["rope_parameters"]) == {"full_attention", "sliding_attention"}
    assert "rope_theta" not in config and len(config["layer_types"]) == config["num_hidden_layers"]


def test_logits_match_transformers(gemma3_hf, gemma3_f32):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gemma3_hf)
    prompts = [tok(prompt).input_ids for prompt in PROMPTS]
    # Each model loaded once for all the prompts (llama.cpp's cache is cleared between them).
    refs, gots = hf_logits(gemma3_hf, *prompts), llama_logits(gemma3_f32, *prompts)
    for prompt, ref, got in zip(PROMPTS, refs, gots, strict=True):
        err = nmse(got, ref)
        assert err.max() < MAX_NMSE, f"{prompt!r}: NMSE per position {err}"
        assert (got.argmax(-1) == ref.argmax(-1)).all(), prompt


@pytest.fixture(scope="module")
def gemma3_tokenizers(gemma3_hf, gemma3_f32):
    """transformers' tokenizer and llama.cpp's on the converted file, each loaded once (262k tokens)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gemma3_hf), llama(gemma3_f32, vocab_only=True)


@pytest.mark.parametrize("special", [False, True], ids=["text", "with-special-tokens"])
def test_token_ids_match_hf(gemma3_tokenizers, special):
    hf, llm = gemma3_tokenizers
    for text in CORPUS + MULTILINGUAL + PROMPTS:
        want = hf(text, split_special_tokens=not special).input_ids
        assert llm.tokenize(text.encode("utf-8"), add_bos=True, special=special) == want, repr(text)


def test_gguf_keys_follow_the_config(gemma3_hf, gemma3_f32):
    from safetensors import safe_open

    config = json.loads((gemma3_hf / "config.json").read_text())
    layout = read_layout(gemma3_f32)  # gguf-py's GGUFReader takes half a minute over 262k tokens
    written = metadata(layout)

    def key(name):
        return written[name]

    assert key("general.architecture") == "gemma3"
    assert key("gemma3.attention.sliding_window") == config["sliding_window"]
    assert key("gemma3.attention.sliding_window_pattern") == [
        t == "sliding_attention" for t in config["layer_types"]
    ]
    assert key("gemma3.rope.freq_base") == config["rope_parameters"]["full_attention"]["rope_theta"]
    assert key("gemma3.rope.freq_base_swa") == config["rope_parameters"]["sliding_attention"]["rope_theta"]
    assert key("tokenizer.ggml.model") == "llama" and key("tokenizer.ggml.add_space_prefix") is False
    assert key("tokenizer.ggml.add_bos_token") is True
    tensors = {t.name for t in layout.tensors}
    assert (
        "token_embd.weight" in tensors and "output.weight" not in tensors
    )  # tied: llama.cpp reuses token_embd
    with safe_open(str(gemma3_hf / "model.safetensors"), "np") as f:
        for hf_name, name in [
            ("model.norm.weight", "output_norm.weight"),
            ("model.layers.3.self_attn.q_norm.weight", "blk.3.attn_q_norm.weight"),
            ("model.layers.3.pre_feedforward_layernorm.weight", "blk.3.ffn_norm.weight"),
        ]:
            np.testing.assert_array_equal(f32_tensor(layout, name), f.get_tensor(hf_name) + 1, err_msg=name)


# -- the existing families in transformers 5's config form ---------------------------------------


@pytest.mark.parametrize("family, theta", [("llama", 10000.0), ("qwen2", 1000000.0)])
def test_transformers_5_rope_parameters_are_read(tiny, converted, family, theta):
    """The tiny fixtures are saved by transformers 5: rope_theta lives only inside rope_parameters."""
    config = json.loads((tiny(family) / "config.json").read_text())
    assert "rope_theta" not in config and config["rope_parameters"]["rope_theta"] == theta
    if family == "qwen2":
        assert set(config["layer_types"]) == {"full_attention"}
    assert read_layout(converted(tiny(family), "f16")).values[f"{family}.rope.freq_base"] == theta


# -- bad Gemma configs: one line, exit 2 ------------------------------------------------------------
# In this process, through the CLI's error boundary (tests/convert/test_bad_inputs.py runs convert as a
# child): a child per case only repeated the interpreter's start.


def _rope(full=None, sliding=None):
    return {
        "full_attention": full or {"rope_type": "default", "rope_theta": 1e6},
        "sliding_attention": sliding or {"rope_type": "default", "rope_theta": 1e4},
    }


BAD_CONFIGS = {
    "query scale llama.cpp does not use": (
        {"query_pre_attn_scalar": 256},
        ("query_pre_attn_scalar is 256", "1/sqrt(16)"),
    ),
    "attention soft-capping": ({"attn_logit_softcapping": 50.0}, ("attn_logit_softcapping",)),
    "negative final soft-capping": ({"final_logit_softcapping": -1}, ("final_logit_softcapping is -1",)),
    "layer_types too short": ({"layer_types": ["full_attention"]}, ("layer_types", "2 names")),
    "layer_types unknown kind": (
        {"layer_types": ["full_attention", "chunked_attention"]},
        ("chunked_attention",),
    ),
    "layer_types a string": ({"layer_types": "full_attention"}, ("layer_types",)),
    "rope without full_attention": (
        {"rope_parameters": {"sliding_attention": {"rope_theta": 1e4}}},
        ("no full_attention",),
    ),
    "rope with an unknown layer type": ({"rope_parameters": {**_rope(), "chunked": {}}}, ("'chunked'",)),
    "rope entry not an object": (
        {"rope_parameters": _rope(full=[1])},
        ("rope_parameters.full_attention", "not an object"),
    ),
    "rope theta a string": (
        {"rope_parameters": _rope(full={"rope_theta": "big"})},
        ("rope_parameters.full_attention", "rope_theta is 'big'"),
    ),
    "scaled sliding rope": (
        {"rope_parameters": _rope(sliding={"rope_type": "linear", "factor": 2.0})},
        ("sliding_attention", "full-attention layers only"),
    ),
    "yarn on the full layers": (
        {
            "rope_parameters": _rope(
                full={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
            )
        },
        ("'yarn'", "Gemma3ForCausalLM"),
    ),
    "no sliding_window": ({"sliding_window": None}, ("no sliding_window",)),
    "zero sliding_window": ({"sliding_window": 0}, ("sliding_window is 0",)),
    "other activation": ({"hidden_activation": "relu"}, ("hidden_activation 'relu'",)),
    "embedding model": ({"use_bidirectional_attention": True}, ("use_bidirectional_attention",)),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_gemma_config_is_one_line_exit_2(tiny, tmp_path, case):
    change, phrases = BAD_CONFIGS[case]
    src = copy_checkpoint(tiny("gemma3"), tmp_path / "ckpt")
    config = json.loads((src / "config.json").read_text())
    config.update(change)
    (src / "config.json").write_text(json.dumps(config))
    out = tmp_path / "out.gguf"
    assert_clean_error(cli("convert", str(src), "-o", str(out), time_limit=60), ExitStatus.USAGE, *phrases)
    assert not out.exists()


GEMMA2_BAD = {
    "no attention soft-cap": (
        {"attn_logit_softcapping": None},
        ("attn_logit_softcapping is not set", "always soft-caps"),
    ),
    "untied output": ({"tie_word_embeddings": False}, ("tie_word_embeddings is false",)),
    "scaled rope": (
        {"rope_parameters": {"rope_type": "linear", "factor": 2.0}},
        ("'linear'", "Gemma2ForCausalLM"),
    ),
}


@pytest.mark.parametrize("case", list(GEMMA2_BAD))
def test_bad_gemma2_config_is_one_line_exit_2(tiny, tmp_path, case):
    change, phrases = GEMMA2_BAD[case]
    src = copy_checkpoint(tiny("gemma2"), tmp_path / "ckpt")
    config = json.loads((src / "config.json").read_text())
    config.update(change)
    (src / "config.json").write_text(json.dumps(config))
    assert_clean_error(
        cli("convert", str(src), "-o", str(tmp_path / "out.gguf"), time_limit=60),
        ExitStatus.USAGE,
        *phrases,
    )


# -- a Gemma tokenizer trained here, saved as tokenizer.json alone ----------------------------------


@pytest.fixture(scope="module")
def gemma_spm_checkpoint(gemma_spm, converted):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(gemma_spm), converted(gemma_spm, "f32")


def test_trained_tokenizer_is_tokenizer_json_only(gemma_spm):
    tj = json.loads((gemma_spm / "tokenizer.json").read_text(encoding="utf-8"))
    assert not (gemma_spm / "tokenizer.model").exists()
    assert tj["model"]["byte_fallback"] is True and tj["normalizer"]["type"] == "Replace"


@pytest.mark.parametrize("special", [False, True], ids=["text", "with-special-tokens"])
def test_trained_tokenizer_ids_match_hf(gemma_spm_checkpoint, special):
    hf, path = gemma_spm_checkpoint
    llm = llama(path, vocab_only=True)
    for text in CORPUS + MULTILINGUAL + PROMPTS:
        want = hf(text, split_special_tokens=not special).input_ids
        assert llm.tokenize(text.encode("utf-8"), add_bos=True, special=special) == want, repr(text)


def test_trained_tokenizer_checkpoint_logits_match(gemma_spm, gemma_spm_checkpoint):
    hf, path = gemma_spm_checkpoint
    ids = hf(PROMPTS[0]).input_ids
    ref, got = hf_logits(gemma_spm, ids), llama_logits(path, ids)
    assert nmse(got, ref).max() < 1e-6
    assert (got.argmax(-1) == ref.argmax(-1)).all()


def _edit_tokenizer(src, edit):
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    edit(tj)
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")


BAD_TOKENIZERS = {
    "a byte token missing": (
        lambda tj: tj["model"]["vocab"].pop("<0x41>"),
        ("byte fallback", "255 of the 256"),
    ),
    "merge of unknown pieces": (
        lambda tj: tj["model"]["merges"].append(["zq", "qz"]),
        ("merge 'zq qz'", "not in the vocabulary"),
    ),
    "merge of numbers": (lambda tj: tj["model"].update(merges=[[1, 2]]), ("merge [1, 2]", "not a pair")),
    "merges a string": (lambda tj: tj["model"].update(merges="a b"), ("model.merges must be a list",)),
    # Llama 2's form (a dummy prefix) is not one llama.cpp is known to split the same way: refused.
    "another normalizer": (
        lambda tj: tj.update(
            normalizer={
                "type": "Sequence",
                "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, tj["normalizer"]],
            }
        ),
        ("copy tokenizer.model",),
    ),
}


@pytest.mark.parametrize("case", list(BAD_TOKENIZERS))
def test_bad_gemma_tokenizer_json_is_one_line_exit_2(gemma_spm, tmp_path, case):
    edit, phrases = BAD_TOKENIZERS[case]
    src = copy_checkpoint(gemma_spm, tmp_path / "ckpt")
    _edit_tokenizer(src, edit)
    out = tmp_path / "out.gguf"
    assert_clean_error(cli("convert", str(src), "-o", str(out), time_limit=60), ExitStatus.USAGE, *phrases)
    assert not out.exists()


def test_transformers_4_config_form_writes_the_same_keys(tiny, converted, tmp_path):
    """Gemma 3 configs on the Hub predate layer_types/rope_parameters: rope_theta, rope_local_base_freq,
    rope_scaling and sliding_window_pattern say the same, and must give the same GGUF."""
    tf5 = tiny("gemma3")
    src = copy_checkpoint(tf5, tmp_path / "tf4_form")
    config = json.loads((src / "config.json").read_text())
    del config["layer_types"], config["rope_parameters"]
    config.update(
        rope_theta=1e6,
        rope_local_base_freq=1e4,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
        sliding_window_pattern=2,
    )
    (src / "config.json").write_text(json.dumps(config))

    def keys(path):
        return {k: v for k, v in metadata(read_layout(path)).items() if k.startswith("gemma3.")}

    want = keys(converted(tf5, "f16"))
    assert want["gemma3.rope.scaling.factor"] == 8.0 and want["gemma3.rope.freq_base_swa"] == 1e4
    assert keys(converted(src, "f16")) == want
