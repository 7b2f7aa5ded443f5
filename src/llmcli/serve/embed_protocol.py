"""The bodies of the embedding routes, typed: OpenAI's /v1/embeddings, Ollama's /api/embed and its
legacy /api/embeddings. Each input is parsed once into `Inputs` (texts, or token ids), every bad
input a 400 naming its field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmcli.serve.protocol import Body, checked, refuse
from llmcli.usecases.embed import MAX_INPUTS


@dataclass(frozen=True)
class Inputs:
    texts: list[str] | None = None  # to tokenize
    ids: list[list[int]] | None = None  # already token ids (OpenAI's, as LangChain sends them)

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.ids or [])


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _count(n: int) -> None:
    if n == 0:
        raise refuse("must hold at least one input; an empty list embeds nothing")
    if n > MAX_INPUTS:
        raise refuse(f"holds {n:,} inputs; at most {MAX_INPUTS:,} fit one request, send them in parts")


def _texts(value: Any, ids_allowed: bool) -> Inputs:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        kinds = (
            "a string, a list of strings, token ids or lists of them"
            if ids_allowed
            else "a string or a list of strings"
        )
        raise refuse(f"must be {kinds}")
    _count(len(value))
    if all(isinstance(x, str) for x in value):
        empty = next((i for i, x in enumerate(value) if not x), None)
        if empty is not None:
            raise refuse(f"[{empty}] is an empty string; every input must hold some text")
        return Inputs(texts=list(value))
    if ids_allowed and all(_is_int(x) for x in value):
        return Inputs(ids=[list(value)])
    if ids_allowed and all(isinstance(x, list) for x in value):
        for i, ids in enumerate(value):
            if not ids:
                raise refuse(f"[{i}] is an empty list of token ids; every input must hold some")
            if not all(_is_int(t) for t in ids):
                raise refuse(f"[{i}] must be a list of integer token ids")
        return Inputs(ids=[list(ids) for ids in value])
    raise refuse(
        "must be all strings" + (", all token ids, or all lists of token ids" if ids_allowed else "")
    )


def _dimensions(value: Any) -> int:
    if not _is_int(value) or value < 1:
        raise refuse("must be a positive integer (the number of values to keep)")
    return value


def _encoding(value: Any) -> str:
    if value not in ("float", "base64"):
        raise refuse("must be float or base64")
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise refuse("must be true or false")
    return value


def _options(value: Any) -> dict:
    if not isinstance(value, dict):
        raise refuse("must be an object")
    return value


INPUT_SCHEMA = {"anyOf": [{"type": "string"}, {"type": "array"}]}
OpenAIInput = checked(lambda v: _texts(v, True), INPUT_SCHEMA, nullable=False)
OllamaInput = checked(lambda v: _texts(v, False), INPUT_SCHEMA, nullable=False)
Dimensions = checked(_dimensions, {"type": "integer", "minimum": 1})
Encoding = checked(_encoding, {"enum": ["float", "base64"]})
Flag = checked(_flag, {"type": "boolean"})
Options = checked(_options, {"type": "object"})


class EmbeddingRequest(Body):
    """OpenAI's /v1/embeddings."""

    model: str | None = None
    input: OpenAIInput
    encoding_format: Encoding = None  # None: float (the openai SDK sends base64 unless told)
    dimensions: Dimensions = None
    user: Any = None


class EmbedRequest(Body):
    """Ollama's /api/embed."""

    model: str | None = None
    input: OllamaInput
    truncate: Flag = None  # None: true, as Ollama
    dimensions: Dimensions = None
    keep_alive: Any = None
    options: Options = None


def _prompt(value: Any) -> Inputs:
    if not isinstance(value, str):
        raise refuse("must be a string")
    if not value:
        raise refuse("is empty; send some text to embed")
    return Inputs(texts=[value])


Prompt = checked(_prompt, {"type": "string"}, nullable=False)


class EmbeddingsRequest(Body):
    """Ollama's legacy /api/embeddings: one prompt, its vector unnormalized."""

    model: str | None = None
    prompt: Prompt
    keep_alive: Any = None
    options: Options = None
