"""SentencePiece (tokenizer.model) checkpoints, Llama 2 and Mistral style, and the 4-6 bit output types.

The fixture's tokenizer.model is trained here by sentencepiece itself, and the checkpoint is saved by
transformers 5, which writes tokenizer.json (a Metaspace BPE with byte fallback, not byte-level)
next to the tokenizer.model that the fixture copies in: the converter must take the SentencePiece path.
"""

from __future__ import annotations

import pytest

from tests.convert.conftest import greedy_tokens, hf_logits, llama, llama_logits, nmse
from tests.convert.test_parity import PROMPT
from tests.convert.test_tokenizer import CORPUS


@pytest.fixture(scope="module")
def sp(spm_model):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(spm_model))


@pytest.fixture(scope="module")
def spm_checkpoint(spm_tiny, converted):
    from transformers import AutoTokenizer

    src = spm_tiny("llama")
    return src, AutoTokenizer.from_pretrained(src), llama(converted(src, "f32"), vocab_only=True)


def test_fixture_is_what_transformers_5_saves(spm_tiny):
    import json

    src = spm_tiny("llama")
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    assert tj["model"]["type"] == "BPE" and tj["model"]["byte_fallback"]
    assert "ByteLevel" not in json.dumps([tj.get("pre_tokenizer"), tj.get("decoder")])
    assert (src / "tokenizer.model").is_file()


def test_reader_matches_sentencepiece(spm_model, sp):
    """The hand-written protobuf reader gives sentencepiece's own pieces, scores and types."""
    from llmcli.convert.spm_model import read_sentencepiece_model
    from llmcli.convert.vocab_record import BYTE, CONTROL, NORMAL, UNKNOWN

    pieces, add_dummy_prefix = read_sentencepiece_model(spm_model)
    assert add_dummy_prefix is True
    assert len(pieces) == sp.get_piece_size()
    for i, (piece, score, kind) in enumerate(pieces):
        want = (
            UNKNOWN
            if sp.is_unknown(i)
            else CONTROL
            if sp.is_control(i)
            else BYTE
            if sp.is_byte(i)
            else NORMAL
        )
        assert (piece, kind) == (sp.id_to_piece(i), want), i
        assert score == pytest.approx(sp.get_score(i), abs=0, rel=1e-7), i
    assert sum(kind == BYTE for _, _, kind in pieces) == 256


def test_reader_sees_add_dummy_prefix_off(tmp_path):
    import io

    import sentencepiece

    from llmcli.convert.spm_model import read_sentencepiece_model
    from tests.convert.fixtures import SPM_TRAINING_TEXT

    buf = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_TRAINING_TEXT.splitlines()),
        model_writer=buf,
        vocab_size=400,
        model_type="bpe",
        byte_fallback=True,
        add_dummy_prefix=False,
        num_threads=1,
        minloglevel=2,
    )
    (tmp_path / "tokenizer.model").write_bytes(buf.getvalue())
    assert read_sentencepiece_model(tmp_path / "tokenizer.model")[1] is False


def test_gguf_vocab_is_sentencepiece(spm_tiny, converted, sp):
    import gguf

    reader = gguf.GGUFReader(str(converted(spm_tiny("llama"), "f32")))

    def field(key):
        return reader.fields[key].contents()

    assert field("tokenizer.ggml.model") == "llama"
    assert field("tokenizer.ggml.tokens") == [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    assert (field("tokenizer.ggml.bos_token_id"), field("tokenizer.ggml.eos_token_id")) == (1, 2)
    assert field("tokenizer.ggml.add_bos_token") is True
    assert field("tokenizer.ggml.add_space_prefix") is True


@pytest.mark.parametrize("text", CORPUS)
def test_token_ids_match_sentencepiece_and_hf(spm_checkpoint, sp, text):
    _, hf, llm = spm_checkpoint
    got = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    # sentencepiece is Llama 2's tokenizer: llama.cpp must match it everywhere, byte fallback included.
    assert got == [sp.bos_id(), *sp.encode(text)], text
    assert llm.detokenize(got).decode("utf-8") == text
    want = hf(text).input_ids
    if want != got:
        # transformers 5's LlamaTokenizer (a Metaspace pre-tokenizer) does not prepend the dummy "▁"
        # to text that already starts with a space, so it alone differs from sentencepiece there.
        assert text.startswith(" "), f"HF differs from sentencepiece on {text!r}"
    else:
        assert got == want


def test_chat_template_renders_as_apply_chat_template(spm_checkpoint):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    _, hf, llm = spm_checkpoint
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert want.startswith("<s>[INST] <<SYS>>")
    bos = llm.detokenize([llm.token_bos()], special=True).decode()
    eos = llm.detokenize([llm.token_eos()], special=True).decode()
    formatter = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        bos_token=bos,
        eos_token=eos,
        add_generation_prompt=True,
    )
    assert formatter(messages=messages).prompt == want


