"""HF safetensors -> GGUF, with llama.cpp's own `gguf` package, safetensors headers and numpy.

The public entry points are `convert_checkpoint` (write a GGUF) and `plan_conversion` (the dry
run: check the input, decide every tensor, write nothing). Heavy modules load on first use.
"""

from __future__ import annotations

from llmcli.convert.core import ConvertResult, convert_checkpoint
from llmcli.convert.families import ARCHITECTURES
from llmcli.convert.outtypes import OUTTYPES
from llmcli.convert.plan import ConversionPlan, PlannedTensor, plan_conversion

__all__ = [
    "ARCHITECTURES",
    "OUTTYPES",
    "ConversionPlan",
    "ConvertResult",
    "PlannedTensor",
    "convert_checkpoint",
    "plan_conversion",
]
