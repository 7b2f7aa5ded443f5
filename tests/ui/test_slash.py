"""The slash-command table, driven directly against a real session."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from llmcli.engine.local.chat import ChatSession
from llmcli.engine.messages import Message
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.ui.slash import SLASH_COMMANDS, ReplState, dispatch


@pytest.fixture
def state(runtime):
    runtime.clear()
    return ReplState(session=ChatSession(runtime, params=SamplingParams()), model_name="smol")


def test_help_lists_every_command(state):
    text = dispatch(state, "/help").text
    assert all(name in text for name in SLASH_COMMANDS)


def test_help_fits_an_80_column_terminal_and_names_every_setting(state):
    from llmcli.ui.slash import SETTABLE_NAMES

    text = dispatch(state, "/help").text
    assert max(len(line) for line in text.splitlines()) < 80, text
    assert all(name in text.split() or f"{name}," in text.split() for name in SETTABLE_NAMES), text


@pytest.mark.parametrize(
    "line,attr,value",
    [
        ("/set temperature 0.2", "temperature", 0.2),
        ("/set temp 0", "temperature", 0.0),
        ("/set top_p 0.5", "top_p", 0.5),
        ("/set top_k 7", "top_k", 7),
        ("/set min_p 0.1", "min_p", 0.1),
        ("/set repeat_penalty 1.2", "repeat_penalty", 1.2),
        ("/set max_tokens 33", "max_tokens", 33),
        ("/set seed 9", "seed", 9),
    ],
)
def test_set_changes_the_sampling_parameters(state, line, attr, value):
    dispatch(state, line)
    assert getattr(state.session.params, attr) == value


def test_set_markdown(state):
    dispatch(state, "/set markdown on")
    assert state.markdown
    dispatch(state, "/set markdown off")
    assert not state.markdown


@pytest.mark.parametrize(
    "line,message",
    [
        ("/frobnicate", "unknown command /frobnicate"),
        ("/set", "usage: /set PARAM VALUE"),
        ("/set temperature", "usage: /set PARAM VALUE"),
        ("/set colour blue", "usage: /set PARAM VALUE"),
        ("/set temperature warm", "temperature must be a number in 0..10, not 'warm'"),
        ("/set top_k 1.5", "top_k must be an integer in"),
        ("/set top_p 2", "top_p must be in 0..1, not 2"),
        ("/set temp -1", "temperature must be in 0..10, not -1"),
        ("/set seed 4294967296", "seed must be in 0..4294967295, not 4294967296"),
        ("/set n 0", "max_tokens must be in 1..2147483647, not 0"),
        ("/set markdown maybe", "not on or off"),
        ("/save", "usage: /save FILE"),
        ("/load", "usage: /load FILE"),
        ("/load /nonexistent/conv.json", "no such conversation file"),
    ],
)
def test_bad_slash_input(state, line, message):
    with pytest.raises(UsageError, match=message):
        dispatch(state, line)


def test_system_show_clear_bye(state):
    dispatch(state, "/system Be brief.")
    assert state.session.system == "Be brief."
    assert "Be brief." in dispatch(state, "/show").text
    state.session.messages.append(Message("user", "x"))
    dispatch(state, "/clear")
    assert state.session.messages == []
    dispatch(state, "/bye")
    assert not state.running


def test_save_then_load_round_trips(state, tmp_path):
    state.session.system = "sys"
    state.session.messages = [Message("user", "hi"), Message("assistant", "hello", cancelled=True)]
    path = tmp_path / "conv.json"
    dispatch(state, f"/save {path}")
    saved = json.loads(path.read_text())
    assert saved["messages"][1] == {"role": "assistant", "content": "hello", "cancelled": True}
    state.session.messages, state.session.system = [], None
    dispatch(state, f"/load {path}")
    assert [(m.role, m.content, m.cancelled) for m in state.session.messages] == [
        ("user", "hi", False),
        ("assistant", "hello", True),
    ]
    assert state.session.system == "sys"


@pytest.mark.parametrize(
    "content",
    [
        "not json at all",
        '["a", "list"]',
        '{"messages": "nope"}',
        '{"messages": [{"role": "wizard", "content": "x"}]}',
        '{"messages": [{"role": "user", "content": 5}]}',
    ],
)
def test_load_refuses_what_is_not_a_conversation(state, tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UsageError, match="not an llmcli conversation"):
        dispatch(state, f"/load {path}")


def test_stats_after_a_turn_shows_every_stage_of_that_request(state):
    from rich.console import Console

    from llmcli.stages import STAGES, num

    assert dispatch(state, "/stats").text == "no request yet"
    state.session.params = SamplingParams(temperature=0, max_tokens=4)
    list(state.session.ask("hi"))
    stats = state.session.last_stats
    console = Console(width=160, no_color=True, highlight=False)
    with console.capture() as shown:
        console.print(dispatch(state, "/stats").renderable)
    text = shown.get()
    assert f"last request · smol · {stats.finish_reason}" in text and stats.finish_reason == "length"
    rows = [[cell.strip() for cell in line.split("│")] for line in text.splitlines()]  # stage, where, ms, ...
    titles = [stage.title for stage in STAGES]
    stage_rows = [row for row in rows if row[0] in titles]
    assert [row[0] for row in stage_rows] == titles  # all seven, in order
    assert all(row[1] == "local" for row in stage_rows)
    decode = next(row for row in stage_rows if row[0] == "④ decode")
    assert decode[2] == num(stats.stage("decode").ms, 2) and "4 tok" in decode[4]
    total = next(row for row in rows if row[0] == "total")
    assert total[:3] == ["total", "local", num(stats.total_ms, 2)] and total[4] == "finish: length"


def test_a_refused_set_leaves_the_parameters_as_they_were(state):
    before = state.session.params.as_dict()
    with pytest.raises(UsageError):
        dispatch(state, "/set temp 11")
    assert state.session.params.as_dict() == before


def test_show_lists_every_parameter_with_the_tables_word_for_none(state):
    text = dispatch(state, "/show").text
    assert all(f"\n{name} " in text for name in SamplingParams().as_dict())
    assert "seed         random" in text
    dispatch(state, "/set seed 7")
    assert "seed         7" in dispatch(state, "/show").text


def test_set_schema_constrains_the_next_reply_and_off_lifts_it(state, tmp_path):
    from llmcli.engine.events import TextDelta

    schema = tmp_path / "answer.json"
    schema.write_text('{"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}')
    dispatch(state, f"/set schema {schema}")
    assert state.session.constraint.schema["required"] == ["ok"]
    state.session.params = SamplingParams(temperature=0, max_tokens=20)
    text = "".join(e.text for e in state.session.ask("Is water wet?") if isinstance(e, TextDelta))
    assert json.loads(text)["ok"] in (True, False)
    dispatch(state, "/set schema off")
    assert state.session.constraint is None
    with pytest.raises(UsageError, match="unsupported keyword 'multipleOf'"):
        dispatch(state, '/set schema {"type": "integer", "multipleOf": 2}')


# -- hostile /load files and /save's atomicity ------------------------------------------------------


def _conversation_before(state) -> tuple:
    state.session.system = "keep me"
    state.session.messages = [Message("user", "hi"), Message("assistant", "hello")]
    return state.session.system, list(state.session.messages)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "message 1 holds a lone surrogate"),
        (b'{"system": "\\udfff", "messages": []}', "system prompt holds a lone surrogate"),
        (b'{"messages": [{"role": "user", "content": "caf\xe9"}]}', "not UTF-8 text (a bad byte at offset"),
        (b'{"messages": [{"role": "user", "content": "hi"}', "not JSON"),
        (b'{"messages": [{"role": "system", "content": "x"}]}', "message 1 needs a role user/assistant"),
        (b'[{"role": "user", "content": ["nested"]}]', "message 1 needs a role user/assistant and text"),
        (
            b'{"messages": [{"role": "user", "content": "x", "cancelled": "yes"}]}',
            "cancelled is not true or false",
        ),
        (b'{"format": "something-else", "messages": []}', "format is not llmcli-conversation"),
        (b'{"messages": [], "system": {"a": 1}}', "system is not text"),
        (b"[" + b",".join([b'{"role":"user","content":""}'] * 100_001) + b"]", "100,001 messages, over the"),
    ],
)
def test_a_bad_load_file_is_one_line_and_leaves_the_conversation(state, tmp_path, content, message):
    before = _conversation_before(state)
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(UsageError, match=re.escape(message)) as caught:
        dispatch(state, f"/load {path}")
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    assert (state.session.system, state.session.messages) == before


def test_load_refuses_an_oversized_file_a_folder_and_a_fifo_without_reading_them(state, tmp_path):
    from llmcli.chatlog.file import MAX_FILE_BYTES

    before = _conversation_before(state)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as fh:
        fh.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing is really written
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    for path, message in [
        (huge, "-byte limit for a conversation"),
        (tmp_path, "is a folder"),
        (fifo, "is not a regular file"),
    ]:
        with pytest.raises(UsageError, match=message):
            dispatch(state, f"/load {path}")  # a FIFO would block a plain open() forever
        assert (state.session.system, state.session.messages) == before


def test_load_takes_a_plain_list_of_messages_with_a_system_one_first(state, tmp_path):
    path = tmp_path / "list.json"
    path.write_text(
        json.dumps(
            [
                {"role": "system", "content": "be kind"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
            ]
        )
    )
    assert dispatch(state, f"/load {path}").text == f"loaded 2 messages from {path}"
    assert state.session.system == "be kind"
    assert [(m.role, m.content) for m in state.session.messages] == [("user", "hi"), ("assistant", "hello")]


def test_a_save_that_cannot_encode_keeps_the_existing_file_byte_for_byte(state, tmp_path):
    path = tmp_path / "conv.json"
    path.write_bytes(b'{"precious": true}\n')
    state.session.messages = [Message("user", "ok"), Message("assistant", "bad \ud800 text")]
    with pytest.raises(UsageError, match="cannot save: message 2 holds a lone surrogate") as caught:
        dispatch(state, f"/save {path}")
    assert "\n" not in str(caught.value)
    assert path.read_bytes() == b'{"precious": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json"]  # no temporary file left behind


def test_save_replaces_atomically_keeps_the_mode_and_writes_through_a_symlink(state, tmp_path):
    target = tmp_path / "conv.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    state.session.messages = [Message("user", "hi")]
    dispatch(state, f"/save {link}")
    assert link.is_symlink() and json.loads(target.read_text())["messages"] == [
        {"role": "user", "content": "hi"}
    ]
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conv.json", "link.json"]


def test_save_into_a_missing_folder_is_one_line(state, tmp_path):
    with pytest.raises(UsageError, match="cannot write .*; choose another path"):
        dispatch(state, f"/save {tmp_path / 'no' / 'such' / 'conv.json'}")
