"""`llmcli chat --tools FILE --tool-choice CHOICE` through the real CLI, on the embedded model: the
calls print as a block, or in --json's document in OpenAI's shape; the model's own form is read (the
embedded template's generic JSON, and Hermes' `<tool_call>` with a Qwen template); bad input is one
line and exit 2. In this process, through the CLI's own error boundary: nothing here is about the
file descriptors, and a child per run only repeated the interpreter's start."""

from __future__ import annotations

import json

import pytest

from tests.corpus import corpus_templates
from tests.support.cli import Result, cli

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 16}},
            "required": ["city"],
        },
    },
}
CLOCK = {"type": "function", "function": {"name": "now", "description": "The time."}}
FAST = ["-t", "1", "--no-stats", "--no-log", "--seed", "3", "-n", "64"]
QWEN = "Qwen-Qwen2.5-7B-Instruct.jinja"  # a real tool-use template: Hermes' <tool_call> form


def chat(tmp_path, embedded_path, *args: str, tools: object = (WEATHER, CLOCK)) -> Result:
    path = tmp_path / "tools.json"
    path.write_text(json.dumps(list(tools)) if not isinstance(tools, str) else tools)
    return cli("chat", embedded_path, "--tools", str(path), *FAST, *args)


def qwen_template(tmp_path) -> str:
    template = tmp_path / QWEN
    template.write_text(corpus_templates()[QWEN])
    return str(template)


@pytest.mark.parametrize("form", ["generic", "hermes"])
def test_a_required_call_prints_in_openai_shape_with_json(tmp_path, embedded_path, form):
    extra = ["--chat-template", qwen_template(tmp_path)] if form == "hermes" else []
    r = chat(tmp_path, embedded_path, "--tool-choice", "get_weather", "--json", *extra, "Weather in Paris?")
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    assert document["finish_reason"] == "tool_calls" and document["text"].strip() == ""
    [call] = document["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    arguments = json.loads(call["function"]["arguments"])  # a string of JSON, as OpenAI sends it
    assert set(arguments) == {"city"} and len(arguments["city"]) <= 16


def test_a_call_prints_as_a_readable_block_without_its_markup(tmp_path, embedded_path):
    r = chat(
        tmp_path, embedded_path, "--tool-choice", "required", "--chat-template", qwen_template(tmp_path), "Hi"
    )
    assert r.exit_code == 0, r.stderr
    assert "<tool_call>" not in r.stdout and '{"name"' not in r.stdout
    lines = [line for line in r.stdout.splitlines() if line.startswith("→ ")]
    assert lines and all(line.split("(")[0] in ("→ get_weather", "→ now") for line in lines), r.stdout
    assert all("[call_" in line for line in lines)


def test_tool_choice_none_answers_in_text(tmp_path, embedded_path):
    r = chat(tmp_path, embedded_path, "--tool-choice", "none", "--json", "Say hello.")
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    assert document["tool_calls"] == [] and document["text"].strip()
    assert document["finish_reason"] != "tool_calls"


def test_the_prompt_is_the_one_render_shows_with_the_tools(tmp_path, embedded_path):
    template = qwen_template(tmp_path)
    path = tmp_path / "tools.json"
    path.write_text(json.dumps([WEATHER]))
    conversation = json.dumps([{"role": "user", "content": "Hi"}])
    counts = []
    for tools in (["--tools", str(path)], []):
        r = cli(
            "render",
            embedded_path,
            "--chat-template",
            template,
            *tools,
            "--json",
            "--messages",
            "-",
            input=conversation,
        )
        assert r.exit_code == 0, r.stderr
        counts.append(json.loads(r.stdout)["n_tokens"])
    assert counts[0] > counts[1]  # the tools are in the prompt
    c = chat(
        tmp_path,
        embedded_path,
        "--chat-template",
        template,
        "--tool-choice",
        "required",
        "--json",
        "Hi",
        tools=[WEATHER],
    )
    assert c.exit_code == 0, c.stderr
    assert json.loads(c.stdout)["usage"]["prompt_tokens"] == counts[0]


def named(name: str, **function: object) -> dict:
    return {"type": "function", "function": {"name": name, **function}}


BAD = [
    ("{nope", [], "is not a list of tools (not JSON"),
    # serve's checks of a request's tools, with the same field paths (tests/serve/test_tools.py)
    (json.dumps(WEATHER), [], "tools.json: tools must be a list of tools"),
    ("[1, 2]", [], "tools.json: tools[0] must be an object"),
    (json.dumps([WEATHER, {"type": "function"}]), [], "tools[1].function must be an object with a name"),
    (json.dumps([named("get weather")]), [], "tools[0].function.name must be 1 to 64 letters"),
    (json.dumps([WEATHER, WEATHER]), [], "tools[1].function.name 'get_weather' is given twice"),
    (
        json.dumps([named("f", description="x" * 40_000)]),
        [],
        "tools[0].function.description is 40,000 characters, over the limit of 32,768; shorten it",
    ),
    (
        json.dumps([named("f", parameters={"type": 5})]),
        ["--tool-choice", "none"],  # checked whatever the choice: none still renders the tools
        "tools[0].function.parameters must be a JSON Schema of an object",
    ),
    (
        json.dumps([named(f"f{i}") for i in range(200)]),
        [],
        "tools holds 200 tools, over the limit of 128; give fewer tools",
    ),
    (
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {"name": "f", "parameters": {"type": "object", "allOf": [{}]}},
                }
            ]
        ),
        [],
        "tools[0].function.parameters: unsupported keyword 'allOf'",
    ),
    (
        json.dumps([WEATHER]),
        ["--tool-choice", "nope"],
        "--tool-choice 'nope' is not auto, none, required or a tool",
    ),
    (
        json.dumps([WEATHER]),
        ["--format", "json"],
        "--tools and --format json each constrain the reply; give only one",
    ),
    (json.dumps([WEATHER]), ["--endpoint", "http://127.0.0.1:9/v1"], "--tools needs a local model"),
]


