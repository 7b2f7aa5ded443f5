"""The converter's exceptions: each one is a UsageError (exit 2) or a RuntimeFailure (exit 1).

Messages are one line and name the fix, as everywhere in llmcli.
"""

from __future__ import annotations

from llmcli.errors import BadModelFile, RuntimeFailure, UsageError


class NotACheckpoint(UsageError):
    """SRC is not a Hugging Face model folder (no config.json, no weights, no tokenizer)."""


class UnsupportedArchitecture(UsageError):
    """config.json names an architecture we have no family module for."""


class UnsafeCheckpoint(UsageError):
    """Only pickle weights: loading them can run arbitrary code, so we refuse."""


class BadCheckpoint(BadModelFile):
    """A safetensors file, config.json or tokenizer file that is malformed or inconsistent."""


class UnsupportedTokenizer(UsageError):
    """A tokenizer llama.cpp would split differently from Hugging Face: refused, never guessed."""


class ConversionFailed(RuntimeFailure):
    """The input was fine but writing the output failed (full disk, quantizer error)."""


def shown(value: object, limit: int = 60) -> str:
    """Untrusted text (a tensor name, a config value) as it may appear in a one-line message."""
    text = value if isinstance(value, str) and value.isprintable() else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
