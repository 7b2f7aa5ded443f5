"""Output types, as a table: what each writes directly, and which go through llama.cpp's quantizer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OutType:
    name: str
    ftype: str  # gguf.LlamaFileType member name, written as general.file_type
    qtype: str | None  # the GGML type for 2-D weights when written directly through gguf.quants
    llama_ftype: int | None = None  # llama_ftype for llama_model_quantize (K-quants)
    bits_per_weight: float = 16.0  # for planning sizes of the K-quants


OUTTYPES: dict[str, OutType] = {
    "f32": OutType("f32", "ALL_F32", "F32", bits_per_weight=32),
    "f16": OutType("f16", "MOSTLY_F16", "F16", bits_per_weight=16),
    "bf16": OutType("bf16", "MOSTLY_BF16", "BF16", bits_per_weight=16),
    "q8_0": OutType("q8_0", "MOSTLY_Q8_0", "Q8_0", bits_per_weight=8.5),
    "q4_0": OutType("q4_0", "MOSTLY_Q4_0", "Q4_0", bits_per_weight=4.5),
    # K-quants need llama.cpp's own quantizer (importance-aware mixes per tensor), reached through
    # llama-cpp-python from an f16/bf16 intermediate file. Numbers are llama_ftype values.
    "q4_k_m": OutType("q4_k_m", "MOSTLY_Q4_K_M", None, llama_ftype=15, bits_per_weight=4.9),
    "q5_k_m": OutType("q5_k_m", "MOSTLY_Q5_K_M", None, llama_ftype=17, bits_per_weight=5.7),
    "q6_k": OutType("q6_k", "MOSTLY_Q6_K", None, llama_ftype=18, bits_per_weight=6.6),
}

# The defaults, one per way in. `convert` is handed a checkpoint to turn into a GGUF and writes f16, which
# keeps every weight (quantize later, or pick one with --outtype). `pull` of a safetensors repo stands in for
# the GGUF repo that does not exist, so it gives what `pull` of a GGUF repo gives: Q4_K_M.
CONVERT_DEFAULT = "f16"
PULL_DEFAULT = "q4_k_m"


def outtype_named(text: str) -> OutType:
    """The outtype a user named, in any case: the one validation of --outtype and of a REPO:QUANT tag."""
    from llmcli.errors import UsageError

    key = text.strip().lower()
    if key not in OUTTYPES:
        raise UsageError(f"unknown outtype {text!r}; choose one of {', '.join(OUTTYPES)}")
    return OUTTYPES[key]
