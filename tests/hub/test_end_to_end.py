"""Pull, then chat: the pulled files are a model llama.cpp runs, through llmcli's own chat command."""

from __future__ import annotations

import filecmp

from tests.hub.conftest import GGUF_REPO, Fixtures
from tests.hub.fake_hub import FakeHub
from tests.support.cli import cli, cli_process, cli_store


def test_pull_then_chat_answers_as_the_same_file_run_directly(hub: FakeHub, fixtures: Fixtures) -> None:
    pulled = cli("pull", f"{GGUF_REPO}:Q4_K_M")
    assert pulled.exit_code == 0, pulled.stderr
    name = pulled.stdout.strip()
    question = [
        "What is the capital of France? One word.",
        "--temp",
        "0",
        "-n",
        "12",
        "-t",
        "1",
        "--no-stats",
    ]
    by_name = cli_process("chat", name, *question)
    assert by_name.exit_code == 0, by_name.stderr
    direct = cli_process("chat", str(fixtures.quants["Q4_K_M"]), *question)
    assert direct.exit_code == 0, direct.stderr
    # The store resolved the name to the very file the hub served: greedy decoding gives the same reply.
    assert by_name.stdout.strip() and by_name.stdout == direct.stdout
    entry = {m.name: m for m in cli_store().list()}[name]
    assert filecmp.cmp(entry.path, fixtures.quants["Q4_K_M"], shallow=False)


def test_a_pulled_split_gguf_loads_from_its_first_part(hub: FakeHub) -> None:
    import llama_cpp

    pulled = cli("pull", f"{GGUF_REPO}:Q4_0", "--name", "split")
    assert pulled.exit_code == 0, pulled.stderr
    entry = {m.name: m for m in cli_store().list()}["split"]
    # llama.cpp finds parts 2..N next to part 1 by name: the snapshot folder must hold them all.
    model = llama_cpp.Llama(entry.path, n_ctx=256, verbose=False)
    try:
        text = model.create_completion("The capital of France is", max_tokens=6, temperature=0)["choices"][0][
            "text"
        ]
    finally:
        model.close()
    assert text.strip()


def test_chat_repo_colon_latest_is_a_model_to_pull_not_a_prompt(hub: FakeHub) -> None:
    # A lone `Org/Model:latest` with the prompt piped in: the argument is the MODEL, so chat asks the hub for
    # that repo (which has no 'latest' quant) instead of answering "hi\n\nOrg/Model:latest" with the
    # default model.
    r = cli_process("chat", f"{GGUF_REPO}:latest", "--no-stats", input="hi\n")
    assert (r.exit_code, r.stdout) == (2, ""), r.stderr
    assert r.stderr.splitlines()[-1].startswith("llmcli: error: no latest GGUF in this repo; it has: Q4_K_M")
    assert hub.requests("GET", f"/api/models/{GGUF_REPO}")
