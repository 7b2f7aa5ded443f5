"""Inputs past llmcli's documented limits (llmcli.limits): each is one line on stderr and exit 2.

Every case runs `python -m llmcli` as a child under an address-space limit and a timeout, so a
regression (an unbounded read, a KV cache allocated whole, llama.cpp's parser overflowing its
stack) fails its test instead of taking the machine down.
"""

from __future__ import annotations

import json
import os

import pytest

from llmcli.limits import limit, max_threads
from tests.fuzz.bounded import NO_MODEL, run_bounded
from tests.support.cli import Result


def assert_one_line(result: Result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.stderr[-500:])
    assert result.stderr.startswith("llmcli: error: ") and result.stderr.count("\n") == 1, result.stderr
    for needle in needles:
        assert needle in result.stderr, result.stderr
    assert result.stdout == ""


# -- unbounded reads and files that are not regular -------------------------------------------------
def test_chat_reads_stdin_no_further_than_the_context_holds(embedded_path):
    with open("/dev/zero", "rb") as zero:
        result = run_bounded("chat", embedded_path, stdin=zero)
    cap = 4096 * limit("bytes_per_token")
    assert_one_line(result, f"stdin is over {cap:,} characters", "raise --ctx (now 4,096 tokens)")


def test_the_stdin_cap_follows_ctx(embedded_path):
    cap = 256 * limit("bytes_per_token")
    result = run_bounded("chat", embedded_path, "--ctx", "256", input="word " * (cap // 5 + 10))
    assert_one_line(result, f"stdin is over {cap:,} characters", "(now 256 tokens)")


def _fifo(tmp_path, name: str) -> str:
    path = tmp_path / name
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    "option, target",
    [
        ("--grammar", "fifo"),
        ("--grammar", "/dev/zero"),
        ("--filter", "fifo"),
        ("--filter", "/dev/zero"),
        ("--schema", "fifo"),
        ("--schema", "/dev/zero"),
    ],
)
def test_every_file_option_takes_regular_files_only(tmp_path, embedded_path, option, target):
    path = _fifo(tmp_path, "pipe") if target == "fifo" else target
    model = embedded_path if option == "--filter" else NO_MODEL  # the filter is read as the model loads
    result = run_bounded("chat", "-m", model, "--no-log", option, path, "hi", timeout=60)
    assert_one_line(result, f"{path} is not a regular file")


@pytest.mark.parametrize("option", ["--grammar", "--filter", "--schema"])
def test_an_option_file_past_its_limit_is_refused_unread(tmp_path, embedded_path, option):
    big = tmp_path / "big.txt"
    big.write_text("x" * (limit("option_file_bytes") + 1))
    model = embedded_path if option == "--filter" else NO_MODEL
    result = run_bounded("chat", "-m", model, "--no-log", option, str(big), "hi")
    assert_one_line(result, f"over the {limit('option_file_bytes'):,}-byte limit")


# -- threads and context -----------------------------------------------------------------------------
@pytest.mark.parametrize("threads", ["100000", "1024"])
def test_threads_past_the_cap_are_one_line(embedded_path, threads):
    result = run_bounded("chat", embedded_path, "-t", threads, "--no-log", "hi")
    assert_one_line(result, f"-t {int(threads):,} is more threads", f"at most {max_threads():,}")


def test_a_context_whose_kv_cache_cannot_fit_is_refused_before_allocating(embedded_path):
    # 23 GB of KV cache for this model, past the child's 4 GB of address space (or the machine's memory).
    result = run_bounded("chat", embedded_path, "--ctx", "1000000", "--no-log", "hi")
    assert_one_line(result, "--ctx 1,000,000 needs", "of KV cache", "give a smaller --ctx (at most about")


@pytest.mark.parametrize("ctx", [limit("ctx") + 1, 99_999_999])
def test_a_context_past_the_documented_cap_is_refused(embedded_path, ctx):
    result = run_bounded("chat", embedded_path, "--ctx", str(ctx), "--no-log", "hi")
    assert_one_line(result, f"--ctx {ctx:,} is over the limit of {limit('ctx'):,} tokens")


# -- grammars llama.cpp's parser would overflow on ----------------------------------------------
def _grammar(tmp_path, text: str) -> str:
    path = tmp_path / "g.gbnf"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "grammar, message",
    [
        ("root ::= " + "(" * 30_000 + '"a"' + ")" * 30_000, "nests parentheses 30,000 deep"),
        (
            "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(10_000)) + 'r10000 ::= "a"\n',
            "a chain of 10,002 rules each naming the next",
        ),
    ],
    ids=["deep", "chained"],
)
def test_grammars_that_crashed_llama_cpp_are_refused_first(tmp_path, grammar, message):
    result = run_bounded("chat", "-m", NO_MODEL, "--grammar", _grammar(tmp_path, grammar), "hi")
    assert_one_line(result, message, "fix the grammar")


