"""ModelRef: MODEL text parsed once into a store name, a GGUF path or a hub repo; the default;
the lone-argument rule.
"""

from __future__ import annotations

import pytest

from llmcli.errors import UsageError
from llmcli.model_ref import (
    EMBEDDED_NAME,
    GgufPath,
    HubRepo,
    StoreName,
    default_model_ref,
    hub_repo_ref,
    model_ref,
    names_a_model,
    parse_model_ref,
)

LONG_PROMPT = "Summarize the notes below.\nKeep it short: one/two lines at most.\n" + "word " * 200


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Org/Model:latest", HubRepo("Org/Model:latest", "Org/Model", "latest")),
        ("Org/Model-GGUF:Q4_K_M", HubRepo("Org/Model-GGUF:Q4_K_M", "Org/Model-GGUF", "Q4_K_M")),
        ("Org/Model-GGUF", HubRepo("Org/Model-GGUF", "Org/Model-GGUF", None)),
        ("hf.co/Org/Model:Q4_K_M", HubRepo("hf.co/Org/Model:Q4_K_M", "Org/Model", "Q4_K_M")),
        ("https://huggingface.co/Org/Model", HubRepo("https://huggingface.co/Org/Model", "Org/Model", None)),
        (
            "unsloth/gemma-3-4b-it-GGUF:UD-Q4_K_XL",
            HubRepo("unsloth/gemma-3-4b-it-GGUF:UD-Q4_K_XL", "unsloth/gemma-3-4b-it-GGUF", "UD-Q4_K_XL"),
        ),
        ("./x.gguf", GgufPath("./x.gguf")),
        ("models/Tiny.GGUF", GgufPath("models/Tiny.GGUF")),
        (
            "/opt/models/qwen2.5-0.5b-instruct-q4_k_m.gguf",
            GgufPath("/opt/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"),
        ),
        ("smollm2-135m-instruct", StoreName("smollm2-135m-instruct")),
        ("my-model-f16", StoreName("my-model-f16")),
        (
            "/abs/path/to/model.bin",
            StoreName("/abs/path/to/model.bin"),
        ),  # not a GGUF by name; the disk decides
        ("a/b/c", StoreName("a/b/c")),
        ("What is a KV cache?", StoreName("What is a KV cache?")),
        ("input/output: explain the difference", StoreName("input/output: explain the difference")),
        ("Org/Model: tell me a joke", StoreName("Org/Model: tell me a joke")),
        (LONG_PROMPT, StoreName(LONG_PROMPT)),
    ],
)
def test_parse_model_ref_reads_text_into_one_variant(text: str, expected: object) -> None:
    assert parse_model_ref(text) == expected


def test_the_disk_turns_an_existing_file_into_a_gguf_path_and_a_folder_away_from_a_repo(
    tmp_path, monkeypatch
) -> None:
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "model").write_text("x")
    (tmp_path / "weights.bin").write_text("x")
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "repo").mkdir()
    monkeypatch.chdir(tmp_path)
    assert model_ref("org/model") == GgufPath("org/model")  # an existing file wins over a repo id
    assert model_ref("team/repo") == StoreName("team/repo")  # a folder is not a repo either
    assert model_ref(str(tmp_path / "weights.bin")) == GgufPath(str(tmp_path / "weights.bin"))
    assert model_ref("Org/Other:latest") == HubRepo("Org/Other:latest", "Org/Other", "latest")
    assert model_ref("a/" + "b" * 400) == HubRepo("a/" + "b" * 400, "a/" + "b" * 400)  # too long for a file
    assert model_ref(LONG_PROMPT) == StoreName(LONG_PROMPT)


@pytest.mark.parametrize(
    ("env_value", "expected"),
    [
        (None, StoreName(EMBEDDED_NAME)),
        ("", StoreName(EMBEDDED_NAME)),
        ("  ", StoreName(EMBEDDED_NAME)),
        ("my-model", StoreName("my-model")),
        ("Org/Model:Q8_0", HubRepo("Org/Model:Q8_0", "Org/Model", "Q8_0")),
    ],
)
def test_the_default_model_is_llmcli_model_else_the_embedded_one(env_value, expected) -> None:
    assert default_model_ref(env_value) == expected


@pytest.mark.parametrize(
    ("text", "is_model"),
    [
        ("Org/Model:latest", True),
        ("hf.co/Org/Model:Q4_K_M", True),
        ("./x.gguf", True),
        ("my-model", True),  # in the store
        ("my-mod", False),  # a prefix names a model for -m, but a lone argument must be exact
        ("What is a KV cache?", False),
        ("input/output: explain the difference", False),
        (LONG_PROMPT, False),
    ],
)
def test_the_lone_argument_is_the_model_only_when_it_names_one(text: str, is_model: bool) -> None:
    assert names_a_model(parse_model_ref(text), {"my-model", EMBEDDED_NAME}) is is_model


def test_pull_takes_the_hub_grammar_alone() -> None:
    assert hub_repo_ref("hf.co/Org/Model:q8_0") == HubRepo("hf.co/Org/Model:q8_0", "Org/Model", "q8_0")
    with pytest.raises(UsageError, match="OWNER/NAME"):
        hub_repo_ref("just-a-name")
