"""One server per test module (loading the model is the slow part); each module picks its flags."""

from __future__ import annotations

import pytest

from tests.support.deps import require


@pytest.fixture(scope="module")
def openai_module():
    return require("openai")


@pytest.fixture(scope="module")
def ollama_module():
    return require("ollama")
