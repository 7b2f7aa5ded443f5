"""A hostile chat template in a model file: one clear line and exit 2, never a crash or a hang.

One GGUF serves every case: the embedded model, copied by gguf-py's gguf_new_metadata with a
template that turns hostile according to the user's message.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.support.cli import cli_process

HOSTILE = """\
{%- set q = messages[-1].content -%}
{%- if q == 'empty' -%}{{ self._TemplateReference__context }}
{%- elif q == 'huge' -%}{{ 'a' * 10**8 }}
{%- elif q == 'loop' -%}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}
{%- elif q == 'raise' -%}{{ raise_exception('roles must alternate') }}
{%- else -%}<|im_start|>user
{{ q }}<|im_end|>
<|im_start|>assistant
{% endif -%}
"""


@pytest.fixture(scope="module")
def hostile_gguf(tmp_path_factory, embedded_path) -> str:
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "template.jinja").write_text(HOSTILE, encoding="utf-8")
    out = folder / "hostile-template.gguf"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gguf.scripts.gguf_new_metadata",
            embedded_path,
            str(out),
            "--chat-template-file",
            str(folder / "template.jinja"),
            "--force",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return str(out)


HANG_GUARD_S = 90  # a hang guard, not a speed test: each case ends in seconds


@pytest.mark.parametrize(
    "prompt, message",
    [
        ("empty", "rendered an empty prompt"),
        ("huge", "100,000,000 characters"),
        ("loop", "s of CPU and was stopped"),
        ("raise", "refused the conversation: roles must alternate"),
    ],
)
def test_hostile_template_is_one_line_and_exit_2(hostile_gguf, prompt, message):
    start = time.monotonic()
    result = cli_process("chat", hostile_gguf, "--temp", "0", "-n", "4", "-t", "1", prompt, timeout=120)
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr
    assert result.stderr.startswith("llmcli: error:") and len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
    assert time.monotonic() - start < HANG_GUARD_S  # the loop case stops at the CPU deadline


def test_the_same_model_answers_a_normal_message(hostile_gguf):
    result = cli_process("chat", hostile_gguf, "--temp", "0", "-n", "4", "-t", "1", "Say hi.")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()


def test_a_prompt_far_past_the_context_is_refused(tmp_path):
    text = "many words here " * 200_000  # 3.2 MB, about 600,000 tokens, against a 256-token context
    result = cli_process("chat", "--ctx", "256", "-t", "1", input=text)
    assert result.exit_code == 2, result.stderr
    assert "raise --ctx" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
