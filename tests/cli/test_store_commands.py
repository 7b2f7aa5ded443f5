"""list, show, rm and tokenize on the embedded model and on a registered copy of it."""

from __future__ import annotations

import json
import shutil

import pytest

from llmcli.store import ModelEntry
from tests.support.cli import cli, cli_process, cli_store


def test_list_shows_the_embedded_model():
    result = cli_process("list", "--json")
    models = json.loads(result.stdout)
    assert [m["name"] for m in models] == ["smollm2-135m-instruct"]
    assert models[0]["quant"] == "Q4_1" and models[0]["arch"] == "llama" and models[0]["n_params"] > 1e8
    table = cli_process("list")
    assert "smollm2-135m-instruct" in table.stdout and "Q4_1" in table.stdout


def test_show_reports_kv_cache_cost():
    doc = json.loads(cli_process("show", "smollm2", "--json", "--ctx", "1024").stdout)
    assert doc["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert doc["kv_bytes_for_ctx"] == doc["kv_bytes_per_token"] * 1024
    assert "<|im_start|>" in doc["chat_template"]
    text = cli_process("show", "smollm2").stdout
    assert "KV cache / token" in text and "23,040 B" in text


def test_registered_model_is_listed_chatted_and_removed(tmp_path, embedded_path, private_store):
    copy = tmp_path / "copy.gguf"
    shutil.copy(embedded_path, copy)
    cli_store().register(ModelEntry(name="my-smol", path=str(copy), files=[str(copy)], source="test"))
    assert "my-smol" in cli_process("list").stdout
    assert cli_process("chat", "my-smol", "hi", "--temp", "0", "-n", "4").exit_code == 0
    ambiguous = cli_process("chat", "-m", "", "hi", "-n", "2")  # empty -m falls back to the default
    assert ambiguous.exit_code == 0
    gone = cli_process("rm", "my-smol")
    assert gone.exit_code == 0 and "removed my-smol" in gone.stderr
    assert "my-smol" not in cli_process("list").stdout


def test_a_model_whose_file_is_gone_is_listed_missing_refused_by_name_and_removable(tmp_path, embedded_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(embedded_path, copy)
    cli_store().register(ModelEntry(name="my-smol", path=str(copy), files=[str(copy)], source="test"))
    copy.unlink()
    row = next(line for line in cli_process("list").stdout.splitlines() if line.startswith("my-smol"))
    assert row.split()[1] == "missing"
    for argv in (["show", "my-smol"], ["chat", "my-smol", "hi", "-n", "2"]):
        refused = cli_process(*argv)
        assert refused.exit_code == 2 and refused.stdout == "", refused.stderr
        assert refused.stderr == (
            f"llmcli: error: the file of my-smol is gone ({copy}); "
            "run `llmcli rm my-smol`, then pull or convert it again\n"
        )
    assert cli_process("rm", "my-smol").exit_code == 0
    assert "my-smol" not in cli_process("list").stdout


def test_rm_json_is_one_record_and_null_sha256_for_a_file_not_in_the_hf_cache(tmp_path, embedded_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(embedded_path, copy)
    cli_store().register(
        ModelEntry(
            name="my-smol",
            path=str(copy),
            files=[str(copy)],
            source="test",
            quant="Q4_1",
            size=copy.stat().st_size,
        )
    )
    gone = cli("rm", "my-smol", "--json")
    assert gone.exit_code == 0, gone.stderr
    assert json.loads(gone.stdout) == {
        "name": "my-smol",
        "path": str(copy),
        "size": copy.stat().st_size,
        "sha256": None,
        "quant": "Q4_1",
        "source": "test",
    }
    missing = cli("rm", "my-smol", "--json")
    assert (missing.exit_code, missing.stdout) == (2, "")


def test_tokenize_shows_ids_and_pieces():
    doc = json.loads(cli_process("tokenize", "smollm2", "Hello <|im_end|>", "--json").stdout)
    assert doc["n_tokens"] == len(doc["ids"]) > 3  # the control token stays plain text
    special = json.loads(cli_process("tokenize", "smollm2", "Hello <|im_end|>", "--json", "--special").stdout)
    assert "<|im_end|>" in special["pieces"] and len(special["ids"]) < len(doc["ids"])


@pytest.mark.parametrize("command", [["tokenize", "smollm2"], ["render", "smollm2", "--ids"]])
def test_token_tables_show_control_characters_escaped_never_raw(command):
    text = "a\x1b[31mred\rb\x07[bold]c"
    argv = [*command, text] if command[0] == "tokenize" else command
    stdin = None if command[0] == "tokenize" else json.dumps([{"role": "user", "content": text}])
    result = cli_process(*argv, input=stdin)
    assert result.exit_code == 0, result.stderr
    assert not any(ch in result.stdout for ch in "\x1b\r\x07")  # the terminal sees no control character
    for shown in ("'\\x1b'", "'\\r'", "'\\x07'", "'['"):  # each as its escape, in quotes
        assert shown in result.stdout, result.stdout
    assert "bold" in result.stdout  # text, not rich markup


@pytest.mark.parametrize("command", [["chat", "-n", "4", "-m"], ["show"]])
def test_a_folder_given_as_the_model_says_what_to_give_instead(tmp_path, command):
    checkpoint, plain, named = tmp_path / "ckpt", tmp_path / "plain", tmp_path / "looks.gguf"
    for folder in (checkpoint, plain, named):
        folder.mkdir()
    (checkpoint / "config.json").write_text("{}")
    cases = [
        (checkpoint, f"checkpoint folder; convert it first: `llmcli convert {checkpoint}`"),
        (plain, "is a folder; give a .gguf file in it"),
        (named, "is a folder; give a .gguf file in it"),
    ]
    for folder, words in cases:
        argv = [*command, str(folder)] + (["hi"] if command[0] == "chat" else [])
        result = cli_process(*argv)
        assert result.exit_code == 2 and result.stdout == "", result.stderr
        assert result.stderr.startswith(f"llmcli: error: {folder} ") and words in result.stderr, result.stderr
        assert len(result.stderr.splitlines()) == 1
