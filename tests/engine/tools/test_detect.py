"""The tool-call form is read from the chat template: llama.cpp's corpus of real templates."""

from __future__ import annotations

import pytest

from llmcli.engine.tools import detect
from tests.corpus import corpus_templates

# Every template of the corpus that shows a known form; all the others must fall back to generic.
KNOWN = {
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",  # Llama 3.1 inside, Hermes calls
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "Qwen-Qwen3-0.6B.jinja": "hermes",
    "Qwen-QwQ-32B.jinja": "hermes",
    "Bielik-11B-v3.0-Instruct.jinja": "hermes",
    "MiMo-VL.jinja": "hermes",
    "Reka-Edge.jinja": "hermes",
    "ibm-granite-granite-4.0.jinja": "hermes",
    "ibm-granite-granite-4.1.jinja": "hermes",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": "mistral",
    "unsloth-mistral-Devstral-Small-2507.jinja": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512.jinja": "mistral",
    "meetkai-functionary-medium-v3.2.jinja": "functionary",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3",
}
# Templates that name a marker of a known form but write another: they must not be taken for it.
LOOKALIKES = (
    "Qwen3-Coder.jinja",  # <tool_call><function=…> XML
    "GLM-4.6.jinja",  # <tool_call>name<arg_key>…
    "unsloth-Apriel-1.5.jinja",  # <tool_calls>[…]</tool_calls>
    "meetkai-functionary-medium-v3.1.jinja",  # <|python_tag|>, but <function=name>{…}</function>
)


@pytest.fixture(scope="module")
def templates() -> dict[str, str]:
    return corpus_templates()


def test_each_template_of_the_corpus_gets_the_form_it_shows(templates):
    assert set(KNOWN) <= set(templates), "the corpus lost a template this test names"
    got = {name: detect(source).name for name, source in templates.items()}
    assert {name: form for name, form in got.items() if form != "generic"} == KNOWN


@pytest.mark.parametrize("name", LOOKALIKES)
def test_a_template_with_another_form_behind_a_known_marker_is_generic(templates, name):
    assert detect(templates[name]).name == "generic"


def test_a_template_without_tools_is_generic():
    assert detect("{% for m in messages %}{{ m.content }}{% endfor %}").name == "generic"
