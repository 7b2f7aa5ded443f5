"""/save, /load and /clear with the conversation log, driven against a real session on the embedded model."""

from __future__ import annotations

import json

import pytest

from llmcli.chatlog import ChatLog
from llmcli.engine.events import drain
from llmcli.engine.local.chat import ChatSession
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.ui.slash import ReplState, dispatch
from llmcli.usecases.conversation import Recorder


@pytest.fixture
def state(runtime, tmp_path):
    runtime.clear()
    session = ChatSession(runtime, params=SamplingParams(temperature=0, max_tokens=4))
    log = ChatLog(tmp_path / "logs.db")
    yield ReplState(session=session, model_name="smol", recorder=Recorder(log, "smol"))
    log.close()


def turn(state: ReplState, text: str) -> None:
    reply = drain(state.session.ask(text))
    state.recorder.record(state.session, text, reply)


def conversations(state: ReplState) -> list[str]:
    return [e.conversation_id for e in state.recorder.log.recent(None)]


def test_save_keeps_the_conversation_id_and_load_continues_it(state, tmp_path):
    turn(state, "hello")
    cid = state.recorder.conversation_id
    dispatch(state, f"/save {tmp_path / 'c.json'}")
    assert json.loads((tmp_path / "c.json").read_text())["conversation_id"] == cid
    dispatch(state, "/clear")
    turn(state, "another topic")
    assert state.recorder.conversation_id != cid
    result = dispatch(state, f"/load {tmp_path / 'c.json'}")
    assert f"continuing conversation {cid} in the log" in result.text
    turn(state, "more")
    last = state.recorder.log.recent(1)[0]
    assert last.conversation_id == cid and [m["content"] for m in last.messages][0] == "hello"


def test_a_file_from_elsewhere_starts_a_new_logged_conversation(state, tmp_path):
    turn(state, "hello")
    (tmp_path / "c.json").write_text(
        json.dumps(
            {
                "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
                "conversation_id": "01j0000000000000000000000a",
            }
        )
    )
    result = dispatch(state, f"/load {tmp_path / 'c.json'}")
    assert "the next reply starts a new conversation in the log" in result.text
    turn(state, "more")
    first, second = conversations(state)
    assert first != second
    assert state.recorder.log.recent(1)[0].messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]


@pytest.mark.parametrize("cid", [7, "../../etc", "01J0000000000000000000000A\n", ["x"]])
def test_a_conversation_id_that_is_not_an_id_is_refused(state, tmp_path, cid):
    (tmp_path / "c.json").write_text(json.dumps({"messages": [], "conversation_id": cid}))
    with pytest.raises(UsageError, match="conversation_id is not an id from the log"):
        dispatch(state, f"/load {tmp_path / 'c.json'}")


def test_clear_starts_a_new_conversation(state):
    turn(state, "one")
    dispatch(state, "/clear")
    turn(state, "two")
    a, b = conversations(state)
    assert a != b
