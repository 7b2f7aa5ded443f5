"""GGUF (llama architecture) -> a Hugging Face checkpoint that transformers loads.

The reverse of the converter, behind scripts/convert/gguf_to_hf.py. The tests and benchmarks use
it for real weights and a real tokenizer without network access: the embedded SmolLM2 GGUF
becomes config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
generation_config.json. Quantized tensors are dequantized; the rope
permutation the converter applies to q/k is undone.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmcli.convert import pretokenizers
from llmcli.convert.errors import BadCheckpoint, UnsupportedArchitecture, UnsupportedTokenizer
from llmcli.errors import BadModelFile, UsageError

if TYPE_CHECKING:
    import numpy as np

# GGUF tensor name (block part as {bid}) -> HF LlamaForCausalLM name. The converter maps these
# back through gguf's TensorNameMap; the tests check the two agree.
LLAMA_NAMES: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "blk.{bid}.attn_norm.weight": "model.layers.{bid}.input_layernorm.weight",
    "blk.{bid}.attn_q.weight": "model.layers.{bid}.self_attn.q_proj.weight",
    "blk.{bid}.attn_k.weight": "model.layers.{bid}.self_attn.k_proj.weight",
    "blk.{bid}.attn_v.weight": "model.layers.{bid}.self_attn.v_proj.weight",
    "blk.{bid}.attn_output.weight": "model.layers.{bid}.self_attn.o_proj.weight",
    "blk.{bid}.ffn_norm.weight": "model.layers.{bid}.post_attention_layernorm.weight",
    "blk.{bid}.ffn_gate.weight": "model.layers.{bid}.mlp.gate_proj.weight",
    "blk.{bid}.ffn_up.weight": "model.layers.{bid}.mlp.up_proj.weight",
    "blk.{bid}.ffn_down.weight": "model.layers.{bid}.mlp.down_proj.weight",
}

# Output dtypes: name -> (safetensors dtype, how to encode a float32 array as bytes).
EXPORT_DTYPES = ("f32", "f16", "bf16")

CONTROL, USER_DEFINED = 3, 4


@dataclass
class ExportResult:
    path: Path
    n_tensors: int
    n_params: int
    dtype: str


def export_gguf_to_hf(gguf_path: Path, out_dir: Path, dtype: str = "f32") -> ExportResult:
    import gguf
    import numpy as np

    from llmcli.convert.families.base import unpermute_rope

    if dtype not in EXPORT_DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; choose one of {', '.join(EXPORT_DTYPES)}")
    try:
        reader = gguf.GGUFReader(str(gguf_path))
    except (OSError, ValueError) as exc:
        raise BadModelFile(f"cannot read {gguf_path} as GGUF ({exc}); check the file") from exc
    kv = {name: _value(field) for name, field in reader.fields.items()}
    arch = kv.get("general.architecture")
    if arch != "llama":
        raise UnsupportedArchitecture(
            f"{gguf_path.name} is a {arch} model; export supports llama-architecture GGUFs"
        )

    n_layers = kv["llama.block_count"]
    n_head = kv["llama.attention.head_count"]
    n_kv = kv.get("llama.attention.head_count_kv", n_head)
    names = {k.format(bid=b): v.format(bid=b) for k, v in LLAMA_NAMES.items() for b in range(n_layers)}

    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.name not in names:
            raise BadCheckpoint(f"{gguf_path.name} has tensor {t.name}, which export does not know")
        data = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
        data = data.reshape(tuple(int(d) for d in reversed(t.shape)))
        if t.name.endswith("attn_q.weight"):
            data = unpermute_rope(data, n_head)
        elif t.name.endswith("attn_k.weight"):
            data = unpermute_rope(data, n_kv)
        tensors[names[t.name]] = data

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tied = "lm_head.weight" not in tensors
    save_safetensors(out_dir / "model.safetensors", tensors, dtype)
    tokens = kv["tokenizer.ggml.tokens"]
    special = {k: kv.get(f"tokenizer.ggml.{k}_token_id") for k in ("bos", "eos", "unknown", "padding")}
    _write_json(out_dir / "config.json", _config(kv, tied, special, len(tokens), dtype))
    _write_json(
        out_dir / "generation_config.json",
        {
            "bos_token_id": special["bos"],
            "eos_token_id": special["eos"],
            "pad_token_id": special["padding"],
        },
    )
    _write_tokenizer(out_dir, kv, special)
    return ExportResult(
        path=out_dir, n_tensors=len(tensors), n_params=sum(int(a.size) for a in tensors.values()), dtype=dtype
    )


def _value(field: Any) -> Any:
    try:
        return field.contents()
    except Exception:  # a value gguf cannot decode is one export does not use
        return None


def _config(kv: dict, tied: bool, special: dict, n_vocab: int, dtype: str) -> dict:
    n_embd = kv["llama.embedding_length"]
    n_head = kv["llama.attention.head_count"]
    theta = float(kv.get("llama.rope.freq_base", 10000.0))
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": n_embd,
        "intermediate_size": kv["llama.feed_forward_length"],
        "num_hidden_layers": kv["llama.block_count"],
        "num_attention_heads": n_head,
        "num_key_value_heads": kv.get("llama.attention.head_count_kv", n_head),
        "head_dim": kv.get("llama.attention.key_length", n_embd // n_head),
        "max_position_embeddings": kv.get("llama.context_length", 2048),
        "rms_norm_eps": float(kv["llama.attention.layer_norm_rms_epsilon"]),
        "rope_theta": theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": theta},
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": tied,
        "vocab_size": n_vocab,
        "bos_token_id": special["bos"],
        "eos_token_id": special["eos"],
        "pad_token_id": special["padding"],
        "torch_dtype": {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}[dtype],
    }


def _write_tokenizer(out_dir: Path, kv: dict, special: dict) -> None:
    if kv.get("tokenizer.ggml.model") != "gpt2":
        raise UnsupportedTokenizer(
            "export writes byte-level BPE tokenizers only (tokenizer.ggml.model = gpt2)"
        )
    pre = pretokenizers.by_name(kv.get("tokenizer.ggml.pre") or "")
    if pre is None:
        raise UnsupportedTokenizer(
            f"export cannot write a tokenizer.json for pre-tokenizer {kv.get('tokenizer.ggml.pre')!r}; "
            f"known: {pretokenizers.supported()}"
        )
    tokens: list[str] = kv["tokenizer.ggml.tokens"]
    types: list[int] = kv["tokenizer.ggml.token_type"]
    merges: list[str] = kv.get("tokenizer.ggml.merges") or []
    add_bos = bool(kv.get("tokenizer.ggml.add_bos_token", False))
    add_eos = bool(kv.get("tokenizer.ggml.add_eos_token", False))
    added = [
        {
            "id": i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": types[i] == CONTROL,
        }
        for i, tok in enumerate(tokens)
        if types[i] in (CONTROL, USER_DEFINED)
    ]
    text = lambda tid: tokens[tid] if tid is not None else None  # noqa: E731
    bos, eos = text(special["bos"]), text(special["eos"])
    single: list[dict] = [{"Sequence": {"id": "A", "type_id": 0}}]
    if add_bos and bos:
        single.insert(0, {"SpecialToken": {"id": bos, "type_id": 0}})
    if add_eos and eos:
        single.append({"SpecialToken": {"id": eos, "type_id": 0}})
    specials = {t: {"id": t, "ids": [tokens.index(t)], "tokens": [t]} for t in {bos, eos} if t}
    post = (
        {"type": "TemplateProcessing", "single": single, "pair": single, "special_tokens": specials}
        if len(single) > 1
        else {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True}
    )
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": pre.definition,
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": pre.ignore_merges,
            "vocab": {tok: i for i, tok in enumerate(tokens)},
            "merges": [m.split(" ", 1) for m in merges],
        },
    }
    _write_json(out_dir / "tokenizer.json", tokenizer, indent=None)
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": text(special["unknown"]),
        "pad_token": text(special["padding"]),
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "clean_up_tokenization_spaces": False,
        "model_max_length": kv.get("llama.context_length", 2048),
    }
    if template := kv.get("tokenizer.chat_template"):
        config["chat_template"] = template
    _write_json(out_dir / "tokenizer_config.json", config)


def _write_json(path: Path, data: Any, indent: int | None = 2) -> None:
    path.write_text(json.dumps(data, indent=indent, ensure_ascii=False) + "\n", encoding="utf-8")


def save_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str = "f32") -> None:
    """Write float32 arrays as a safetensors file in f32, f16 or bf16 (numpy has no bf16 type)."""
    import numpy as np

    st_dtype = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]

    def encode(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float32)
        if dtype == "f32":
            return a
        if dtype == "f16":
            return a.astype(np.float16)
        # Round to nearest even on the upper 16 bits, as torch does.
        bits = a.view(np.uint32).astype(np.uint64)
        rounded = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
        return rounded.astype(np.uint16)

    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    encoded = {}
    for name in sorted(tensors):
        raw = encode(tensors[name])
        encoded[name] = raw
        header[name] = {
            "dtype": st_dtype,
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + raw.nbytes],
        }
        offset += raw.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * (-len(blob) % 8)  # the format aligns the data to 8 bytes
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)))
        fh.write(blob)
        for name in sorted(encoded):
            encoded[name].tofile(fh)
