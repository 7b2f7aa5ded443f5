"""The REPO[:QUANT] grammar and quant tags: pure text, no I/O.

`Org/Model-GGUF:Q4_K_M`, `hf.co/Org/Model-GGUF:q4_k_m` (Ollama's form) and a pasted
`https://huggingface.co/Org/Model` all name one repo, with an optional quant tag after ':'.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import PurePosixPath
from typing import TypeGuard

from llmcli.errors import UsageError

DEFAULT_QUANT = "Q4_K_M"
SHA_RE = re.compile(r"^[0-9a-f]{40}$")  # a git commit or blob id, as the hub writes it
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")  # an LFS object id
MAX_REPO_PATH = 1000  # characters in a file name the hub lists (git itself has no smaller limit)
MAX_PATH_PART = 255  # bytes in one folder or file name: what every common filesystem allows
MAX_REVISION = 255
REPO_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
# What may follow ':' in REPO:QUANT: one word (Q4_K_M, latest, UD-Q4_K_XL). "org/x: tell me" is a prompt.
QUANT_WORD_RE = re.compile(r"[\w.-]+")
# Prefixes people paste from a browser or from Ollama's `hf.co/...` syntax; the repo id follows.
REPO_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/", "hf.co/", "hf:")
SPLIT_RE = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
# A quant tag sits between separators near the end of a GGUF name: model-Q4_K_M.gguf, model.q8_0.gguf,
# model-UD-Q4_K_XL.gguf, model-IQ4_XS.gguf, model-bf16.gguf.
FILE_QUANT_RE = re.compile(
    r"(?:^|[-_.])((?:UD-)?(?:I?Q[1-8](?:_[A-Z0-9]+)*|TQ[12]_0|MXFP4(?:_MOE)?|BF16|FP16|F16|FP32|F32))(?=$|[-_.])",
    re.IGNORECASE,
)
QUANT_ALIASES = {"FP16": "F16", "FP32": "F32"}
# Without a tag: Q4_K_M, else the nearest sensible one. Four-bit K and I quants first, then a bit more
# precision (better quality, a little bigger) before less, and full precision only when nothing is quantized.
QUANT_PREFERENCE = (
    "Q4_K_M",
    "Q4_K_XL",
    "Q4_K_L",
    "Q4_K_S",
    "IQ4_XS",
    "IQ4_NL",
    "Q4_0",
    "Q4_1",
    "Q5_K_M",
    "Q5_K_XL",
    "Q5_K_S",
    "Q5_0",
    "Q5_1",
    "Q6_K",
    "Q6_K_XL",
    "Q8_0",
    "Q8_K_XL",
    "Q3_K_XL",
    "Q3_K_L",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "IQ3_XS",
    "IQ3_XXS",
    "MXFP4",
    "MXFP4_MOE",
    "Q2_K_XL",
    "Q2_K_L",
    "Q2_K",
    "IQ2_M",
    "IQ2_S",
    "IQ2_XS",
    "IQ2_XXS",
    "IQ1_M",
    "IQ1_S",
    "TQ2_0",
    "TQ1_0",
    "F16",
    "BF16",
    "F32",
)
# GGUFs in a model repo that are not language models: vision projectors and importance matrices.
NOT_A_MODEL = ("mmproj", "imatrix")
# What the converter reads from a transformers checkpoint, and nothing else: weights only as safetensors,
# so no pickle (*.bin, *.pt, *.pth, *.ckpt) is ever fetched.
CONVERT_INPUTS = (
    "config.json",
    "generation_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "model.safetensors.index.json",
)


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'Org/Repo-GGUF:q4_k_m' -> ('Org/Repo-GGUF', 'q4_k_m'); the quant is optional."""
    text = spec.strip()
    for prefix in REPO_PREFIXES:
        if text.lower().startswith(prefix):
            text = text[len(prefix) :]
            break
    repo_id, _, quant = text.partition(":")
    repo_id = repo_id.strip("/")
    if not REPO_RE.match(repo_id):
        raise UsageError(
            f"'{spec}' is not a Hugging Face repo; give OWNER/NAME[:QUANT], "
            "e.g. Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
        )
    return repo_id, (quant.strip() or None)


def repo_and_quant(text: str) -> tuple[str, str | None] | None:
    """(repo, quant) when `text` reads as REPO[:QUANT] with a one-word quant, else None (name or prompt)."""
    try:
        repo_id, quant = parse_spec(text)
    except UsageError:
        return None
    if quant is not None and not QUANT_WORD_RE.fullmatch(quant):
        return None
    return repo_id, quant


def quant_tag(filename: str) -> str | None:
    """The quant a GGUF's name announces ('Model-Q4_K_M-00001-of-00002.gguf' -> 'Q4_K_M'), or None."""
    stem = SPLIT_RE.sub(".gguf", PurePosixPath(filename).name)
    stem = stem[: -len(".gguf")] if stem.lower().endswith(".gguf") else stem
    matches = FILE_QUANT_RE.findall(stem)
    if not matches:
        return None
    tag = matches[-1].upper()
    return QUANT_ALIASES.get(tag, tag)


def base_tag(tag: str) -> str:
    """Unsloth's dynamic quants (UD-Q4_K_XL) answer to their plain name too."""
    return tag.removeprefix("UD-")


def preference_rank(tag: str) -> tuple[int, int, str]:
    base = base_tag(tag).upper()
    rank = QUANT_PREFERENCE.index(base) if base in QUANT_PREFERENCE else len(QUANT_PREFERENCE)
    return rank, tag.startswith("UD-"), tag


def is_repo_path(name: object, limit: int = MAX_REPO_PATH) -> TypeGuard[str]:
    """A file name as git and the hub store one: relative, '/'-separated, no '.', '..' or empty parts,
    no backslash or control character. Anything else from a server would be a path out of the cache."""
    if not isinstance(name, str) or not name or len(name) > limit or "\\" in name:
        return False
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in name):  # NUL, newlines, escapes, bad bytes
        return False
    return all(
        part not in ("", ".", "..") and len(part.encode()) <= MAX_PATH_PART for part in name.split("/")
    )


def is_revision(rev: object) -> bool:
    """A branch, a tag (both may hold '/', like refs/pr/1) or a commit sha; never a path out of refs/."""
    return is_repo_path(rev, MAX_REVISION) and not rev.startswith("-")


def is_commit(sha: object) -> bool:
    return isinstance(sha, str) and bool(SHA_RE.fullmatch(sha))  # fullmatch: `$` would let "\n" through


def is_sha256(oid: object) -> bool:
    return isinstance(oid, str) and bool(SHA256_RE.fullmatch(oid))


def repo_folder(repo_id: str) -> str:
    """The folder huggingface_hub gives a model repo in its cache."""
    return "models--" + repo_id.replace("/", "--")
