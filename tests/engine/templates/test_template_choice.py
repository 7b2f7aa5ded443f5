"""A GGUF without a template runs with its family's format: llama.cpp's built-in, as Jinja, checked
against llama.cpp's own C++ rendering of it."""

from __future__ import annotations

import ctypes

import pytest

from llmcli.engine.templates.choice import BUILTIN_TEMPLATES, choose_template, read_template_file
from llmcli.engine.templates.render import FALLBACK_TEMPLATE, ChatTemplate
from llmcli.errors import UsageError

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "  Be brief.  "},
        {"role": "user", "content": " Hi there \n"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me — über café."},
    ],
    [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
    ],
]


def llama_cpp_render(name: str, messages: list[dict], add_generation_prompt: bool) -> str:
    import llama_cpp.llama_cpp as ll

    keep = [(m["role"].encode(), m["content"].encode()) for m in messages]
    chat = (ll.llama_chat_message * len(keep))(*[ll.llama_chat_message(role=r, content=c) for r, c in keep])
    buf = ctypes.create_string_buffer(8192)
    n = ll.llama_chat_apply_template(name.encode(), chat, len(keep), add_generation_prompt, buf, len(buf))
    assert 0 < n < len(buf), f"llama.cpp does not know the built-in {name!r}"
    return buf.raw[:n].decode()


def builtin_names() -> set[str]:
    import llama_cpp.llama_cpp as ll

    out = (ctypes.c_char_p * 128)()
    n = ll.llama_chat_builtin_templates(out, 128)
    return {out[i].decode() for i in range(min(n, 128))}


@pytest.mark.parametrize("row", BUILTIN_TEMPLATES, ids=lambda r: r.name)
@pytest.mark.parametrize("conversation", range(len(CONVERSATIONS)))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_builtin_renders_as_llama_cpp_does(row, conversation, add_generation_prompt):
    assert row.name in builtin_names()
    messages = CONVERSATIONS[conversation]
    ours = ChatTemplate(row.source).render(messages, add_generation_prompt)
    assert ours == llama_cpp_render(row.name, messages, add_generation_prompt)


def test_the_choice_follows_the_order_file_model_builtin_chatml():
    every_token = lambda text: True  # noqa: E731
    no_token = lambda text: False  # noqa: E731
    assert choose_template("{{ x }}", "gemma3", every_token).origin == "model"
    gemma = choose_template(None, "gemma3", every_token)
    assert gemma.origin == "builtin" and "'gemma'" in gemma.why and "<start_of_turn>" in gemma.source
    # The format applies only when the vocabulary has its marker token.
    llama_without_headers = choose_template(None, "llama", no_token)
    assert llama_without_headers.source == FALLBACK_TEMPLATE and "ChatML" in llama_without_headers.why
    assert choose_template(None, "qwen2", every_token).origin == "fallback"


def test_a_missing_template_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="no such chat template file"):
        read_template_file(tmp_path / "nope.jinja")


def test_a_template_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.jinja"
    path.write_bytes("{{ 'caf\xe9' }}".encode("latin-1"))
    with pytest.raises(UsageError, match="not UTF-8"):
        read_template_file(path)
