"""llama.cpp tokenizes the converted GGUF exactly as the HF tokenizer does, and renders its chat template."""

from __future__ import annotations

import pytest

from tests.convert.conftest import FAMILIES, llama

CORPUS = [
    "Hello world",
    "  leading and trailing spaces  ",
    "The year 2024 had 366 days; 3.14159 and 1,000,000.",
    "中文分词测试：今天天气很好。",
    "日本語のテキストです。カタカナとひらがな。",
    "def f(x):\n\tif x > 0:\n\t\treturn x  # tab\n\n    return -x\n",
    "emoji 🚀🦙 and 😶‍🌫️ joined ✅",
    "I've been 'told' he's there, 'RE you sure? We'Ve a'lL",
    "\n \n\n \t\t \n   \n",
    "Ünïcödé àccents — and dashes…",
]


@pytest.fixture(scope="module", params=[*FAMILIES, "smollm2"])
def checkpoint(request, tiny, smol_hf, converted):
    from transformers import AutoTokenizer

    src = smol_hf if request.param == "smollm2" else tiny(request.param)
    # Vocabulary only matters here; f16 halves what smollm2 writes.
    return request.param, AutoTokenizer.from_pretrained(src), llama(converted(src, "f16"), vocab_only=True)


@pytest.mark.parametrize("text", CORPUS)
def test_token_ids_match_hf(checkpoint, text):
    family, hf, llm = checkpoint
    want = hf(text).input_ids  # with the special tokens HF adds (bos for llama-3 style)
    got = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
    assert got == want, f"{family}: {text!r}"


def test_chat_template_renders_as_apply_chat_template(checkpoint):
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    family, hf, llm = checkpoint
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "What is 2+2?"}]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    template = llm.metadata["tokenizer.chat_template"]
    bos = llm.detokenize([llm.token_bos()], special=True).decode() if llm.token_bos() >= 0 else ""
    eos = llm.detokenize([llm.token_eos()], special=True).decode()
    formatter = Jinja2ChatFormatter(
        template=template, bos_token=bos, eos_token=eos, add_generation_prompt=True
    )
    got = formatter(messages=messages).prompt
    assert got == want, family


def test_special_token_ids_and_types(tiny, converted):
    import gguf

    from llmcli.convert.vocab import CONTROL, UNUSED

    path = converted(tiny("qwen2"), "f16")
    reader = gguf.GGUFReader(str(path))
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    eos = reader.fields["tokenizer.ggml.eos_token_id"].contents()
    assert tokens[eos] == "<|im_end|>"
    assert types[tokens.index("<|im_start|>")] == CONTROL
    # Qwen-style padding: the embedding's extra 64 rows are unused padding tokens.
    assert tokens[-1].startswith("[PAD") and types[-1] == UNUSED
    assert types[-65] != UNUSED
