"""Chat templates are untrusted: they render only in the sandbox, and failures are clear errors."""

from __future__ import annotations

import pytest

from llmcli.engine.template import ChatTemplate
from llmcli.errors import TemplateError

MESSAGES = [{"role": "user", "content": "hi"}]


def test_chatml_fallback_renders():
    assert ChatTemplate(None).render(MESSAGES) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("payload", [
    # CVE-2024-34359's shape: walk from a string to os via Python internals.
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% set x = messages.append({'role': 'system'}) %}{{ x }}",
])
def test_sandbox_stops_code_execution(payload):
    with pytest.raises(TemplateError):
        ChatTemplate(payload).render(MESSAGES)


def test_syntax_error_is_a_clear_error():
    with pytest.raises(TemplateError, match="does not parse"):
        ChatTemplate("{% for m in messages %}")


def test_raise_exception_from_the_template():
    with pytest.raises(TemplateError, match="roles must alternate"):
        ChatTemplate("{{ raise_exception('roles must alternate') }}").render(MESSAGES)


def test_hf_extras_available():
    out = ChatTemplate("{{ messages | tojson }}{{ strftime_now('%Y') | length }}").render(MESSAGES)
    assert out == '[{"role": "user", "content": "hi"}]4'
