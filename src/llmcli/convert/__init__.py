"""HF safetensors -> GGUF, with llama.cpp's own `gguf` package, safetensors headers and numpy.

The public entry points are `convert_checkpoint` (write a GGUF) and `plan_conversion` (the dry
run: check the input, decide every tensor, write nothing). Heavy modules load on first use, and so
does the converter itself: importing `llmcli.convert.outtypes` (for a command's --outtype help) costs nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # names for type checkers; __getattr__ loads them on first use
    from llmcli.convert.core import ConvertResult, convert_checkpoint
    from llmcli.convert.families import ARCHITECTURES
    from llmcli.convert.outtypes import OUTTYPES
    from llmcli.convert.plan import ConversionPlan, PlannedTensor, plan_conversion

_HOME = {
    "ConversionPlan": "plan",
    "ConvertResult": "core",
    "PlannedTensor": "plan",
    "convert_checkpoint": "core",
    "plan_conversion": "plan",
    "ARCHITECTURES": "families",
    "OUTTYPES": "outtypes",
}

__all__ = [  # noqa: PLE0605 (listed so the names under TYPE_CHECKING count as exported)
    "ARCHITECTURES",
    "OUTTYPES",
    "ConversionPlan",
    "ConvertResult",
    "PlannedTensor",
    "convert_checkpoint",
    "plan_conversion",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'llmcli.convert' has no attribute {name!r}")
    return getattr(import_module(f"llmcli.convert.{_HOME[name]}"), name)
