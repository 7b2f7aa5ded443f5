"""A corpus of real chat templates, fetched for the tests and never committed.

llama-cpp-python's sdist vendors llama.cpp, whose models/templates/ holds the chat templates of
~70 real models (Llama 3.x, Qwen 2.5/3, QwQ, DeepSeek R1/V3, Gemma, Phi, Mistral, GLM, MiniMax,
Nemotron, Granite, Kimi, gpt-oss, ...). `pip download` fetches the sdist from PyPI once; the
templates are extracted into a cache that later runs reuse. The embedded SmolLM2 GGUF adds its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from tests.support.locks import cache_lock

SDIST = "llama-cpp-python==0.3.36"
TEMPLATES_IN_SDIST = "vendor/llama.cpp/models/templates/"


def cache_dir() -> Path:
    """LLMCLI_TEST_CACHE, else ~/.cache/llmcli-tests: shared by every checkout, so it downloads once."""
    root = os.environ.get("LLMCLI_TEST_CACHE") or Path.home() / ".cache" / "llmcli-tests"
    return Path(root)


def corpus_templates() -> dict[str, str]:
    """{template file name: template source}, downloading and extracting on the first call."""
    target = cache_dir() / f"templates-{SDIST.replace('==', '-')}"
    if not (target / ".complete").exists():
        with cache_lock(cache_dir(), f".{target.name}.lock"):
            if not (target / ".complete").exists():  # not made by another process while this one waited
                _extract(target)
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(target.glob("*.jinja"))}


def _extract(target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                SDIST,
                "--no-deps",
                "--no-binary",
                ":all:",
                "--quiet",
                "-d",
                tmp,
            ],
            check=True,
            timeout=900,
        )
        (sdist,) = Path(tmp).glob("*.tar.gz")
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                name = member.name.split("/", 1)[-1]
                if member.isfile() and name.startswith(TEMPLATES_IN_SDIST) and name.endswith(".jinja"):
                    data = tar.extractfile(member).read()
                    (target / Path(name).name).write_bytes(data)
    (target / ".complete").write_text(SDIST)


def gguf_template(path: str) -> str:
    """tokenizer.chat_template of a GGUF, read with gguf-py (no model load)."""
    from gguf import GGUFReader

    field = GGUFReader(path).fields["tokenizer.chat_template"]
    return bytes(field.parts[field.data[0]]).decode("utf-8")
