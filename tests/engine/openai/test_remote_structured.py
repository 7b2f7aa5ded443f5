"""--schema and --format json over --endpoint, against llama-cpp-python's real server: the request
carries response_format, and the reply is validated here as a local one is. --grammar is refused."""

from __future__ import annotations

import json

import jsonschema

from tests.engine.openai.conftest import API_KEY
from tests.support.cli import cli

KEY = {"LLMCLI_API_KEY": API_KEY}
PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
    },
}


def remote(url: str, *args: str) -> list[str]:
    return ["chat", "--endpoint", url, "--temp", "0", "-n", "60", *args]


def test_schema_over_the_real_server_gives_validated_json(llama_server):
    # The server refuses OpenAI's json_schema form (it knows json_object + schema): asked again in
    # that form, its grammar shapes the reply, and the reply is validated here.
    result = cli(
        *remote(
            llama_server,
            "--schema",
            json.dumps(PERSON),
            "--json",
            "Ann is 31. Give her name and age as JSON.",
        ),
        vars=KEY,
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc["data"], PERSON)
    assert json.loads(doc["text"]) == doc["data"] and doc["endpoint"] == llama_server


def test_format_json_over_the_real_server_prints_exactly_json(llama_server):
    result = cli(*remote(llama_server, "--format", "json", "Ann is 31. As JSON."), vars=KEY)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith("\n") and result.stdout.count("\n") >= 1
    assert isinstance(json.loads(result.stdout), dict)  # no fence, no prose


def test_a_server_reply_that_breaks_the_schema_exits_1_naming_the_path(llama_server):
    # llama-cpp-python's converter drops minimum/maximum, so its grammar lets the model write 31;
    # the client's validation is what stops it.
    schema = {
        "type": "object",
        "required": ["age"],
        "properties": {"age": {"type": "integer", "minimum": 100, "maximum": 130}},
    }
    result = cli(
        *remote(llama_server, "--schema", json.dumps(schema), "Ann is 31. Her age as JSON."), vars=KEY
    )
    assert result.exit_code == 1, result.stdout
    assert "does not match the schema at $.age" in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_max_tokens_mid_object_over_the_server_is_incomplete_json(llama_server):
    result = cli(
        "chat",
        "--endpoint",
        llama_server,
        "--temp",
        "0",
        "-n",
        "3",
        "--schema",
        json.dumps(PERSON),
        "Ann is 31. As JSON.",
        vars=KEY,
    )
    assert result.exit_code == 1
    assert "incomplete JSON" in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""


def test_grammar_over_an_endpoint_is_refused_before_connecting(tmp_path):
    grammar = tmp_path / "yes.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    # Nothing listens on port 9: reaching the server would be a connection error (exit 1).
    result = cli("chat", "--endpoint", "http://127.0.0.1:9/v1", "--grammar", str(grammar), "Yes?")
    assert result.exit_code == 2, result.stderr
    assert result.stderr == (
        "llmcli: error: --grammar needs the local engine (a server's reply cannot be "
        "checked against a GBNF grammar here); with --endpoint use --schema or "
        "--format json\n"
    )
