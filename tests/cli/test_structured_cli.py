"""`llmcli chat --schema/--format json/--grammar` through the real CLI, on the embedded model.

Where stderr must hold one line or nothing once llama.cpp has run (its own log goes to the file
descriptor), the CLI runs in a child; the rest runs in this process, through its error boundary."""

from __future__ import annotations

import json

import pytest

from tests.support.cli import cli, cli_process

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
FAST = ["--temp", "0", "-t", "1", "--no-stats"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--schema", "{nope"], "--schema is not JSON"),
        (["--schema", "no-such-schema.json"], "is neither JSON nor a file"),
        (["--schema", '{"type": 5}'], "--schema is not a valid JSON Schema at /type"),
        (["--schema", "42"], "--schema must be a JSON object (a JSON Schema), e.g."),  # JSON, not a schema
        (["--schema", "true"], "--schema must be a JSON object (a JSON Schema), e.g."),
        (["--schema", '""'], "--schema must be a JSON object (a JSON Schema), e.g."),
        (
            ["--schema", '{"$ref": "#/$defs/missing"}'],
            "--schema: $ref '#/$defs/missing' points to nothing at /;",
        ),
        (
            [
                "--schema",
                '{"$defs": {"a": {"type": "string"}}, "type": '
                '"object", "properties": {"b": {"$ref": "#/$defs/b"}}}',
            ],
            "--schema: $ref '#/$defs/b' points to nothing at /properties/b;",
        ),
        (["--schema", '{"type": "integer", "multipleOf": 2}'], "unsupported keyword 'multipleOf'"),
        (["--schema", '{"type": "object", "properties": {"a": {"not": {}}}}'], "unsupported keyword 'not' "),
        (
            ["--schema", "{}", "--format", "json"],
            "--schema and --format each constrain the reply; give only one",
        ),
        (
            ["--schema", "{}", "--grammar", "answer.gbnf"],
            "--schema and --grammar each constrain the reply; give only one",
        ),
        (
            ["--schema", '{"type": "integer", "minimum": 3, "maximum": 2}'],
            "minimum 3 and maximum 2 leave no integer",
        ),
        (
            ["--schema", '{"type": "string", "minLength": 5, "maxLength": 2}'],
            "--schema: minLength 5 above maxLength 2 leaves no string at /;",
        ),
        (["--format", "yaml"], "the one format is json"),
    ],
)
def test_bad_structured_options_exit_2_with_one_line_before_loading(args, message):
    # The model named does not exist: reaching the model would be a different error.
    result = cli("chat", "-m", "/nonexistent/model.gguf", *args, "hi")
    assert result.exit_code == 2, result.stderr
    assert message in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""


def test_a_malformed_grammar_file_exits_2(tmp_path):
    bad = tmp_path / "bad.gbnf"
    bad.write_text('root ::= "yes" | ("no"\n')
    result = cli_process("chat", "-m", "/nonexistent/model.gguf", "--grammar", str(bad), "hi")
    assert result.exit_code == 2
    assert f"{bad} is not a valid GBNF grammar" in result.stderr and result.stderr.count("\n") == 1
    assert "(expecting ')' at the end of the grammar (line 1)); fix the grammar" in result.stderr, (
        result.stderr
    )


def test_format_json_prints_exactly_parseable_json():
    result = cli(
        "chat", *FAST, "-n", "80", "--format", "json", "Give a JSON object with one key, color, set to red."
    )
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith("}\n") and result.stdout.startswith("{")  # no fence, no prose
    assert isinstance(json.loads(result.stdout), dict)


def test_schema_reply_validates_and_json_carries_data(tmp_path):
    import jsonschema

    schema = tmp_path / "person.json"
    schema.write_text(json.dumps(PERSON))
    result = cli(
        "chat",
        *FAST,
        "-n",
        "60",
        "--schema",
        str(schema),
        "--json",
        "Ann is 31. Give her name and age as JSON.",
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    jsonschema.validate(doc["data"], PERSON)
    assert json.loads(doc["text"]) == doc["data"]


def test_a_grammar_forces_a_fixed_shape(tmp_path):
    grammar = tmp_path / "answer.gbnf"
    grammar.write_text('root ::= "ANSWER: " ("yes" | "no")\n')
    result = cli("chat", *FAST, "-n", "20", "--grammar", str(grammar), "Is the sky blue?")
    assert result.exit_code == 0, result.stderr
    assert result.stdout in ("ANSWER: yes\n", "ANSWER: no\n")


def test_max_tokens_mid_object_exits_1_incomplete_json():
    result = cli_process("chat", *FAST, "-n", "3", "--schema", json.dumps(PERSON), "Ann is 31. As JSON.")
    assert result.exit_code == 1
    assert "incomplete JSON" in result.stderr and result.stderr.count("\n") == 1 and result.stdout == ""


# Grammars that parse but demand what no model writes: llama.cpp aborted the process (exit 134) at
# the first sampled token. Run on the real model, so that reaching it would show.
IMPOSSIBLE_GRAMMARS = [
    (r"root ::= [^\x00-\U0010FFFF]", "the character class [^\\x00-\\U0010FFFF] at line 1, column 10 matches"),
    (
        "root ::= [b-a]",
        "the character class [b-a] at line 1, column 10 matches no character a model can write",
    ),
    (r'root ::= "a" "\x00"', 'the literal "\\x00" at line 1, column 14 holds NUL (\\x00), which no model'),
    ('root ::= "no" | x\nx ::= [\\U00110000-\\U0011FFFF]', "at line 2, column 7 matches no character"),
]


@pytest.mark.parametrize("text, message", IMPOSSIBLE_GRAMMARS)
def test_an_impossible_grammar_exits_2_with_one_line(tmp_path, text, message):
    path = tmp_path / "impossible.gbnf"
    path.write_text(text + "\n")
    result = cli_process("chat", *FAST, "-n", "8", "--grammar", str(path), "hi")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"llmcli: error: {path}: ") and message in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.rstrip().endswith("fix the grammar")


@pytest.mark.parametrize(
    "text, reply",
    [
        ('root ::= "ok" <[999999]>', "ok"),  # past the vocabulary: nothing can follow "ok"
        ("root ::= <[2]>", ""),  # <|im_end|> alone: an end token the grammar never lets through
    ],
)
def test_a_grammar_that_reaches_a_dead_end_ends_the_reply(tmp_path, text, reply):
    path = tmp_path / "deadend.gbnf"
    path.write_text(text + "\n")
    result = cli_process("chat", *FAST, "-n", "8", "--grammar", str(path), "hi")
    assert (result.exit_code, result.stdout.rstrip("\n"), result.stderr) == (0, reply, ""), result.stderr
