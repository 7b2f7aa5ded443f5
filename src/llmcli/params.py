"""The generation parameters as one table: a row per parameter, read by everything that names one.

The chat command's options, `/set` and `/show`, the remote request body, docs/chat.md's option
table and SamplingParams' own validation all come from PARAMS, so a bound or a default is
written once. Pure data and parsing: no terminal imports (commands/options.py builds the Typer
options from these rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmcli.errors import UsageError

# llama.cpp's C API takes int32 for top_k and the penalty window and uint32 for the seed; ctypes
# silently wraps anything wider (top_k 2**32 + 5 would become 5), so the bounds stop there.
INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


@dataclass(frozen=True)
class Param:
    name: str  # the SamplingParams field, and the word /set takes
    kind: type  # int or float
    default: int | float | None
    low: int | float
    high: int | float
    help: str
    flags: tuple[str, ...] = ()  # CLI flags; none: an engine setting the user does not change
    openai: str | None = None  # an OpenAI request field: always sent (unless None)
    # Non-OpenAI request fields under the names vLLM, SGLang, llama.cpp's server or TGI accept;
    # sent only when changed from the default.
    extensions: tuple[str, ...] = ()
    none_means: str = ""  # what a None value does (seed: a fresh random one)
    also_none: int | None = None  # a value that means None too (llama.cpp's and Ollama's seed -1)

    @property
    def range_text(self) -> str:
        return f"{number_text(self.low)}..{number_text(self.high)}"

    @property
    def default_text(self) -> str:
        return self.none_means if self.default is None else number_text(self.default)

    @property
    def aliases(self) -> tuple[str, ...]:
        """The flags without dashes (`temp`, `n`, `top-p`): /set takes them too."""
        return tuple(flag.lstrip("-") for flag in self.flags)

    def check(self, value: Any) -> int | float | None:
        """The value if it fits this row, else UsageError naming the parameter and its range."""
        if self.none_means and (value is None or (value == self.also_none and type(value) is int)):
            return None
        return self._checked_number(value)

    def _checked_number(self, value: Any) -> int | float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or (self.kind is int and not isinstance(value, int))
        ):
            raise self._wrong_kind(repr(value))
        if not self.low <= value <= self.high:  # also refuses nan
            raise UsageError(f"{self.name} must be in {self.range_text}, not {number_text(value)}")
        return value

    def parse(self, text: str) -> int | float:
        """User text (a /set value) -> a checked value."""
        try:
            value = self.kind(text)
        except ValueError:
            raise self._wrong_kind(repr(text)) from None
        return self._checked_number(value)

    def _wrong_kind(self, shown: str) -> UsageError:
        kind = "an integer" if self.kind is int else "a number"
        return UsageError(f"{self.name} must be {kind} in {self.range_text}, not {shown}")


def number_text(value: int | float) -> str:
    """1.0 -> '1', 0.95 -> '0.95', 4294967295 -> '4294967295': no float noise, no exponent for ints."""
    if isinstance(value, float):
        text = repr(value)
        return text[:-2] if text.endswith(".0") else text
    return str(value)


_ROWS = [
    # Defaults are llama.cpp's own (common/common.h), so numbers compare with llama-cli.
    Param(
        "temperature",
        float,
        0.8,
        0.0,
        10.0,
        "Temperature (0 = greedy).",
        flags=("--temp",),
        openai="temperature",
    ),
    Param("top_p", float, 0.95, 0.0, 1.0, "Top-p (1 = off).", flags=("--top-p",), openai="top_p"),
    Param("top_k", int, 40, 0, INT32_MAX, "Top-k (0 = off).", flags=("--top-k",), extensions=("top_k",)),
    Param("min_p", float, 0.05, 0.0, 1.0, "Min-p (0 = off).", flags=("--min-p",), extensions=("min_p",)),
    # llama.cpp says repeat_penalty, vLLM and SGLang say repetition_penalty; each ignores the other.
    Param(
        "repeat_penalty",
        float,
        1.0,
        0.0,
        10.0,
        "Repeat penalty (1 = off).",
        flags=("--repeat-penalty",),
        extensions=("repeat_penalty", "repetition_penalty"),
    ),
    # llama.cpp allocates the penalty window up front; 2**20 tokens is wider than any context.
    Param("repeat_last_n", int, 64, 0, 2**20, "Tokens the repeat penalty looks back over (0 = off)."),
    Param(
        "seed",
        int,
        None,
        0,
        UINT32_MAX,
        "Sampling seed (-1 = random, as in llama.cpp).",
        flags=("--seed",),
        openai="seed",
        none_means="random",
        also_none=-1,
    ),
    Param(
        "max_tokens",
        int,
        1024,
        1,
        INT32_MAX,
        "Most tokens in a reply.",
        flags=("-n", "--max-tokens"),
        openai="max_tokens",
    ),
]
PARAMS: dict[str, Param] = {row.name: row for row in _ROWS}
# The rows a user sets (a flag and /set); the others are engine settings with a checked default.
USER_PARAMS: dict[str, Param] = {name: row for name, row in PARAMS.items() if row.flags}


def find(word: str) -> Param | None:
    """A /set word -> its row: a name (`top_p`) or a flag without dashes (`top-p`, `temp`, `n`)."""
    word = word.lower()
    for row in USER_PARAMS.values():
        if word == row.name or word in row.aliases:
            return row
    return None


def check_all(values: Mapping[str, Any]) -> dict[str, Any]:
    """Every row's value in `values`, checked against its range and read as its row reads it (a seed
    of -1 is None); SamplingParams keeps what this returns."""
    return {name: row.check(values[name]) for name, row in PARAMS.items()}


def request_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters as OpenAI request fields: OpenAI's own always, extensions only when changed,
    so a strict server sees a plain OpenAI request."""
    body: dict[str, Any] = {}
    for name, row in PARAMS.items():
        value = values[name]
        if row.openai and value is not None:
            body[row.openai] = value
        elif row.extensions and value != row.default:
            body.update({field: value for field in row.extensions})
    return body


def options_table(rows: Iterable[Param] | None = None) -> str:
    """The option table of docs/chat.md (tests/test_params.py checks that it holds this verbatim)."""
    lines = ["| option | default | range | what | request field |", "|---|---|---|---|---|"]
    for row in rows if rows is not None else USER_PARAMS.values():
        fields = [f"`{row.openai}`"] if row.openai else [f"`{field}` (extension)" for field in row.extensions]
        lines.append(
            f"| `{'/'.join(row.flags)}` | {row.default_text} | {row.range_text} | {row.help} "
            f"| {', '.join(fields)} |"
        )
    return "\n".join(lines)
