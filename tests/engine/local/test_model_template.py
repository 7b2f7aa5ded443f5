"""The model's chat template, set up once for chat and serve: the choice, bos/eos, the thinking form."""

from __future__ import annotations

import pytest

from llmcli.engine.local.model_template import model_template
from llmcli.engine.templates.choice import TemplateChoice
from llmcli.errors import TemplateError


def test_the_models_own_template_renders_with_the_models_bos_and_eos_text(runtime):
    chosen = model_template(runtime)
    assert chosen.choice.origin == "model" and chosen.choice.source == runtime.chat_template
    piece = lambda token: runtime.piece(token, special=True).decode()  # noqa: E731
    assert (chosen.template.bos_token, chosen.template.eos_token) == (
        piece(runtime.bos_id),
        piece(runtime.eos_id),
    )
    assert chosen.template.bos_token and chosen.template.eos_token
    assert not chosen.thinking.parses  # SmolLM2's template has no reasoning block


def test_an_override_is_rendered_and_its_errors_name_its_file(runtime):
    source = "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"
    chosen = model_template(runtime, TemplateChoice(source, "file", "from t.jinja", "t.jinja"))
    text = chosen.template.render([{"role": "user", "content": "hi"}])
    assert text == f"{chosen.template.bos_token}[user] hi{chosen.template.eos_token}"
    broken = TemplateChoice("{% for m in messages %}", "file", "from bad.jinja", "bad.jinja")
    with pytest.raises(TemplateError, match="bad.jinja"):
        model_template(runtime, broken)
