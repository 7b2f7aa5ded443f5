"""Pull, then chat: the pulled files are a model llama.cpp runs, through llmcli's own chat command."""

from __future__ import annotations

from tests.conftest import run_cli
from tests.hub.conftest import GGUF_REPO, run_llmcli
from tests.hub.fake_hub import FakeHub


def test_pull_then_chat_answers(hub: FakeHub) -> None:
    pulled = run_llmcli("pull", f"{GGUF_REPO}:Q4_K_M")
    assert pulled.code == 0, pulled.stderr
    name = pulled.stdout.strip()
    r = run_cli("chat", name, "What is the capital of France? One word.", "--temp", "0", "-n", "12", "--no-stats")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "the model said nothing"


def test_a_pulled_split_gguf_loads_from_its_first_part(hub: FakeHub) -> None:
    pulled = run_llmcli("pull", f"{GGUF_REPO}:Q4_0", "--name", "split")
    assert pulled.code == 0, pulled.stderr
    r = run_cli("chat", "split", "Say hello.", "--temp", "0", "-n", "8", "--no-stats")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