def test_parentheses_inside_literals_classes_and_comments_are_not_nesting(tmp_path):
    grammar = 'root ::= "((((" [(] "a" # ((((((\n' * 1 + "x ::= " + '"(" ' * 2000 + "\n"
    result = run_bounded("chat", "-m", NO_MODEL, "--grammar", _grammar(tmp_path, grammar), "hi")
    assert_one_line(result, f"no such file: {NO_MODEL}")  # the grammar passed; the model is next


# -- schemas whose sizes explode -------------------------------------------------------------------
def _schema_file(tmp_path, schema) -> str:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    return str(path)


ITEMS = {"type": "string"}


@pytest.mark.parametrize(
    "schema, message",
    [
        (
            {"type": "array", "items": ITEMS, "maxItems": 10**9},
            "maxItems 1,000,000,000 at / is over the limit of 256",
        ),
        (
            {"type": "object", "properties": {"x": {"type": "array", "items": ITEMS, "minItems": 10**9}}},
            "minItems 1,000,000,000 at /properties/x is over the limit of 256",
        ),
        ({"type": "string", "maxLength": 10**9}, "maxLength 1,000,000,000 at / is over the limit of 256"),
        ({"type": "string", "minLength": 10**9}, "minLength 1,000,000,000 at / is over the limit of 256"),
        ({"type": "string", "pattern": "^a{1,100000}$"}, "the pattern's {1,100000}: a count of 100,000"),
        ({"enum": list(range(2_000))}, "enum of 2,000 at / is over the limit of 1,024 values"),
        ({"anyOf": [{"type": "null"}] * 20_000}, "anyOf of 20,000 at / is over the limit of 128 branches"),
        (
            {"type": "object", "properties": {f"p{i}": ITEMS for i in range(300)}},
            "properties: 300 at / is over the limit of 256",
        ),
        ({"enum": ["x" * 10_000]}, "a enum value of 10,000 at / is over the limit of 4,096 characters"),
        ({"type": "object", "properties": {"k" * 5000: ITEMS}}, "a property name of 5,000"),
    ],
    ids=[
        "maxItems",
        "minItems",
        "maxLength",
        "minLength",
        "pattern",
        "enum",
        "anyOf",
        "properties",
        "string",
        "name",
    ],
)
def test_schema_sizes_are_refused_in_the_schemas_words(tmp_path, schema, message):
    text = json.dumps(schema)
    arg = text if len(text) < 100_000 else _schema_file(tmp_path, schema)
    result = run_bounded("chat", "-m", NO_MODEL, "--schema", arg, "hi")
    assert_one_line(result, "--schema: ", message)
    assert "grammar" not in result.stderr


# -- render gets chat's bounds -----------------------------------------------------------------------
def test_render_reads_stdin_no_further_than_a_prompt_may_be(embedded_path):
    with open("/dev/zero", "rb") as zero:
        result = run_bounded("render", embedded_path, stdin=zero)
    assert_one_line(result, f"stdin is over {limit('prompt_bytes'):,} characters")


def test_render_refuses_a_messages_file_past_the_prompt_limit(tmp_path, embedded_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "x" * 50_000_000}]))
    result = run_bounded("render", embedded_path, "--messages", str(path))
    assert_one_line(result, f"over the {limit('prompt_bytes'):,}-byte limit for a messages file")


def test_render_refuses_deeply_nested_messages(tmp_path, embedded_path):
    path = tmp_path / "m.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    result = run_bounded("render", embedded_path, "--messages", str(path))
    assert_one_line(result, "is not a list of messages (its JSON nests too deeply to read)")


def test_render_refuses_too_many_messages_without_blaming_the_template(tmp_path, embedded_path):
    path = tmp_path / "m.json"
    n = limit("messages") + 1
    path.write_text(json.dumps([{"role": "user", "content": ""}] * n))
    result = run_bounded("render", embedded_path, "--messages", str(path))
    assert_one_line(result, f"a message count of {n:,} is over the limit of {limit('messages'):,} messages")
    assert "template" not in result.stderr


def test_render_refuses_a_fifo_for_messages(tmp_path, embedded_path):
    fifo = _fifo(tmp_path, "messages")
    result = run_bounded("render", embedded_path, "--messages", fifo, timeout=60)
    assert_one_line(result, f"{fifo} is not a regular file")