@pytest.mark.parametrize("tools, args, message", BAD, ids=[b[2][:40] for b in BAD])
def test_bad_tools_input_is_one_line_and_exit_2(tmp_path, embedded_path, tools, args, message):
    r = chat(tmp_path, embedded_path, *args, "Hi", tools=tools)
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stderr)
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr


def test_tool_choice_without_tools_is_refused(embedded_path):
    r = cli("chat", embedded_path, "--tool-choice", "required", "Hi")
    assert r.exit_code == 2 and r.stderr == "llmcli: error: --tool-choice needs --tools FILE\n"


def test_a_missing_tools_file_is_refused(tmp_path, embedded_path):
    r = cli("chat", embedded_path, "--tools", str(tmp_path / "none.json"), "Hi")
    assert r.exit_code == 2 and r.stdout == "" and "tools file" in r.stderr, r.stderr


# A script's turn after it ran the call: the conversation so far, ending with the tool's result.
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
FED_BACK = [
    {"role": "system", "content": "You answer about the weather."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"},
]


def test_a_tool_result_fed_back_with_messages_is_answered_as_it_stands(tmp_path, embedded_path):
    template = qwen_template(tmp_path)
    (tmp_path / "conversation.json").write_text(json.dumps(FED_BACK))
    (tmp_path / "tools.json").write_text(json.dumps([WEATHER]))
    tools = ["--tools", str(tmp_path / "tools.json")]
    shown = cli(
        "render",
        embedded_path,
        "--chat-template",
        template,
        *tools,
        "--json",
        "--messages",
        "-",
        input=json.dumps(FED_BACK),
    )
    assert shown.exit_code == 0, shown.stderr
    rendered = json.loads(shown.stdout)
    assert "22 C and sunny" in rendered["text"]
    r = cli(
        "chat",
        embedded_path,
        "--chat-template",
        template,
        *tools,
        "--tool-choice",
        "none",
        "--messages",
        str(tmp_path / "conversation.json"),
        "--json",
        *FAST,
    )
    assert r.exit_code == 0, r.stderr
    document = json.loads(r.stdout)
    # The prompt is exactly the conversation render shows, with no user turn added.
    assert document["usage"]["prompt_tokens"] == rendered["n_tokens"]
    assert document["tool_calls"] == [] and document["conversation_id"] is None  # the script's, not logged


@pytest.mark.parametrize(
    "conversation, args, message",
    [
        (FED_BACK[:3], [], "the last message of --messages is the assistant's: give a PROMPT to answer"),
        (FED_BACK, ["-c"], "--messages gives the whole conversation, -c/--cid a logged one; give only one"),
        ([{"role": "wizard", "content": "x"}], [], "is not a list of messages"),
        (FED_BACK, ["--endpoint", "http://127.0.0.1:9/v1"], "--messages needs a local model"),
    ],
)
def test_a_bad_messages_file_is_one_line_and_exit_2(tmp_path, embedded_path, conversation, args, message):
    (tmp_path / "conversation.json").write_text(json.dumps(conversation))
    r = cli("chat", "--messages", str(tmp_path / "conversation.json"), *args, *FAST, "-m", embedded_path)
    assert r.exit_code == 2 and r.stdout == "", (r.exit_code, r.stderr)
    assert r.stderr.startswith("llmcli: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message in r.stderr, r.stderr


DEEP = "nests more than 64 levels deep, the limit for any JSON handed in; flatten it"


def test_a_deeply_nested_tools_or_messages_file_is_one_line_and_exit_2(tmp_path, embedded_path):
    """chat with a --tools or --messages file nested 450 levels exited 1 with "internal error:
    RecursionError"; now the one nesting limit refuses it before any model loads."""
    schema = '{"type": "object", "properties": {"a": ' * 225 + '{"type": "object"}' + "}}" * 225
    r = chat(
        tmp_path,
        embedded_path,
        "Hi",
        tools='[{"type": "function", "function": {"name": "f", "parameters": ' + schema + "}}]",
    )
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert DEEP in r.stderr and "[0].function.parameters.properties.a" in r.stderr
    history = tmp_path / "messages.json"
    history.write_text('[{"role": "user", "content": ' + "[" * 450 + "]" * 450 + "}]")
    r = cli("chat", embedded_path, "--messages", str(history), *FAST)
    assert r.exit_code == 2 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
    assert f"{history}: [0].content" in r.stderr and DEEP in r.stderr
