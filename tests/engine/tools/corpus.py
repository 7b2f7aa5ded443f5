"""Recorded replies of each tool-call family, as its models write them (after llama.cpp's
tests/test-chat.cpp and vLLM's tool-parser tests), with what reading each must give.

`calls` are (name, arguments) in order; `malformed` is the start of the reason, or None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmcli.engine.tools.calls import UNCLOSED, bad_json, bad_shape, unknown_tool
from llmcli.engine.tools.formats import FUNCTIONARY, GENERIC, HERMES, LLAMA3, MISTRAL, ToolFormat

TOOLS = ("get_current_temperature", "get_time", "python")
PARIS = {"location": "Paris, France"}
OSLO = {"location": "Oslo, Norway", "unit": "celsius"}
BAD_JSON = bad_json("")[: -len(" ()")]  # the reason's start; the JSON error's words follow
THOUGHT = "<think>\nThe user wants the weather in Paris. I should call get_current_temperature.\n</think>"


@dataclass(frozen=True)
class Recorded:
    form: ToolFormat
    label: str
    text: str
    content: str
    calls: list[tuple[str, dict]] = field(default_factory=list)
    malformed: str | None = None
    thinking: bool = False  # the prompt left <think> open


def hermes(label, body, content, calls=(), malformed=None, thinking=False) -> Recorded:
    return Recorded(HERMES, label, body, content, list(calls), malformed, thinking)


def block(name: str, arguments: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'


PARIS_CALL = block("get_current_temperature", '{"location": "Paris, France"}')
OSLO_CALL = block("get_current_temperature", '{"location": "Oslo, Norway", "unit": "celsius"}')

CORPUS = [
    # Hermes 2 Pro, Qwen 2.5, Qwen 3, QwQ
    hermes("single", PARIS_CALL, "", [("get_current_temperature", PARIS)]),
    hermes(
        "parallel",
        PARIS_CALL + "\n" + OSLO_CALL,
        "\n",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    hermes(
        "text before",
        "I'll look up the temperature.\n" + PARIS_CALL,
        "I'll look up the temperature.\n",
        [("get_current_temperature", PARIS)],
    ),
    hermes(
        "after thinking (Qwen3)",
        THOUGHT + "\n\n" + PARIS_CALL,
        THOUGHT + "\n\n",
        [("get_current_temperature", PARIS)],
    ),
    hermes(
        "prompt opened thinking (QwQ)",
        "Paris, then.\n</think>\n\n" + PARIS_CALL,
        "Paris, then.\n</think>\n\n",
        [("get_current_temperature", PARIS)],
        thinking=True,
    ),
    hermes(
        "inside unclosed thinking",
        "<think>\nI could write " + PARIS_CALL + " and then",
        "<think>\nI could write " + PARIS_CALL + " and then",
    ),
    hermes(
        "inside closed thinking",
        "<think>\n" + PARIS_CALL + "\n</think>\n\nIt is mild.",
        "<think>\n" + PARIS_CALL + "\n</think>\n\nIt is mild.",
    ),
    hermes("bad JSON", block("get_current_temperature", '{"location": "Paris"'), "", malformed=BAD_JSON),
    hermes(
        "unknown name",
        block("get_weather", '{"location": "Paris"}'),
        "",
        malformed=unknown_tool("get_weather"),
    ),
    hermes(
        "unclosed",
        '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "Par',
        "",
        malformed=UNCLOSED,
    ),
    hermes(
        "one good one unknown",
        PARIS_CALL + "\n" + block("get_weather", "{}"),
        "\n",
        [("get_current_temperature", PARIS)],
        unknown_tool("get_weather"),
    ),
    hermes(
        "arguments as a string",
        block("get_time", '"{\\"timezone\\": \\"UTC\\"}"'),
        "",
        [("get_time", {"timezone": "UTC"})],
    ),
    hermes("no arguments", '<tool_call>\n{"name": "get_time"}\n</tool_call>', "", [("get_time", {})]),
    hermes(
        "stray closing marker",
        "Done.</tool_call>",
        "Done.",
        malformed=bad_shape("</tool_call> with no call open"),
    ),
    hermes("no call", "The capital of France is Paris.", "The capital of France is Paris."),
    hermes(
        "a lone < in text", "1 < 2 and <b>bold</b>, <tool is a word", "1 < 2 and <b>bold</b>, <tool is a word"
    ),
    # Llama 3.1 / 3.2 / 3.3: a JSON reply, or <|python_tag|>
    Recorded(
        LLAMA3,
        "single",
        '{"name": "get_current_temperature", "parameters": {"location": "Paris, France"}}',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        LLAMA3,
        "single, type first (3.2)",
        '{"type": "function", "name": "get_time", "parameters": {}}',
        "",
        [("get_time", {})],
    ),
    Recorded(
        LLAMA3,
        "python_tag",
        '<|python_tag|>{"name": "get_current_temperature", "parameters": {"location": "Paris, France"}}',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        LLAMA3,
        "parallel after python_tag",
        '<|python_tag|>{"name": "get_current_temperature", "parameters": {"location": "Paris, France"}}; '
        '{"name": "get_current_temperature", "parameters": {"location": "Oslo, Norway", "unit": "celsius"}}',
        "",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    Recorded(
        LLAMA3,
        "text before python_tag",
        'Let me check.<|python_tag|>{"name": "get_time", "parameters": {"timezone": "UTC"}}',
        "Let me check.",
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        LLAMA3,
        "text before a JSON reply is an answer",
        'You could call {"name": "get_time", "parameters": {}}',
        'You could call {"name": "get_time", "parameters": {}}',
    ),
    Recorded(
        LLAMA3,
        "after thinking (R1 distill)",
        THOUGHT + '\n\n{"name": "get_current_temperature", "parameters": {"location": "Paris, France"}}',
        THOUGHT,
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        LLAMA3,
        "inside unclosed thinking",
        '<think>\n{"name": "get_time", "parameters": {}}',
        '<think>\n{"name": "get_time", "parameters": {}}',
    ),
    Recorded(
        LLAMA3,
        "a JSON answer",
        '  {"city": "Paris", "population": 2102650}',
        '  {"city": "Paris", "population": 2102650}',
    ),
    Recorded(
        LLAMA3, "bad JSON", '{"name": "get_time", "parameters": {"timezone": "UTC"}', "", malformed=BAD_JSON
    ),
    Recorded(
        LLAMA3,
        "unknown name",
        '{"name": "brave_search", "parameters": {"query": "Paris"}}',
        "",
        malformed=unknown_tool("brave_search"),
    ),
    Recorded(
        LLAMA3, "unclosed python_tag", '<|python_tag|>{"name": "get_time", "param', "", malformed=BAD_JSON
    ),
    Recorded(LLAMA3, "no call", "Paris is the capital of France.", "Paris is the capital of France."),
    # Mistral Nemo (v3 tokenizer: a JSON list), Mistral Small 3.2 and Devstral (name[ARGS]{…})
    Recorded(
        MISTRAL,
        "single list",
        '[TOOL_CALLS][{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}, '
        '"id": "a1b2c3d4e"}]',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        MISTRAL,
        "parallel list",
        '[TOOL_CALLS][{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}}, '
        '{"name": "get_current_temperature", "arguments": {"location": "Oslo, Norway", "unit": "celsius"}}]',
        "",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    Recorded(
        MISTRAL,
        "text before, list",
        'I will check the time.[TOOL_CALLS][{"name": "get_time", "arguments": {"timezone": "UTC"}}]',
        "I will check the time.",
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        MISTRAL,
        "single [ARGS]",
        '[TOOL_CALLS]get_current_temperature[ARGS]{"location": "Paris, France"}',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        MISTRAL,
        "parallel [ARGS]",
        '[TOOL_CALLS]get_current_temperature[ARGS]{"location": "Paris, France"}'
        '[TOOL_CALLS]get_current_temperature[ARGS]{"location": "Oslo, Norway", "unit": "celsius"}',
        "",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    Recorded(
        MISTRAL,
        "after thinking",
        THOUGHT + '[TOOL_CALLS]get_time[ARGS]{"timezone": "UTC"}',
        THOUGHT,
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        MISTRAL,
        "inside unclosed thinking",
        "<think>\n[TOOL_CALLS]get_time[ARGS]{}",
        "<think>\n[TOOL_CALLS]get_time[ARGS]{}",
    ),
    Recorded(MISTRAL, "bad JSON", '[TOOL_CALLS]get_time[ARGS]{"timezone": UTC}', "", malformed=BAD_JSON),
    Recorded(
        MISTRAL,
        "unknown name",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {}}]',
        "",
        malformed=unknown_tool("get_weather"),
    ),
    Recorded(
        MISTRAL, "unclosed", '[TOOL_CALLS][{"name": "get_time", "arguments": {"timez', "", malformed=BAD_JSON
    ),
    Recorded(MISTRAL, "no name", "[TOOL_CALLS][ARGS]{}", "", malformed=bad_shape("no name[ARGS]")),
    Recorded(MISTRAL, "no call", "Paris is lovely [in spring].", "Paris is lovely [in spring]."),
    # Functionary v3.2: the prompt ends with `>>>`, so the reply starts with a recipient
    Recorded(
        FUNCTIONARY,
        "single",
        'get_current_temperature\n{"location": "Paris, France"}',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        FUNCTIONARY,
        "parallel",
        'get_current_temperature\n{"location": "Paris, France"}\n'
        '>>>get_current_temperature\n{"location": "Oslo, Norway", "unit": "celsius"}',
        "",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    Recorded(
        FUNCTIONARY,
        "text before",
        'all\nLet me check the time.\n>>>get_time\n{"timezone": "UTC"}',
        "Let me check the time.\n",
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        FUNCTIONARY,
        "text with short lines, then a call",
        'all\nHello, world!\nnono\nWhat\'s up?>>>get_time\n{"timezone": "UTC"}\n',
        "Hello, world!\nnono\nWhat's up?",
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        FUNCTIONARY,
        "python code",
        "python\nimport math\nprint(math.pi)",
        "",
        [("python", {"code": "import math\nprint(math.pi)"})],
    ),
    Recorded(FUNCTIONARY, "text after a call", "get_time\n{}\n>>>all\nDone.", "Done.", [("get_time", {})]),
    Recorded(
        FUNCTIONARY, "inside unclosed thinking", "all\n<think>\n>>>get_time\n{}", "<think>\n>>>get_time\n{}"
    ),
    Recorded(FUNCTIONARY, "bad JSON", 'get_time\n{"timezone": "UTC"', "", malformed=BAD_JSON),
    Recorded(
        FUNCTIONARY,
        "unknown name",
        'get_weather\n{"location": "Paris"}',
        "",
        malformed=unknown_tool("get_weather"),
    ),
    Recorded(
        FUNCTIONARY, "unclosed recipient", "all\nOne moment.\n>>>get_ti", "One moment.\n", malformed=UNCLOSED
    ),
    Recorded(
        FUNCTIONARY, "no call", "all\nParis is the capital of France.", "Paris is the capital of France."
    ),
    # Any other template: a JSON object reply
    Recorded(
        GENERIC,
        "single tool_calls",
        '{"tool_calls": [{"name": "get_current_temperature", "arguments": {"location": "Paris, France"}}]}',
        "",
        [("get_current_temperature", PARIS)],
    ),
    Recorded(
        GENERIC,
        "parallel tool_calls",
        '{\n  "tool_calls": [\n'
        '    {"name": "get_current_temperature", "arguments": {"location": "Paris, France"}},\n'
        '    {"name": "get_current_temperature",\n'
        '     "arguments": {"location": "Oslo, Norway", "unit": "celsius"}}\n  ]\n}',
        "",
        [("get_current_temperature", PARIS), ("get_current_temperature", OSLO)],
    ),
    Recorded(
        GENERIC,
        "single name and arguments",
        '{"name": "get_time", "arguments": {"timezone": "UTC"}}',
        "",
        [("get_time", {"timezone": "UTC"})],
    ),
    Recorded(
        GENERIC, "tool_call", '{"tool_call": {"name": "get_time", "arguments": {}}}', "", [("get_time", {})]
    ),
    Recorded(GENERIC, "response", '{"response": "It is 12:00 in Paris."}', "It is 12:00 in Paris."),
    Recorded(
        GENERIC,
        "after thinking",
        THOUGHT + '\n{"name": "get_time", "arguments": {}}',
        THOUGHT,
        [("get_time", {})],
    ),
    Recorded(GENERIC, "text before is an answer", 'Call {"name": "get_time"}', 'Call {"name": "get_time"}'),
    Recorded(
        GENERIC, "bad JSON", '{"tool_calls": [{"name": "get_time", "arguments": {}}', "", malformed=BAD_JSON
    ),
    Recorded(
        GENERIC,
        "unknown name",
        '{"name": "get_weather", "arguments": {}}',
        "",
        malformed=unknown_tool("get_weather"),
    ),
    Recorded(GENERIC, "no call", "It is noon in Paris.", "It is noon in Paris."),
    Recorded(GENERIC, "braces in prose", "{x} is a set.", "{x} is a set."),
]
