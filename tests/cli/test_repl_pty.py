"""The REPL driven through a pseudo-terminal, as a person at a keyboard would."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.cli import REPL_PROMPT, cli_pty
from tests.support.deps import require

pexpect = require("pexpect")

PROMPT = REPL_PROMPT


@pytest.fixture
def repl(private_store):
    child = cli_pty("chat", "--temp", "0", "-n", "40", "-t", "1")
    child.expect_exact(PROMPT)
    yield child
    if child.isalive():
        child.terminate(force=True)


def test_slash_commands_a_turn_and_exit(repl, tmp_path):
    repl.sendline("/help")
    repl.expect_exact("/bye")
    repl.expect_exact(PROMPT)
    repl.sendline("/nonsense")
    repl.expect_exact("unknown command /nonsense")
    repl.expect_exact(PROMPT)
    repl.sendline("/set max_tokens 12")
    repl.expect_exact("max_tokens = 12")
    repl.expect_exact(PROMPT)
    repl.sendline("What is the capital of France?")
    repl.expect("tok/s")  # the stats panel after the reply
    repl.expect_exact(PROMPT)
    repl.sendline("/stats")
    repl.expect_exact("④ decode")
    repl.expect_exact(PROMPT)
    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 2 messages")
    repl.expect_exact(PROMPT)
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0
    messages = json.loads(saved.read_text())["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]


def test_ctrl_c_cancels_a_reply_and_keeps_the_repl(repl, tmp_path):
    repl.sendline("/set max_tokens 2000")
    repl.expect_exact("max_tokens = 2000")
    repl.expect_exact(PROMPT)
    repl.sendline("List 200 animals, one per line.")  # greedy: runs to max_tokens
    # prompt_toolkit leaves raw mode (bracketed paste off) before the reply streams; only then
    # does Ctrl-C become SIGINT rather than a typed character.
    repl.expect_exact("\x1b[?2004l")
    repl.expect(r"\w+\W+\w+\W+\w+")  # the reply has started streaming
    repl.sendintr()
    repl.expect_exact("cancelled")
    repl.expect_exact(PROMPT)
    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 2 messages")
    repl.expect_exact(PROMPT)
    last = json.loads(saved.read_text())["messages"][-1]
    assert last["role"] == "assistant" and last["cancelled"] and last["content"]
    repl.sendintr()  # on an empty line: a hint, not an exit
    repl.expect_exact("Ctrl-D")
    repl.expect_exact(PROMPT)
    repl.sendeof()
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0


def test_esc_enter_makes_one_multiline_message(repl, tmp_path):
    repl.send("first line")
    repl.send("\x1b\r")  # Esc+Enter: a newline, not a submit
    repl.send("second line\r")
    repl.expect("tok/s")
    repl.expect_exact(PROMPT)
    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 2 messages")
    repl.expect_exact(PROMPT)
    first = json.loads(saved.read_text())["messages"][0]
    assert first == {"role": "user", "content": "first line\nsecond line"}
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)


def test_a_paste_with_newlines_stays_one_message(repl, tmp_path):
    repl.send("\x1b[200~pasted one\npasted two\x1b[201~")  # bracketed paste, as terminals send it
    repl.send("\r")
    repl.expect("tok/s")
    repl.expect_exact(PROMPT)
    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 2 messages")
    first = json.loads(saved.read_text())["messages"][0]
    assert first == {"role": "user", "content": "pasted one\npasted two"}
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)


def test_markdown_mode_renders_the_reply(private_store, tmp_path):
    # A grammar makes the model's reply this exact Markdown, so what the terminal shows can be checked.
    grammar = tmp_path / "markdown.gbnf"
    grammar.write_text('root ::= "**Apples** and pears:\\n\\n- one apple\\n- two pears\\n"')
    child = cli_pty("chat", "--temp", "0", "-n", "40", "-t", "1", "--grammar", str(grammar))
    try:
        child.expect_exact(PROMPT)
        child.sendline("Fruit?")
        child.expect("tok/s")
        plain = child.before
        child.expect_exact(PROMPT)
        child.sendline("/set markdown on")
        child.expect_exact("markdown = on")
        child.expect_exact(PROMPT)
        child.sendline("Fruit?")
        child.expect("tok/s")
        rendered = child.before
        child.expect_exact(PROMPT)
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    # Markdown off: the text as written. On: redrawn as it streams, and once whole, as Markdown.
    assert "**Apples** and pears:" in plain and "- one apple" in plain and "•" not in plain
    assert "\x1b[1mApples\x1b[0m" in rendered  # bold
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", rendered)  # without the terminal's escapes
    assert "• one apple" in text and "• two pears" in text  # a list


def test_a_hostile_load_is_one_line_and_the_repl_goes_on_with_its_conversation(repl, tmp_path):
    repl.sendline("/set max_tokens 8")
    repl.expect_exact("max_tokens = 8")
    repl.expect_exact(PROMPT)
    repl.sendline("Hi.")
    repl.expect("tok/s")
    repl.expect_exact(PROMPT)
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100_000 + "]" * 100_000)  # used to end the REPL with a RecursionError
    repl.sendline(f"/load {nested}")
    repl.expect(r"llmcli: error: ([^\r\n]*)\r\n")
    assert "nested too deeply" in repl.match.group(1)
    repl.expect_exact(PROMPT)
    assert "Traceback" not in repl.before
    repl.sendline("Say hi.")
    repl.expect("tok/s")  # the next prompt is answered
    repl.expect_exact(PROMPT)
    saved = tmp_path / "conv.json"
    repl.sendline(f"/save {saved}")
    repl.expect_exact("saved 4 messages")  # the first turn survived the failed /load
    repl.expect_exact(PROMPT)
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0


def test_set_schema_validates_each_reply_and_a_failing_one_is_one_line(repl, tmp_path):
    schema = tmp_path / "person.json"
    schema.write_text(
        json.dumps(
            {
                "type": "object",
                "required": ["name", "age"],
                "properties": {
                    "name": {"type": "string", "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 130},
                },
            }
        )
    )
    repl.sendline(f"/set schema {schema}")
    repl.expect_exact(PROMPT)
    repl.sendline("/set max_tokens 3")  # stops mid-object
    repl.expect_exact(PROMPT)
    repl.sendline("Ann is 31. As JSON.")
    repl.expect_exact("llmcli: error: the reply is incomplete JSON (max tokens reached: raise -n)")
    after_error = repl.expect_exact([PROMPT, "tok/s", "Traceback"])
    assert after_error == 0  # the next prompt follows the one line: no stats, no traceback
    repl.sendline("/set max_tokens 60")
    repl.expect_exact(PROMPT)
    repl.sendline("Ann is 31. As JSON.")
    repl.expect(r'\{\s*"name"')  # streamed, then validated: the stats panel follows, no error
    assert repl.expect_exact(["tok/s", "llmcli: error"]) == 0
    repl.expect_exact(PROMPT)
    repl.sendline("/bye")
    repl.expect(pexpect.EOF)
    repl.close()
    assert repl.exitstatus == 0


def test_a_tool_call_shows_as_a_block_in_the_repl(private_store, tmp_path):
    tools = tmp_path / "tools.json"
    parameters = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}}
    tools.write_text(
        json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": parameters}}])
    )
    child = cli_pty(
        "chat", "--temp", "0", "-n", "60", "-t", "1", "--tools", str(tools), "--tool-choice", "get_weather"
    )
    try:
        child.expect_exact(PROMPT)
        child.sendline("Weather in Paris?")
        child.expect(r"→ get_weather\(\{.*\}\)  \[call_")
        child.expect_exact(PROMPT)
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        if child.isalive():
            child.terminate(force=True)
