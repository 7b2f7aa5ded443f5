from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.convert.fixtures import build_gemma_spm, build_spm, build_tiny, embedded_gguf, train_sentencepiece
from tests.support.locks import shared_by_workers

FAMILIES = ("llama", "qwen2", "qwen3", "phi3", "gemma3", "gemma2")


@pytest.fixture(scope="session")
def smol_hf(tmp_path_factory) -> Path:
    """The embedded SmolLM2 exported to an HF checkpoint (f32: the Q4_1 values exactly)."""
    from llmcli.convert.export_hf import export_gguf_to_hf

    return shared_by_workers(
        tmp_path_factory, "smol_hf", lambda out: export_gguf_to_hf(embedded_gguf(), out, "f32")
    )


@pytest.fixture(scope="session")
def tiny(tmp_path_factory, smol_hf):
    """tiny(family) -> the family's tiny bf16 checkpoint, built once per session."""
    built: dict[str, Path] = {}

    def get(family: str) -> Path:
        if family not in built:
            # The folder name becomes general.name, and llama.cpp gives models named "*phi3*" the
            # token attributes of Phi-3's SentencePiece vocabulary ("</s>" must exist), which this
            # byte-level fixture does not have: so the folder is not called phi3.
            folder = "tiny_phi_mini" if family == "phi3" else f"tiny_{family}"
            # Once per run, for all the workers (seconds of torch each).
            built[family] = shared_by_workers(
                tmp_path_factory, folder, lambda out: build_tiny(family, smol_hf, out)
            )
        return built[family]

    return get


@pytest.fixture(scope="session")
def gemma3_hf(gemma3_path) -> Path:
    """Gemma 3 270M as transformers 5 saves it, made once per machine from the test GGUF (tests/assets.py)."""
    from tests.assets import gemma3_270m_hf

    return gemma3_270m_hf()


@pytest.fixture(scope="session")
def gemma_spm(tmp_path_factory) -> Path:
    """A tiny Gemma 3; transformers 5 saved its Gemma-style SentencePiece tokenizer as tokenizer.json only."""
    return build_gemma_spm(tmp_path_factory.mktemp("tiny_gemma_spm"))


@pytest.fixture(scope="session")
def spm_model(tmp_path_factory) -> Path:
    """A tiny Llama-2-style SentencePiece tokenizer.model, trained here (in milliseconds)."""
    return train_sentencepiece(tmp_path_factory.mktemp("spm") / "tokenizer.model")


@pytest.fixture(scope="session")
def spm_tiny(tmp_path_factory, spm_model):
    """spm_tiny("llama" | "mistral") -> a tiny bf16 checkpoint with that SentencePiece tokenizer."""
    built: dict[str, Path] = {}

    def get(model_type: str) -> Path:
        if model_type not in built:
            built[model_type] = build_spm(
                model_type, spm_model, tmp_path_factory.mktemp(f"tiny_spm_{model_type}")
            )
        return built[model_type]

    return get


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """converted(src, outtype) -> a GGUF converted once per (checkpoint, outtype)."""
    from llmcli.convert import convert_checkpoint

    done: dict[tuple[Path, str], Path] = {}

    def get(src: Path, outtype: str) -> Path:
        if (src, outtype) not in done:
            out = tmp_path_factory.mktemp("gguf") / f"{src.name}-{outtype}.gguf"
            convert_checkpoint(src, out, outtype)
            done[src, outtype] = out
        return done[src, outtype]

    return get


def llama(path: Path, **kw):
    import llama_cpp

    # An f32 KV cache: llama.cpp's default f16 cache alone adds ~1e-6 NMSE, the size of the bound.
    return llama_cpp.Llama(
        str(path),
        n_ctx=256,
        n_threads=2,
        verbose=False,
        type_k=llama_cpp.GGML_TYPE_F32,
        type_v=llama_cpp.GGML_TYPE_F32,
        **kw,
    )


def greedy_tokens(llm, prompt: bytes = b"Once upon a time", n: int = 8) -> list[int]:
    """The first n greedy tokens llama.cpp generates after prompt: proof a file loads and runs."""
    out: list[int] = []
    for tok in llm.generate(llm.tokenize(prompt, add_bos=True), temp=0.0, top_k=1):
        out.append(tok)
        if len(out) == n:
            break
    return out


def llama_logits(path: Path, *prompts: list[int]) -> np.ndarray | list[np.ndarray]:
    """The logits of each prompt's ids (one array for one prompt), from one load of the GGUF."""
    llm = llama(path, logits_all=True)
    out = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        out.append(np.array(llm.scores[: len(ids)], dtype=np.float64))
    return out[0] if len(prompts) == 1 else out


def hf_logits(src: Path, *prompts: list[int]) -> np.ndarray | list[np.ndarray]:
    """transformers' logits of each prompt's ids (one array for one prompt), from one load of the
    checkpoint (Gemma 3 270M in f32 takes seconds to load)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    with torch.no_grad():
        out = [model(torch.tensor([ids])).logits[0].double().numpy() for ids in prompts]
    return out[0] if len(prompts) == 1 else out


def nmse(a: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Normalised mean squared error per position."""
    return ((a - ref) ** 2).mean(-1) / (ref**2).mean(-1)
