"""Environment: every variable llmcli reads, parsed once from a snapshot into typed fields."""

from __future__ import annotations

import io
from pathlib import Path

from llmcli.environment import Environment


def test_every_variable_is_parsed_into_a_typed_field(tmp_path):
    env = Environment(
        vars={
            "LLMCLI_HOME": str(tmp_path / "h"),
            "LLMCLI_MODEL": "my-model",
            "LLMCLI_DEBUG": "1",
            "LLMCLI_ENDPOINT": "http://h:1",
            "LLMCLI_API_KEY": "sk-x",
            "NO_COLOR": "1",
        }
    )
    assert env.store_root == tmp_path / "h"
    assert (env.default_model, env.debug, env.endpoint, env.api_key, env.no_color) == (
        "my-model",
        True,
        "http://h:1",
        "sk-x",
        True,
    )


def test_unset_and_empty_variables_mean_the_defaults():
    env = Environment(vars={"HOME": "/home/u", "LLMCLI_DEBUG": "0", "LLMCLI_MODEL": "", "NO_COLOR": ""})
    assert env.store_root == Path("/home/u/.local/share/llmcli")
    assert (env.default_model, env.debug, env.endpoint, env.api_key, env.no_color) == (
        None,
        False,
        None,
        None,
        False,
    )
    assert Environment(vars={"XDG_DATA_HOME": "/x"}).store_root == Path("/x/llmcli")


def test_the_variables_are_a_snapshot():
    vars = {"LLMCLI_MODEL": "a"}
    env = Environment(vars=vars)
    vars["LLMCLI_MODEL"] = "b"
    assert env.default_model == "a" and env.vars["LLMCLI_MODEL"] == "a"


def test_the_api_key_stays_out_of_the_repr():
    assert "sk-secret" not in repr(Environment(vars={"LLMCLI_API_KEY": "sk-secret"}))


def test_a_leading_tilde_is_the_environments_home_not_the_processes(tmp_path):
    env = Environment(vars={"HOME": str(tmp_path)}, stdin=io.StringIO(), stdout=io.StringIO())
    assert env.home == tmp_path
    assert env.expand_user("~") == tmp_path
    assert env.expand_user("~/models/x.gguf") == tmp_path / "models" / "x.gguf"
    assert env.expand_user(Path("~/a")) == tmp_path / "a"
    assert env.expand_user("a/~/b") == Path("a/~/b")  # only a leading tilde means home
    assert env.expand_user("/abs/x") == Path("/abs/x")


def test_llmcli_home_with_a_tilde_is_under_the_environments_home(tmp_path):
    env = Environment(vars={"HOME": str(tmp_path), "LLMCLI_HOME": "~/store"})
    assert env.store_root == tmp_path / "store"


def test_the_commands_get_the_environment_that_main_was_given(tmp_path):
    """No fallback to the process: `logs path` prints the store of the Environment passed to main."""
    import pytest as _pytest

    from llmcli.cli import main

    out = io.StringIO()
    env = Environment(vars={"HOME": str(tmp_path)}, stdin=io.StringIO(), stdout=out, stderr=io.StringIO())
    with _pytest.raises(SystemExit) as exited:
        main(["logs", "path"], env)
    assert exited.value.code == 0
    assert out.getvalue().startswith(str(tmp_path / ".local" / "share" / "llmcli"))


def test_cache_max_takes_decimal_sizes_and_refuses_the_rest():
    import pytest as _pytest

    from llmcli.environment import CACHE_MAX_DEFAULT, Environment
    from llmcli.errors import UsageError

    assert Environment(vars={}).cache_max == CACHE_MAX_DEFAULT == 2 * 10**9
    sizes = {"0": 0, "123": 123, "2G": 2 * 10**9, "500m": 5 * 10**8, "1.5GB": 15 * 10**8, "750kB": 750_000}
    for text, size in sizes.items():
        assert Environment(vars={"LLMCLI_CACHE_MAX": text}).cache_max == size
    for text in ("lots", "-1", "G", "nan", "inf", "2X"):
        with _pytest.raises(UsageError, match="LLMCLI_CACHE_MAX=.* is not a size"):
            Environment(vars={"LLMCLI_CACHE_MAX": text}).cache_max  # noqa: B018


def test_on_off_variables_take_the_usual_words_and_refuse_the_rest():
    import pytest as _pytest

    from llmcli.errors import UsageError

    words = {
        None: False,
        "": False,
        "0": False,
        "false": False,
        "No": False,
        "OFF": False,
        "1": True,
        "true": True,
        "Yes": True,
        " on ": True,
    }
    for text, on in words.items():
        vars = {} if text is None else {"LLMCLI_NO_LOG": text, "LLMCLI_DEBUG": text}
        env = Environment(vars=vars)
        assert (env.no_log, env.debug) == (on, on), text
    for text in ("maybe", "2", "enabled"):
        env = Environment(vars={"LLMCLI_NO_LOG": text})  # made without a fuss: only chat reads it
        with _pytest.raises(
            UsageError, match=r"^LLMCLI_NO_LOG='.*' is not on or off; give 1, true, yes or on "
        ):
            env.no_log  # noqa: B018
    # LLMCLI_DEBUG is read while another error is reported: a word it does not know asks for the detail.
    assert Environment(vars={"LLMCLI_DEBUG": "verbose"}).debug is True
