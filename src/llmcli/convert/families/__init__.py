"""The architecture table: Hugging Face `architectures[0]` -> the family module that converts it.

Adding an architecture is one line here and, if it differs from its relatives, one small module.
Modules are imported only when used, so `llmcli --help` never loads gguf or numpy.
"""

from __future__ import annotations

import importlib

from llmcli.convert.errors import UnsupportedArchitecture, shown

ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",  # Llama 2/3, SmolLM, TinyLlama
    "MistralForCausalLM": "llama",  # llama.cpp runs Mistral as the llama architecture
    "Qwen2ForCausalLM": "qwen2",  # Qwen2, Qwen2.5: q/k/v biases, padded vocabulary
    "Qwen3ForCausalLM": "qwen3",  # Qwen3 dense: q/k RMS norms
    "Phi3ForCausalLM": "phi3",  # Phi-3 / Phi-3.5 mini: fused qkv and gate_up
    "Gemma2ForCausalLM": "gemma2",  # Gemma 2: Gemma 3 without q/k norms, with attention soft-capping
    "Gemma3ForCausalLM": "gemma3",  # Gemma 3 text: (1+w) norms, sliding-window layers, tied embeddings
    "BertModel": "bert",  # BERT encoders (all-MiniLM, bge, e5): pooled as sentence-transformers says
}


def family_for(config: dict, where: str = "config.json"):
    """The Family instance for a parsed config.json, or UnsupportedArchitecture."""
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    if arch not in ARCHITECTURES:
        named = f"architecture {shown(arch)}" if arch else "no architecture"
        raise UnsupportedArchitecture(
            f"{where} names {named}; llmcli convert supports {', '.join(ARCHITECTURES)}"
        )
    module = importlib.import_module(f"llmcli.convert.families.{ARCHITECTURES[arch]}")
    return module.FAMILY(arch, config, where)
