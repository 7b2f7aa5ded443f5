"""A tokenizer.json that matches no known pre-tokenizer exactly is converted only if llama.cpp gives its ids.

The vocabularies are real ones (llama.cpp's ggml-vocab-*.gguf files, see real_vocab.py): Qwen2, Llama 3,
GPT-2, MPT, GPT-NeoX, StarCoder, Refact and Command-R.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmcli.convert.check_corpus import SEEDS, check_corpus, corpus_digest
from llmcli.convert.vocab import load_vocab
from llmcli.convert.vocab_record import PRE_CHECK_KEY, PreCheck, Vocab
from llmcli.convert.vocab_verify import choose_by_behaviour
from llmcli.errors import ExitStatus
from tests.convert.conftest import llama
from tests.convert.real_vocab import REAL_VOCABS, exact_and_rewritten, tokenizer_json, write_tokenizer
from tests.convert.test_bad_inputs import assert_clean_error
from tests.support.cli import cli
from tests.support.gguf_layout import read_layout
from tests.support.locks import shared_by_workers

# The corpus as committed: a change to it must be deliberate (and changes what "verified" meant).
CORPUS_SIZE, CORPUS_DIGEST = 590, "57e2abd641e7"


def llama_header(writer) -> None:
    """The hyperparameters a vocab-only load of a llama-architecture GGUF reads."""
    writer.add_block_count(1)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)


def verify(folder: Path, tj: dict, candidates=None) -> PreCheck:
    vocab = load_vocab(write_tokenizer(folder, tj), n_rows=max(tj["model"]["vocab"].values()) + 1)
    return verify_loaded(vocab, tj, candidates or vocab.pre_candidates, folder.name)


def verify_loaded(vocab: Vocab, tj: dict, candidates, name: str) -> PreCheck:
    return choose_by_behaviour(
        vocab,
        tj,
        candidates,
        arch="llama",
        name=name,
        write_header=llama_header,
        where=f"{name}/tokenizer.json",
    )


# -- the check corpus ----------------------------------------------------------------------------


def test_check_corpus_is_fixed_and_covers_what_splitting_rules_differ_on():
    corpus = check_corpus()
    assert (len(corpus), corpus_digest()) == (CORPUS_SIZE, CORPUS_DIGEST)
    assert len(set(corpus)) == len(corpus)
    assert {"scripts", "code", "numbers", "whitespace", "emoji", "contractions", "case"} <= set(SEEDS)
    assert len(SEEDS["scripts"]) >= 25


def test_check_corpus_is_the_same_in_another_process():
    """No set or hash order leaks in: a fresh interpreter with another hash seed builds the same corpus."""
    code = "from llmcli.convert.check_corpus import corpus_digest; print(corpus_digest())"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == CORPUS_DIGEST


# -- real vocabularies ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REAL_VOCABS))
def test_real_vocabulary_is_verified_under_a_definition_written_differently(tmp_path, name):
    """The table row reproduces HF on the real vocabulary, and a rewrite of its definition finds that row."""
    row, exact, rewritten = exact_and_rewritten(name)
    vocab = load_vocab(write_tokenizer(tmp_path / "exact", exact), n_rows=len(exact["model"]["vocab"]))
    assert (vocab.pre, vocab.pre_check.verified_by) == (row, "definition")
    assert (
        verify_loaded(vocab, exact, [row], "exact-by-behaviour").pre == row
    )  # the same vocabulary, read once

    check = verify(tmp_path / "rewritten", rewritten)
    assert (check.pre, check.verified_by) == (row, "behaviour")
    assert (check.check_strings, check.corpus) == (
        CORPUS_SIZE,
        CORPUS_DIGEST,
    ) and check.check_tokens > CORPUS_SIZE


def test_llama3_vocabulary_without_ignore_merges_is_refused_on_the_first_differing_string(tmp_path):
    """Llama 3 written with "ignore_merges": false splits differently from llama.cpp's llama-bpe, which
    ignores merges: a real difference, on a Vietnamese test string of llama.cpp's own."""
    from llmcli.convert import pretokenizers
    from llmcli.convert.errors import UnsupportedTokenizer

    tj = tokenizer_json("llama-bpe", pretokenizers.by_name("llama-bpe").definition, ignore_merges=False)
    with pytest.raises(UnsupportedTokenizer) as refused:
        verify(tmp_path / "llama3", tj)
    message = str(refused.value)
    assert "\n" not in message
    assert "with the nearest, llama-bpe, the ids first differ on 'Cửa Việt'" in message
    assert "tried llama-bpe, qwen2, smollm, gpt-2" in message


