import pytest


@pytest.fixture(autouse=True)
def llmcli_home(tmp_path, monkeypatch):
    """Every test gets its own store: nothing touches the user's models."""
    home = tmp_path / "llmcli-home"
    monkeypatch.setenv("LLMCLI_HOME", str(home))
    return home
