"""What the tests need installed, and what happens when it is not.

Outside CI a missing test extra or test model skips the tests that need it, with the reason. In strict
mode (LLMCLI_TEST_STRICT=1, which `make test` and so `.ci/run` set) the same thing fails instead: the
session stops at once with one line per missing extra, and `require` fails the test it is called in.
tests/allowed_skips.py lists the only skips a strict run accepts.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
from pathlib import Path
from types import ModuleType

import pytest

STRICT_VAR = "LLMCLI_TEST_STRICT"
PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"

# Each requirement of the `test` extra in pyproject.toml -> the module that proves it is installed.
# tests/test_deps.py checks that this table and the extra list the same requirements.
TEST_EXTRAS: dict[str, str] = {
    "pytest": "pytest",
    "pytest-xdist": "xdist",
    "pytest-timeout": "pytest_timeout",
    "pexpect": "pexpect",
    "transformers": "transformers",
    "torch": "torch",
    "llama-cpp-python[server]": "llama_cpp.server.app",
    "sentencepiece": "sentencepiece",
    "protobuf": "google.protobuf",
    "ruff": "ruff",
    "mypy": "mypy",
    "openai": "openai",
    "ollama": "ollama",
    "instructor": "instructor",
    "litellm": "litellm",
    "anthropic": "anthropic",
    "langchain-openai": "langchain_openai",
    "langchain-ollama": "langchain_ollama",
    "pydantic-ai-slim[openai]": "pydantic_ai",  # its openai extra is openai and tiktoken, both here anyway
    "openai-agents": "agents",
    "playwright": "playwright",
}
EXTRA_OF = {module: requirement for requirement, module in TEST_EXTRAS.items()}
INSTALL = "pip install -e '.[test]'"


def strict() -> bool:
    return os.environ.get(STRICT_VAR, "") not in ("", "0")


def missing_extras() -> list[str]:
    """One line per test extra that is not installed, naming it and the command that installs it.
    Found without importing it (torch and transformers take seconds to import)."""
    lines = []
    for requirement, module in TEST_EXTRAS.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package is missing, or the module is blocked
            found = False
        if not found:
            lines.append(f"missing test extra {requirement} (no module {module}): {INSTALL}")
    return lines


def require(module: str) -> ModuleType:
    """`module`, imported; if a test extra is missing, the test is skipped (failed in strict mode)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = EXTRA_OF.get(module) or EXTRA_OF.get(module.split(".")[0], module)
        raise unavailable(f"missing test extra {extra} ({exc}): {INSTALL}") from exc


def unavailable(reason: str) -> BaseException:
    """Something a test needs (an extra, a test model) is not here: the exception that skips the test,
    or fails it in strict mode. Raise it (`raise unavailable(...)`)."""
    if strict():
        return pytest.fail.Exception(f"{reason} [{STRICT_VAR}=1: a missing dependency fails]", pytrace=False)
    return pytest.skip.Exception(reason, allow_module_level=True)


def declared_test_extras() -> list[str]:
    """The requirement names of pyproject.toml's `test` extra, without their version bounds."""
    import tomllib

    with PYPROJECT.open("rb") as fh:
        extra = tomllib.load(fh)["project"]["optional-dependencies"]["test"]
    return [re.split(r"[<>=!~ ;]", req, maxsplit=1)[0] for req in extra]