@pytest.mark.parametrize("model_type", ["llama", "mistral"])
def test_f32_logits_match_transformers(model_type, spm_tiny, converted):
    import json

    from transformers import AutoTokenizer

    src = spm_tiny(model_type)
    arch = json.loads((src / "config.json").read_text())["architectures"][0]
    assert arch == {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}[model_type]
    ids = AutoTokenizer.from_pretrained(src)(PROMPT).input_ids
    assert ids[0] == 1 and any(i >= 259 for i in ids)  # bos, then real pieces past the byte tokens
    got, ref = llama_logits(converted(src, "f32"), ids), hf_logits(src, ids)
    err = nmse(got, ref)
    assert err.max() < 1e-6, f"{model_type}: NMSE per position {err}"
    assert (got.argmax(-1) == ref.argmax(-1)).all()


# outtype -> (general.file_type, the types the 2-D weights may have, the largest relative error of a
# dequantized matrix against the f32 conversion). The fixture's rows are whole 256-wide super-blocks,
# so llama.cpp's K-quant mixes apply without unaligned fallbacks. Measured errors: q4_0 7.5e-3
# (token_embd and output stay Q8_0: 3e-5), q5_k_m 1.3e-3, q6_k 3.2e-4. Logits are no sharp check
# here: a random network amplifies 4-6 bit rounding (q4_0 logits NMSE ~0.5 where f32 is ~1e-11).
QUANTS = {
    "q4_0": ("MOSTLY_Q4_0", {"Q4_0", "Q8_0"}, 1.2e-2),
    "q5_k_m": ("MOSTLY_Q5_K_M", {"Q5_K", "Q6_K"}, 2.5e-3),
    "q6_k": ("MOSTLY_Q6_K", {"Q6_K"}, 6e-4),
}


@pytest.mark.parametrize("outtype", list(QUANTS))
def test_quantized_outtypes_load_and_generate(outtype, spm_tiny, converted):
    import gguf
    import numpy as np

    src = spm_tiny("llama")
    path = converted(src, outtype)
    ftype, allowed, max_err = QUANTS[outtype]
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType[ftype]
    matrices = {t.name: t for t in reader.tensors if len(t.shape) > 1}
    assert {t.tensor_type.name for t in matrices.values()} <= allowed
    assert matrices["blk.0.attn_q.weight"].tensor_type.name == sorted(allowed)[0]

    # The quantized bytes decode to the weights of the f32 conversion (proven against transformers).
    f32 = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(converted(src, "f32"))).tensors}
    assert set(f32) == {t.name for t in reader.tensors}
    for name, t in matrices.items():
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(f32[name].shape)
        err = ((got - f32[name]) ** 2).mean() / (f32[name] ** 2).mean()
        assert err < max_err, (
            f"{outtype}: {name} ({t.tensor_type.name}) dequantizes with relative error {err:.1e}"
        )

    llm = llama(path)
    out = greedy_tokens(llm)
    assert len(out) == 8 and all(0 <= t < llm.n_vocab() for t in out)


def _copy_tokenizer(src, dst, names=("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
    dst.mkdir()
    for name in names:
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_tokenizer_json_without_tokenizer_model_is_a_clear_error(spm_tiny, tmp_path):
    from llmcli.convert.errors import UnsupportedTokenizer
    from llmcli.convert.vocab import load_vocab

    src = _copy_tokenizer(
        spm_tiny("llama"), tmp_path / "no-model", ("tokenizer.json", "tokenizer_config.json")
    )
    with pytest.raises(UnsupportedTokenizer, match="copy tokenizer.model"):
        load_vocab(src, n_rows=512)


def test_tokenizer_model_alone_adds_bos(spm_tiny, tmp_path):
    """Older checkpoints have only tokenizer.model (no tokenizer.json): Llama's bos default holds."""
    from llmcli.convert.vocab import load_vocab

    src = _copy_tokenizer(
        spm_tiny("llama"), tmp_path / "model-only", ("tokenizer.model", "tokenizer_config.json")
    )
    vocab = load_vocab(src, n_rows=512)
    assert vocab.model == "llama" and vocab.add_bos is True and vocab.add_eos is False
    assert (vocab.special["bos"], vocab.special["eos"], vocab.special["unk"]) == (1, 2, 0)


def test_added_tokens_and_padding_rows(spm_tiny, tmp_path):
    """A token added past the SentencePiece pieces (Llama 2's <pad> style) and embedding rows beyond it."""
    import json

    from llmcli.convert.vocab import CONTROL, UNUSED, load_vocab

    src = _copy_tokenizer(spm_tiny("llama"), tmp_path / "added")
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tj["added_tokens"].append(
        {
            "id": 512,
            "content": "<pad>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
    )
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    vocab = load_vocab(src, n_rows=520)
    assert len(vocab.tokens) == 520 and vocab.tokens[512] == "<pad>" and vocab.types[512] == CONTROL
    assert vocab.types[513:] == [UNUSED] * 7 and vocab.n_padding == 7
    assert vocab.tokens[259] != "[PAD259]" and vocab.types[259] != UNUSED
