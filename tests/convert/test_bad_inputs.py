"""Every bad input ends in one clear line on stderr and a non-zero exit, never a traceback or partial file.

Most run in this process, through the CLI's own error boundary (the same message and exit code); a
child where the process is the point: held to file permissions, interrupted, or reading HF_* on start."""

from __future__ import annotations

import json
import shutil
import signal
import time
from pathlib import Path

import pytest

from llmcli.errors import ExitStatus
from tests.support.cli import Result, cli, cli_process, spawn_cli


def assert_clean_error(proc: Result, status: ExitStatus, *phrases: str) -> None:
    assert proc.exit_code == status, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmcli: error: "), proc.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    assert proc.stdout == ""


def copy_checkpoint(src: Path, dst: Path, skip: tuple[str, ...] = ()) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in skip:
            shutil.copy(f, dst / f.name)
    return dst


def test_missing_config_json(tmp_path):
    assert_clean_error(cli("convert", str(tmp_path)), ExitStatus.USAGE, "no config.json", str(tmp_path))


def test_unsupported_architecture_lists_the_supported_ones(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    assert_clean_error(
        cli("convert", str(tmp_path)),
        ExitStatus.USAGE,
        "GPT2LMHeadModel",
        "LlamaForCausalLM",
        "Qwen2ForCausalLM",
        "Qwen3ForCausalLM",
        "Phi3ForCausalLM",
    )


def test_missing_tokenizer(tmp_path, tiny):
    src = copy_checkpoint(
        tiny("llama"), tmp_path / "ckpt", skip=("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
    )
    assert_clean_error(
        cli("convert", str(src), "-o", str(tmp_path / "out.gguf")), ExitStatus.USAGE, "no tokenizer"
    )
    assert not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize(
    "header",
    [
        b"\xff" * 8 + b"{}",  # a length far past the end of the file
        (20).to_bytes(8, "little") + b'{"a": not json !!!}',
        (2).to_bytes(8, "little") + b"[]",
    ],
)
def test_corrupt_safetensors_header(tmp_path, tiny, header):
    src = copy_checkpoint(tiny("llama"), tmp_path / "ckpt", skip=("model.safetensors",))
    (src / "model.safetensors").write_bytes(header + b"\0" * 64)
    assert_clean_error(
        cli("convert", str(src), "-o", str(tmp_path / "out.gguf")),
        ExitStatus.USAGE,
        "model.safetensors",
        "corrupt",
    )


def test_pickle_only_checkpoint_is_refused_with_the_reason(tmp_path, tiny):
    src = copy_checkpoint(tiny("llama"), tmp_path / "ckpt", skip=("model.safetensors",))
    (src / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle; never loaded
    assert_clean_error(
        cli("convert", str(src)), ExitStatus.USAGE, "pickle", "run arbitrary code", "safetensors"
    )


def test_output_folder_that_does_not_exist(tmp_path, tiny):
    out = tmp_path / "no" / "such" / "out.gguf"
    assert_clean_error(
        cli("convert", str(tiny("llama")), "-o", str(out)), ExitStatus.USAGE, "does not exist", "-o"
    )


def test_output_folder_that_is_a_file(tmp_path, tiny):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert_clean_error(
        cli("convert", str(tiny("llama")), "-o", str(blocker / "out.gguf")),
        ExitStatus.USAGE,
        "not a folder",
    )


def test_unwritable_output_folder(tmp_path, tiny):
    """The child is held to file permissions even when the tests run as root (as on CI)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        assert_clean_error(
            cli_process("convert", str(tiny("llama")), "-o", str(folder / "out.gguf"), unprivileged=True),
            ExitStatus.USAGE,
            "cannot write in",
            "permission",
        )
        assert list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_ctrl_c_leaves_no_file(tmp_path, smol_hf):
    """SIGINT in the middle of writing: exit 130, and neither the .gguf nor its temporary file remains."""
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = spawn_cli("convert", str(smol_hf), "-q", "q8_0", "-o", str(out_dir / "smol.gguf"))
    deadline = time.monotonic() + 60
    while not any(p.name.endswith(".partial") and p.stat().st_size > 1_000_000 for p in out_dir.iterdir()):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    err = proc.result(timeout=60).stderr
    assert proc.returncode == ExitStatus.INTERRUPTED, err
    assert "Traceback" not in err and "interrupted" in err
    assert list(out_dir.iterdir()) == []


def test_error_during_writing_leaves_no_file(tmp_path, tiny):
    from llmcli.convert import convert_checkpoint

    def explode(name, done, total):
        if name.startswith("blk.1"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        convert_checkpoint(tiny("qwen2"), tmp_path / "x.gguf", "q8_0", progress=explode)
    assert list(tmp_path.iterdir()) == []


def test_full_disk_mid_write_is_a_clear_error_and_leaves_no_file(tmp_path, tiny, monkeypatch):
    import errno

    from llmcli.convert import convert_checkpoint, core
    from llmcli.convert.errors import ConversionFailed

    real = core._tensor_data
    calls = []

    def full_after_three(t):
        calls.append(t.name)
        if len(calls) > 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(t)

    monkeypatch.setattr(core, "_tensor_data", full_after_three)
    with pytest.raises(ConversionFailed, match="disk filled up.*nothing was left behind"):
        convert_checkpoint(tiny("llama"), tmp_path / "x.gguf", "f16")
    assert list(tmp_path.iterdir()) == []


def test_not_enough_free_space_is_refused_before_writing(tmp_path, tiny, monkeypatch):
    from collections import namedtuple

    from llmcli import fsutil
    from llmcli.convert import convert_checkpoint
    from llmcli.convert.errors import ConversionFailed

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(fsutil.shutil, "disk_usage", lambda p: usage(10**9, 10**9, 1000))
    with pytest.raises(ConversionFailed, match="not enough free space"):
        convert_checkpoint(tiny("llama"), tmp_path / "x.gguf", "f16")
    assert list(tmp_path.iterdir()) == []


def test_unknown_outtype(tiny):
    assert_clean_error(
        cli("convert", str(tiny("llama")), "--outtype", "q3_xs"), ExitStatus.USAGE, "q3_xs", "q4_k_m"
    )


def test_repo_id_not_in_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert_clean_error(
        cli_process("convert", "someone/not-downloaded"),
        ExitStatus.USAGE,
        "someone/not-downloaded",
        "Hugging Face cache",
    )


def test_unrecognised_pre_tokenizer_is_refused_not_guessed(tmp_path, tiny):
    src = copy_checkpoint(tiny("qwen2"), tmp_path / "ckpt")
    tj = json.loads((src / "tokenizer.json").read_text(encoding="utf-8"))
    tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\s+"
    (src / "tokenizer.json").write_text(json.dumps(tj), encoding="utf-8")
    # No known pre-tokenizer matches it exactly, and none splits text as it does: the check corpus shows it.
    assert_clean_error(
        cli("convert", str(src), "-o", str(tmp_path / "out.gguf")),
        ExitStatus.USAGE,
        "pre-tokenizer",
        "is not one llama.cpp reproduces",
        "the ids first differ on 'ied 4 ½ months'",
        "tried smollm, qwen2, llama-bpe, gpt-2",
        "refusing",
    )
    assert not (tmp_path / "out.gguf").exists()


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "name, words",
    [
        ("../../escaped", "bad model name"),
        ("/tmp/absolute", "bad model name"),
        ("a//b", "bad model name"),
        ("a/../b", "bad model name"),
        (".hidden", "bad model name"),
        ("bad\nname", "bad model name"),
        ("x" * 201, "at most 200"),
        ("model.GGUF", "reads as a file path"),
        ("smollm2-135m-instruct", "the embedded model's name"),
    ],
    ids=["parent", "absolute", "empty-part", "dot-dot", "dot-first", "newline", "long", "gguf", "embedded"],
)
def test_a_name_that_is_not_a_model_name_is_refused_before_anything_is_written(
    tmp_path, tiny, llmcli_home, name, words
):
    before = files_under(tmp_path)
    assert_clean_error(cli("convert", str(tiny("llama")), "--name", name), ExitStatus.USAGE, words)
    assert files_under(tmp_path) == before
    # pull checks --name before it reaches for the network
    assert_clean_error(cli("pull", "Org/Model-GGUF", "--name", name), ExitStatus.USAGE, words)


def test_a_name_with_parts_is_one_file_in_blobs(tiny, llmcli_home):
    proc = cli("convert", str(tiny("llama")), "--name", "me/tiny:f16", "-q", "f16")
    assert proc.exit_code == 0, proc.stderr
    name, path = proc.stdout.strip().split("\t")
    assert name == "me/tiny:f16" and Path(path) == (llmcli_home / "blobs" / "me--tiny-f16.gguf").resolve()


@pytest.mark.parametrize("target", ["model.safetensors", "config.json", "out"])
def test_output_that_is_not_a_gguf_name_is_refused_and_the_source_kept(tmp_path, tiny, target):
    src = copy_checkpoint(tiny("llama"), tmp_path / "ckpt")
    before = {p: p.read_bytes() for p in files_under(src)}
    assert_clean_error(cli("convert", str(src), "-o", str(src / target)), ExitStatus.USAGE, "ending in .gguf")
    assert {p: p.read_bytes() for p in files_under(src)} == before


def test_output_onto_another_models_file_is_refused(tmp_path, tiny, llmcli_home):
    first = cli("convert", str(tiny("llama")), "--name", "first", "-q", "f16")
    assert first.exit_code == 0, first.stderr
    path = Path(first.stdout.strip().split("\t")[1])
    kept = path.read_bytes()
    assert_clean_error(
        cli("convert", str(tiny("llama")), "--name", "second", "-q", "q8_0", "-o", str(path)),
        ExitStatus.USAGE,
        "the file of the model first",
    )
    assert path.read_bytes() == kept


def test_a_file_where_the_store_keeps_its_blobs_is_named_with_the_fix(tiny, llmcli_home):
    llmcli_home.mkdir(parents=True, exist_ok=True)
    (llmcli_home / "blobs").write_text("not a folder")
    assert_clean_error(
        cli("convert", str(tiny("llama")), "--name", "x"),
        ExitStatus.USAGE,
        f"already exists: {llmcli_home / 'blobs'}; move it away",
    )