# -- through the CLI, on a checkpoint with Qwen's real vocabulary --------------------------------


def build_qwen_ignore_merges(out: Path) -> None:
    """A tiny Qwen2 checkpoint with Qwen's real 151k-token vocabulary, its tokenizer saved by transformers
    with "ignore_merges": true (as transformers writes Qwen's tokenizer when it converts it from tiktoken)."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    from llmcli.convert import pretokenizers
    from tests.convert.fixtures import QWEN_TEMPLATE, SIZES

    tj = tokenizer_json("qwen2", pretokenizers.by_name("qwen2").definition, ignore_merges=True)
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tj)))
    tok.eos_token, tok.pad_token, tok.chat_template = "<|im_end|>", "<|endoftext|>", QWEN_TEMPLATE
    config = AutoConfig.for_model(
        "qwen2",
        **SIZES,
        tie_word_embeddings=True,
        vocab_size=151936,  # Qwen2.5's rows
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    written = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))
    assert written["model"]["ignore_merges"] is True and written["pre_tokenizer"] == tj["pre_tokenizer"]


@pytest.fixture(scope="module")
def qwen_ignore_merges(tmp_path_factory) -> Path:
    """Built once per run, for all the workers (tens of seconds: 151k tokens through transformers)."""
    return shared_by_workers(tmp_path_factory, "qwen_ignore_merges", build_qwen_ignore_merges)


def test_qwen_tokenizer_with_ignore_merges_converts_verified_by_behaviour(tmp_path, qwen_ignore_merges):
    from transformers import AutoTokenizer

    out = tmp_path / "qwen.gguf"
    r = cli("convert", str(qwen_ignore_merges), "-o", str(out), "-q", "f16", "--json")
    assert r.exit_code == 0, r.stderr
    corpus = f"identical ids on {CORPUS_SIZE} check strings"
    assert f"tokenizer: pre-tokenizer qwen2, verified by behaviour: {corpus}" in r.stderr
    record = json.loads(r.stdout)["tokenizer"]
    assert record == {
        "model": "gpt2",
        "pre": "qwen2",
        "verified_by": "behaviour",
        "check_strings": CORPUS_SIZE,
        "check_tokens": record["check_tokens"],
        "corpus": CORPUS_DIGEST,
        "tried": [],
    }

    written = read_layout(out).values  # gguf-py's GGUFReader takes seconds over 151k tokens
    assert written["tokenizer.ggml.pre"] == "qwen2"
    assert corpus in written[PRE_CHECK_KEY]
    # Independently of the converter's own check: transformers and llama.cpp on the written file agree.
    hf = AutoTokenizer.from_pretrained(qwen_ignore_merges)
    llm = llama(out, vocab_only=True)
    for text in check_corpus():
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == hf(text).input_ids, repr(text)


def test_dry_run_names_the_pre_tokenizer_chosen_by_behaviour(qwen_ignore_merges):
    r = cli("convert", str(qwen_ignore_merges), "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "tokenizer:     gpt2/qwen2, 151936 tokens" in r.stdout
    assert (
        f"note:          pre-tokenizer qwen2, verified by behaviour: identical ids on {CORPUS_SIZE}"
        in r.stdout
    )


def test_changed_pre_tokenizer_regex_is_refused_with_the_first_differing_string(tmp_path, qwen_ignore_merges):
    """Qwen's regex with a word's leading space or punctuation split off
    (\\p{L}+ for [^\\r\\n\\p{L}\\p{N}]?\\p{L}+): no llama.cpp pre-tokenizer splits so.

    (Grouping digits instead, \\p{N}+ for \\p{N}, is accepted as llama-bpe: Qwen's vocabulary has no
    multi-digit token, so on it the two regexes give the same ids.)"""
    src = tmp_path / "ckpt"
    shutil.copytree(qwen_ignore_merges, src)
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    split = tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]
    split["Regex"] = split["Regex"].replace(r"[^\r\n\p{L}\p{N}]?\p{L}+", r"\p{L}+")
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    out = tmp_path / "out.gguf"
    assert_clean_error(
        cli("convert", str(src), "-o", str(out)),
        ExitStatus.USAGE,
        "ckpt/tokenizer.json is not one llama.cpp reproduces",
        "the ids first differ on 'ied 4 ½ months'",
        "refusing",
    )
    assert list(tmp_path.iterdir()) == [src]
