"""Choosing files from a repo listing: quant tags, the default and its fallbacks, split GGUFs, safetensors."""

from __future__ import annotations

import pytest

from llmcli.errors import UsageError
from llmcli.hub.choose import RemoteFile, choose_gguf, choose_safetensors
from llmcli.hub.errors import NothingToPull, QuantNotFound
from llmcli.hub.spec import parse_spec, quant_tag


def files(*names: str) -> list[RemoteFile]:
    return [RemoteFile(name=n, size=100) for n in names]


@pytest.mark.parametrize(
    ("filename", "tag"),
    [
        ("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"),
        ("Llama-3.2-1B-Instruct-Q8_0.gguf", "Q8_0"),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"),
        ("gemma-3-4b-it-UD-Q4_K_XL.gguf", "UD-Q4_K_XL"),
        ("Phi-3-mini-4k-instruct-IQ4_XS.gguf", "IQ4_XS"),
        ("model-bf16.gguf", "BF16"),
        ("model-fp16.gguf", "F16"),
        ("Qwen2.5-7B-Instruct-Q4_K_M-00001-of-00002.gguf", "Q4_K_M"),
        ("Q8_0/Big-Model-Q8_0-00002-of-00003.gguf", "Q8_0"),
        ("Qwen2.5-7B-Instruct.gguf", None),
    ],
)
def test_quant_tag_is_read_from_the_file_name(filename: str, tag: str | None) -> None:
    assert quant_tag(filename) == tag


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", None)),
        ("Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m", ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "q4_k_m")),
        ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q8_0", ("bartowski/Llama-3.2-1B-Instruct-GGUF", "Q8_0")),
        (
            "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
            ("HuggingFaceTB/SmolLM2-135M-Instruct", None),
        ),
    ],
)
def test_spec_parses_repo_and_optional_quant(spec: str, expected: tuple[str, str | None]) -> None:
    assert parse_spec(spec) == expected


@pytest.mark.parametrize("spec", ["just-a-name", "a/b/c", "", ":Q4_K_M"])
def test_a_spec_that_is_not_a_repo_is_a_usage_error(spec: str) -> None:
    with pytest.raises(UsageError, match="OWNER/NAME"):
        parse_spec(spec)


REPO = files("README.md", "m-Q8_0.gguf", "m-Q4_K_M.gguf", "m-Q2_K.gguf", "m-F16.gguf", "mmproj-m-f16.gguf")


def test_without_a_tag_q4_k_m_is_picked_and_said() -> None:
    tag, parts, note = choose_gguf(REPO, None)
    assert (tag, [p.name for p in parts]) == ("Q4_K_M", ["m-Q4_K_M.gguf"])
    assert note is not None and "picked Q4_K_M" in note and "Q8_0" in note


def test_tag_matches_case_insensitively() -> None:
    tag, parts, note = choose_gguf(REPO, "q8_0")
    assert (tag, [p.name for p in parts], note) == ("Q8_0", ["m-Q8_0.gguf"], None)


def test_without_q4_k_m_the_nearest_sensible_quant_is_picked() -> None:
    # A bit more precision before less, and full precision only as the last resort.
    assert choose_gguf(files("m-Q8_0.gguf", "m-Q2_K.gguf", "m-F16.gguf"), None)[0] == "Q8_0"
    assert choose_gguf(files("m-Q8_0.gguf", "m-Q5_K_M.gguf", "m-Q3_K_M.gguf"), None)[0] == "Q5_K_M"
    assert choose_gguf(files("m-F16.gguf", "m-BF16.gguf"), None)[0] == "F16"
    tag, _, note = choose_gguf(files("m-Q8_0.gguf", "m-Q4_0.gguf"), None)
    assert tag == "Q4_0" and "no Q4_K_M here; picked Q4_0" in note


def test_a_missing_tag_lists_what_the_repo_has() -> None:
    with pytest.raises(QuantNotFound, match=r"no Q3_K_S GGUF in this repo; it has: Q4_K_M, Q8_0, Q2_K, F16"):
        choose_gguf(REPO, "Q3_K_S")


def test_vision_projectors_are_never_chosen_as_the_model() -> None:
    with pytest.raises(QuantNotFound):
        choose_gguf(REPO, "mmproj-m-f16.gguf")
    assert choose_gguf(files("mmproj-f16.gguf", "m-F16.gguf"), None)[1][0].name == "m-F16.gguf"


def test_every_part_of_a_split_gguf_is_chosen_in_order() -> None:
    listing = files(
        "m-Q4_K_M.gguf",
        "Q8_0/m-Q8_0-00002-of-00003.gguf",
        "Q8_0/m-Q8_0-00001-of-00003.gguf",
        "Q8_0/m-Q8_0-00003-of-00003.gguf",
    )
    tag, parts, _ = choose_gguf(listing, "Q8_0")
    assert tag == "Q8_0"
    assert [p.name for p in parts] == [f"Q8_0/m-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]


def test_a_split_gguf_missing_a_part_is_refused() -> None:
    with pytest.raises(NothingToPull, match="incomplete"):
        choose_gguf(files("m-Q8_0-00001-of-00003.gguf", "m-Q8_0-00003-of-00003.gguf"), "Q8_0")


def test_unsloth_dynamic_quants_match_with_or_without_ud_prefix() -> None:
    listing = files("m-UD-Q4_K_XL.gguf", "m-Q8_0.gguf")
    assert choose_gguf(listing, "Q4_K_XL")[0] == "UD-Q4_K_XL"
    assert choose_gguf(listing, "ud-q4_k_xl")[0] == "UD-Q4_K_XL"
    assert choose_gguf(listing, None)[0] == "UD-Q4_K_XL"


def test_safetensors_selection_takes_what_conversion_needs_and_never_pickles() -> None:
    listing = files(
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "consolidated.safetensors",
        "pytorch_model.bin",
        "training_args.bin",
        "model.pt",
        "README.md",
        "onnx/model.onnx",
        "original/model.safetensors",
        ".gitattributes",
    )
    chosen = [f.name for f in choose_safetensors(listing)]
    assert chosen == [
        "config.json",
        "generation_config.json",
        "chat_template.jinja",
        "tokenizer.json",
        "tokenizer_config.json",
        "model.safetensors.index.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


def test_a_repo_with_only_pickles_has_nothing_to_convert() -> None:
    assert choose_safetensors(files("config.json", "pytorch_model.bin")) == []
