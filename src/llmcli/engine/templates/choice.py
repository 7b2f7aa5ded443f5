"""Which chat template a model runs with, and why: a file the user gave, the GGUF's own, the
built-in format of its architecture, or ChatML.

A GGUF without `tokenizer.chat_template` still has a known turn format when its family has one
(Gemma's `<start_of_turn>`, Llama 3's header tokens, Phi-3's `<|user|>`): llama.cpp keeps these
as C++ built-ins. The table below holds them as Jinja, each row checked against llama.cpp's own
`llama_chat_apply_template` by tests/engine/templates/test_template_choice.py. A row applies when the
architecture matches and the vocabulary has the format's marker token (so a `llama` GGUF gets
the Llama 3 format only if it has `<|start_header_id|>`). ChatML is the last resort.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmcli.engine.templates.render import FALLBACK_TEMPLATE
from llmcli.errors import UsageError

MAX_TEMPLATE_BYTES = 1 << 20  # the longest real templates are ~30 kB

_GEMMA = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + (message['content'] | trim) -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' + role + '\n' -}}"
    "{%- if ns.system and role != 'model' -%}"
    "{{- ns.system + '\n\n' -}}{%- set ns.system = '' -%}"
    "{%- endif -%}"
    "{{- (message['content'] | trim) + '<end_of_turn>\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}"
)
_LLAMA3 = (
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + (message['content'] | trim)"
    " + '<|eot_id|>' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}{%- endif -%}"
)
_PHI3 = (
    "{%- for message in messages -%}"
    "{{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|assistant|>\n' -}}{%- endif -%}"
)


@dataclass(frozen=True)
class BuiltinTemplate:
    name: str  # llama.cpp's name for the built-in (llama_chat_builtin_templates)
    archs: frozenset[str]  # general.architecture values it serves
    marker: str  # a token the vocabulary must have for the format to apply
    source: str


BUILTIN_TEMPLATES: tuple[BuiltinTemplate, ...] = (
    BuiltinTemplate(
        "gemma",
        frozenset({"gemma", "gemma2", "gemma3", "gemma3n", "gemma-embedding"}),
        "<start_of_turn>",
        _GEMMA,
    ),
    BuiltinTemplate("llama3", frozenset({"llama"}), "<|start_header_id|>", _LLAMA3),
    BuiltinTemplate("phi3", frozenset({"phi3"}), "<|end|>", _PHI3),
)


@dataclass(frozen=True)
class TemplateChoice:
    source: str
    origin: str  # file | model | builtin | fallback
    why: str  # one line for `show` and /show
    file: str | None = None  # the --chat-template file it was read from


def builtin_for(arch: str | None, has_token: Callable[[str], bool]) -> BuiltinTemplate | None:
    return next((row for row in BUILTIN_TEMPLATES if arch in row.archs and has_token(row.marker)), None)


def choose_template(
    own: str | None,
    arch: str | None,
    has_token: Callable[[str], bool],
    *,
    override: TemplateChoice | None = None,
) -> TemplateChoice:
    """The template to render with: --chat-template, else the GGUF's, else its family's, else ChatML."""
    if override is not None:
        return override
    if own:
        return TemplateChoice(own, "model", "the model's own (tokenizer.chat_template)")
    row = builtin_for(arch, has_token)
    if row is not None:
        return TemplateChoice(
            row.source,
            "builtin",
            f"llama.cpp's built-in '{row.name}' format for {arch}: the GGUF carries no template",
        )
    return TemplateChoice(
        FALLBACK_TEMPLATE,
        "fallback",
        f"ChatML: the GGUF carries no template and {arch or 'its architecture'} has no built-in format",
    )


def read_template_file(path: Path) -> TemplateChoice:
    """`--chat-template FILE`: UTF-8 Jinja text, bounded in size; parsed when the session opens."""
    from llmcli.fsutil import read_text_file

    text = read_text_file(
        path, what="chat template file", fix="give a Jinja chat template file", limit=MAX_TEMPLATE_BYTES
    )
    if not text.strip():
        raise UsageError(f"{path} is empty; give a Jinja chat template")
    return TemplateChoice(text, "file", f"from {path} (--chat-template)", str(path))
