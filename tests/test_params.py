"""The generation-parameter table drives the CLI, /set, SamplingParams, the request body and docs/chat.md."""

from __future__ import annotations

import math
from dataclasses import fields
from pathlib import Path

import pytest

from llmcli.engine.openai.session import request_body
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError
from llmcli.params import INT32_MAX, PARAMS, UINT32_MAX, USER_PARAMS, find, options_table
from llmcli.ui.slash import ReplState, dispatch
from tests.support.cli import cli_process

CHAT_DOC = Path(__file__).resolve().parents[1] / "docs" / "chat.md"


class _Session:
    """Only what /set touches: a params record (the slash tests drive a real ChatSession)."""

    def __init__(self) -> None:
        self.params = SamplingParams()


def _set(line: str) -> SamplingParams:
    state = ReplState(session=_Session(), model_name="m")
    dispatch(state, f"/set {line}")
    return state.session.params


def _set_error(line: str) -> str:
    with pytest.raises(UsageError) as info:
        _set(line)
    return str(info.value)


def test_the_record_has_one_field_per_row_in_the_table_order_with_the_table_defaults():
    assert [f.name for f in fields(SamplingParams)] == list(PARAMS)
    assert SamplingParams().as_dict() == {name: row.default for name, row in PARAMS.items()}


def test_defaults_are_llama_cpps():
    assert SamplingParams().as_dict() == {
        "temperature": 0.8,
        "top_p": 0.95,
        "top_k": 40,
        "min_p": 0.05,
        "repeat_penalty": 1.0,
        "repeat_last_n": 64,
        "seed": None,
        "max_tokens": 1024,
    }


@pytest.mark.parametrize(
    "name,value,message",
    [
        ("temperature", -1, "temperature must be in 0..10, not -1"),
        ("temperature", 10.5, "temperature must be in 0..10, not 10.5"),
        ("temperature", math.nan, "temperature must be in 0..10, not nan"),
        ("top_p", 1.01, "top_p must be in 0..1, not 1.01"),
        ("min_p", -0.1, "min_p must be in 0..1, not -0.1"),
        ("top_k", INT32_MAX + 1, f"top_k must be in 0..{INT32_MAX}, not {INT32_MAX + 1}"),
        ("top_k", 1.5, "top_k must be an integer in"),
        ("repeat_penalty", 11, "repeat_penalty must be in 0..10, not 11"),
        ("repeat_last_n", -1, "repeat_last_n must be in 0..1048576, not -1"),
        ("seed", -2, f"seed must be in 0..{UINT32_MAX}, not -2"),
        ("seed", -1.0, "seed must be an integer in"),
        ("seed", 2**32, f"seed must be in 0..{UINT32_MAX}, not 4294967296"),
        ("max_tokens", 0, f"max_tokens must be in 1..{INT32_MAX}, not 0"),
        ("max_tokens", None, "max_tokens must be an integer"),
        ("temperature", "hot", "temperature must be a number"),
        ("temperature", True, "temperature must be a number"),
    ],
)
def test_the_record_refuses_what_the_table_refuses(name, value, message):
    with pytest.raises(UsageError, match="^" + message.replace(".", r"\.")):
        SamplingParams(**{name: value})


@pytest.mark.parametrize("name", list(PARAMS))
def test_the_bounds_themselves_are_accepted(name):
    row = PARAMS[name]
    assert getattr(SamplingParams(**{name: row.low}), name) == row.low
    assert getattr(SamplingParams(**{name: row.high}), name) == row.high


def test_seed_none_means_random_and_is_not_sent():
    assert SamplingParams(seed=None).seed is None
    assert SamplingParams(seed=-1).seed is None  # llama.cpp's and Ollama's "random"
    assert "seed" not in request_body("m", [], SamplingParams(), [])


@pytest.mark.parametrize(
    "word,name",
    [
        ("temp", "temperature"),
        ("n", "max_tokens"),
        ("max-tokens", "max_tokens"),
        ("top-p", "top_p"),
        ("TOP_K", "top_k"),
        ("repeat-penalty", "repeat_penalty"),
    ],
)
def test_set_takes_a_name_or_a_flag_without_dashes(word, name):
    assert find(word).name == name


def test_set_lists_the_user_rows_and_not_the_engine_only_ones():
    message = _set_error("colour blue")
    assert (
        message == f"usage: /set PARAM VALUE, PARAM one of {', '.join(USER_PARAMS)}, markdown, schema, think"
    )
    assert "repeat_last_n" not in message and find("repeat_last_n") is None


@pytest.mark.parametrize(
    "flag,name,text",
    [
        ("--temp", "temperature", "-1"),
        ("--top-p", "top_p", "1.5"),
        ("--min-p", "min_p", "2"),
        ("--top-k", "top_k", "-3"),
        ("--repeat-penalty", "repeat_penalty", "11"),
        ("--seed", "seed", str(2**32)),
        ("--seed", "seed", "-2"),
        ("-n", "max_tokens", "0"),
    ],
)
def test_cli_and_set_refuse_the_same_values_with_the_same_message(flag, name, text):
    message = _set_error(f"{name} {text}")
    result = cli_process("chat", flag, text, "x")
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1


def test_set_refuses_text_that_is_not_a_number_naming_the_range():
    assert _set_error("temperature warm") == "temperature must be a number in 0..10, not 'warm'"
    assert _set_error("seed 1.5") == f"seed must be an integer in 0..{UINT32_MAX}, not '1.5'"


def test_set_accepts_the_top_of_every_range():
    assert _set(f"seed {UINT32_MAX}").seed == UINT32_MAX
    assert _set("temp 10").temperature == 10.0


def test_cli_help_shows_each_row_with_its_range_and_default():
    help_text = cli_process("chat", "--help", vars={"COLUMNS": "300"}).stdout
    for row in USER_PARAMS.values():
        assert row.flags[-1] in help_text
        assert f"{row.range_text}. [{row.default_text}]" in help_text, row.name


def test_request_body_takes_its_field_names_from_the_table():
    changed = {name: row.high for name, row in PARAMS.items()}
    body = request_body("m", [], SamplingParams(**changed), [])
    for name, row in PARAMS.items():
        sent = ([row.openai] if row.openai else []) + list(row.extensions)
        assert all(body[field] == changed[name] for field in sent), name
    assert "repeat_last_n" not in body  # an engine setting: no request field
    plain = request_body("m", [], SamplingParams(), [])
    assert not any(field in plain for row in PARAMS.values() for field in row.extensions)


def test_chat_doc_option_table_matches_the_parameter_table():
    table = options_table()
    assert table in CHAT_DOC.read_text(encoding="utf-8"), (
        "docs/chat.md's sampling table is stale: paste the output of "
        "`python -c 'from llmcli.params import options_table; print(options_table())'`"
    )


def test_chat_doc_check_would_catch_a_changed_default():
    from dataclasses import replace

    rows = USER_PARAMS.values()
    drifted = [replace(row, default=0.7) if row.name == "temperature" else row for row in rows]
    assert options_table(drifted) not in CHAT_DOC.read_text(encoding="utf-8")
