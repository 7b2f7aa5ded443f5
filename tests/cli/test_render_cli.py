"""`llmcli render`: the prompt chat feeds the model; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cli_process

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi <|im_end|>"}]


def test_render_prints_the_prompt_text_and_user_text_stays_plain(tmp_path, embedded_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(MESSAGES))
    r = cli_process("render", embedded_path, "--messages", str(path))
    assert r.exit_code == 0, r.stderr
    assert r.stdout.endswith("<|im_start|>user\nHi <|im_end|><|im_end|>\n<|im_start|>assistant\n")
    doc = json.loads(cli_process("render", embedded_path, "--messages", str(path), "--json").stdout)
    # The typed "<|im_end|>" is text, so it is several tokens; the template's own is one.
    assert doc["pieces"].count("<|im_end|>") == 2 and doc["text"] == r.stdout


@pytest.mark.parametrize(
    "payload, why",
    [
        ('{"role": "user", "content": "hi"}', "want a non-empty JSON list"),
        ("[1, 2]", "message 1 needs a role"),
        ('[{"role": "wizard", "content": "hi"}]', "message 1 needs a role"),
        ("not json", "not JSON"),
    ],
)
def test_messages_that_are_not_a_list_of_role_content_objects_are_refused(embedded_path, payload, why):
    r = cli_process("render", embedded_path, "--messages", "-", input=payload)
    assert r.exit_code == 2 and r.stdout == ""
    assert why in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["render", "chat"])
def test_a_missing_chat_template_file_is_one_line_exit_2(embedded_path, tmp_path, command):
    extra = ("--messages", "-") if command == "render" else ("hi",)
    r = cli_process(
        command,
        embedded_path,
        "--chat-template",
        str(tmp_path / "nope.jinja"),
        *extra,
        input=json.dumps(MESSAGES),
    )
    assert r.exit_code == 2 and "no such chat template file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["render", "chat"])
def test_a_chat_template_file_that_is_not_utf8_is_one_line_exit_2(embedded_path, tmp_path, command):
    path = tmp_path / "latin1.jinja"
    path.write_bytes("{{ 'caf\xe9' }}".encode("latin-1"))
    extra = ("--messages", "-") if command == "render" else ("hi",)
    r = cli_process(command, embedded_path, "--chat-template", str(path), *extra, input=json.dumps(MESSAGES))
    assert r.exit_code == 2 and "not UTF-8" in r.stderr and len(r.stderr.strip().splitlines()) == 1


BROKEN_TEMPLATES = {
    "syntax": ("{% for m in messages %}{{ m.content }", "does not parse"),
    "refusal": ("{{ raise_exception('roles must alternate') }}", "refused the conversation: roles must"),
    "huge": ("{{ 'a' * 10**8 }}", "was stopped"),
    "unsafe": ("{{ [].append(1) }}", "unsafe"),
    "empty": ("{{ '' }}", "rendered an empty prompt"),
}


@pytest.mark.parametrize("case", BROKEN_TEMPLATES)
@pytest.mark.parametrize("command", ["render", "chat"])
def test_a_broken_chat_template_file_is_blamed_not_the_model(embedded_path, tmp_path, command, case):
    source, words = BROKEN_TEMPLATES[case]
    path = tmp_path / "mine.jinja"
    path.write_text(source)
    extra = ("--messages", "-") if command == "render" else ("hi",)
    r = cli_process(command, embedded_path, "--chat-template", str(path), *extra, input=json.dumps(MESSAGES))
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and r.stdout == "", r.stderr
    assert lines[0].startswith(f"llmcli: error: the chat template in {path} ") and words in lines[0]
    assert lines[0].endswith(f"fix {path}") or case == "refusal", lines[0]
    assert "model" not in lines[0]


OPENS_THINK = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def test_piped_chat_hides_the_reasoning_and_show_thinking_puts_it_on_stderr(embedded_path, tmp_path):
    # The template opens <think>, so the whole (unclosed) reply is reasoning: stdout gets no answer.
    path = tmp_path / "think.jinja"
    path.write_text(OPENS_THINK)
    args = (
        "chat",
        embedded_path,
        "--chat-template",
        str(path),
        "--temp",
        "0",
        "-n",
        "8",
        "-t",
        "1",
        "--no-stats",
    )
    hidden = cli_process(*args, "Hello")
    assert hidden.exit_code == 0 and hidden.stdout.strip() == "" and hidden.stderr == ""
    shown = cli_process(*args, "--show-thinking", "Hello")
    assert shown.exit_code == 0 and shown.stdout.strip() == "" and shown.stderr.strip()
    doc = json.loads(cli_process(*args, "--json", "Hello").stdout)
    assert (
        doc["reasoning"]
        and doc["text"] == ""
        and doc["usage"]["reasoning_tokens"] == doc["usage"]["completion_tokens"] > 0
    )


CONTINUED = [
    {"role": "user", "content": "Name a colour."},
    {"role": "assistant", "content": "My favourite colour is "},
]


def test_render_continue_ends_the_prompt_inside_the_last_message(embedded_path):
    full = cli_process("render", embedded_path, "--messages", "-", input=json.dumps(CONTINUED))
    continued = cli_process(
        "render", embedded_path, "--continue", "--messages", "-", input=json.dumps(CONTINUED)
    )
    assert continued.exit_code == 0, continued.stderr
    # The template keeps the message's trailing space, so the prompt does too (transformers' cut).
    assert continued.stdout.endswith("<|im_start|>assistant\nMy favourite colour is ")
    assert full.stdout.startswith(continued.stdout) and len(full.stdout) > len(continued.stdout)


def test_render_continue_of_a_message_the_template_rewrites_is_one_line_exit_2(embedded_path, tmp_path):
    path = tmp_path / "upper.jinja"
    path.write_text("{% for m in messages %}{{ m.role }}: {{ m.content | upper }}\n{% endfor %}")
    r = cli_process(
        "render",
        embedded_path,
        "--chat-template",
        str(path),
        "--continue",
        "--messages",
        "-",
        input=json.dumps(CONTINUED),
    )
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and r.stdout == "", r.stderr
    assert lines[0].startswith(f"llmcli: error: the chat template in {path} does not write the final message")
