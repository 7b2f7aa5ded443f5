"""Reading checkpoints: header validation, shards, the dry run, the store, the checkout script."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llmcli.convert.errors import BadCheckpoint
from llmcli.convert.safetensors_io import read_header
from llmcli.model_ref import model_ref
from tests.support.cli import cli, cli_process, cli_store

ROOT = Path(__file__).resolve().parents[2]


def write_raw(path: Path, header: dict, data: bytes) -> Path:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    return path


@pytest.mark.parametrize(
    "header, data, phrase",
    [
        ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "outside the file"),
        (
            {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}},
            b"\0" * 16,
            "does not match its shape",
        ),
        (
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
            "overlap",
        ),
        ({"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2, "BF16, F16 and F32"),
        ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b"", "invalid shape"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": "x"}}, b"\0" * 4, "invalid data_offsets"),
        ({"__metadata__": [1]}, b"", "__metadata__"),
    ],
)
def test_malformed_headers_are_clean_errors(tmp_path, header, data, phrase):
    with pytest.raises(BadCheckpoint, match=phrase):
        read_header(write_raw(tmp_path / "m.safetensors", header, data))


def test_truncated_file(tmp_path):
    (tmp_path / "m.safetensors").write_bytes(b"\x10\0")
    with pytest.raises(BadCheckpoint, match="not a safetensors file"):
        read_header(tmp_path / "m.safetensors")


def test_sharded_checkpoint_converts_to_the_same_tensors(tmp_path, tiny, converted):
    import gguf
    import torch
    from transformers import AutoModelForCausalLM

    from llmcli.convert import convert_checkpoint

    src = tiny("qwen2")
    sharded = tmp_path / "sharded"
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16)
    model.save_pretrained(sharded, max_shard_size="2MB")
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 1
    for f in src.iterdir():
        if f.name.startswith(("tokenizer", "chat_template", "generation")):
            (sharded / f.name).write_bytes(f.read_bytes())
    convert_checkpoint(sharded, tmp_path / "sharded.gguf", "f32")
    a = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(converted(src, "f32"))).tensors}
    b = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(tmp_path / "sharded.gguf")).tensors}
    assert a.keys() == b.keys()
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_dry_run_prints_the_plan_and_writes_nothing(tiny, llmcli_home):
    proc = cli_process("convert", str(tiny("qwen3")), "--dry-run", "-q", "q8_0")
    assert proc.exit_code == 0, proc.stderr
    for phrase in (
        "Qwen3ForCausalLM -> qwen3",
        "gpt2/qwen2",
        "blk.1.attn_q_norm.weight",
        "Q8_0",
        "output size",
    ):
        assert phrase in proc.stdout
    assert not llmcli_home.exists() or not any(llmcli_home.rglob("*.gguf"))


def test_dry_run_json_is_the_plan_the_conversion_then_follows(tiny, llmcli_home):
    import gguf

    src = tiny("qwen3")
    r = cli("convert", str(src), "--dry-run", "--json", "-q", "q8_0")
    assert r.exit_code == 0, r.stderr
    plan = json.loads(r.stdout)
    assert not llmcli_home.exists() or not any(llmcli_home.rglob("*.gguf"))  # a plan writes nothing
    text = cli("convert", str(src), "--dry-run", "-q", "q8_0").stdout
    assert f"tensors:       {len(plan['tensors'])}\n" in text  # the same plan as the text one
    assert (plan["hf_arch"], plan["arch"], plan["outtype"]) == ("Qwen3ForCausalLM", "qwen3", "q8_0")
    assert (plan["src"], plan["into_store"], plan["intermediate_size"]) == (str(src), True, 0)
    assert plan["tokenizer"]["model"] == "gpt2" and plan["tokenizer"]["pre"] == "qwen2"

    done = json.loads(cli("convert", str(src), "-q", "q8_0", "--json").stdout)
    assert (done["name"], done["path"]) == (plan["name"], plan["output"])
    size = Path(done["path"]).stat().st_size
    assert (
        abs(size - plan["estimated_size"]) < size / 50
    )  # the tensors are exact (below); metadata is guessed
    written = gguf.GGUFReader(done["path"]).tensors
    assert [(t["name"], t["qtype"], t["shape"], t["nbytes"]) for t in plan["tensors"]] == [
        (t.name, t.tensor_type.name, [int(d) for d in reversed(t.shape)], int(t.n_bytes)) for t in written
    ]
    tokens = gguf.GGUFReader(done["path"]).fields["tokenizer.ggml.tokens"]
    assert plan["tokenizer"]["n_tokens"] == len(tokens.data)


def test_convert_registers_the_model_in_the_store(tiny, llmcli_home):
    from llmcli.model_ref import model_ref
    from llmcli.store import Store

    proc = cli_process("convert", str(tiny("llama")), "--name", "tiny-llama", "-q", "f16")
    assert proc.exit_code == 0, proc.stderr
    name, path = proc.stdout.strip().split("\t")
    assert name == "tiny-llama" and Path(path).is_file()
    entry = Store(llmcli_home).resolve(model_ref("tiny-llama"))
    assert entry.path == str(Path(path).resolve()) and entry.arch == "llama" and entry.quant == "F16"
    assert entry.hf_dir == str(tiny("llama").resolve()) and entry.n_params > 0


def test_convert_json_is_one_record_with_the_outputs_sha256(tiny, llmcli_home):
    import hashlib

    r = cli("convert", str(tiny("llama")), "--name", "tiny-llama", "-q", "q8_0", "--json")
    assert r.exit_code == 0, r.stderr
    record = json.loads(r.stdout)
    path = Path(record["path"])
    assert record == {
        "name": "tiny-llama",
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "quant": "Q8_0",
        "source": f"convert:{tiny('llama').resolve()}",
        "tokenizer": {
            "model": "gpt2",
            "pre": "llama-bpe",
            "verified_by": "definition",
            "check_strings": 0,
            "check_tokens": 0,
            "corpus": "",
            "tried": [],
        },
    }
    assert cli_store().resolve(model_ref("tiny-llama")).path == str(path)


def test_checkout_script_converts(tmp_path, tiny):
    out = tmp_path / "x.gguf"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/convert/hf_to_gguf.py"),
            str(tiny("phi3")),
            "-o",
            str(out),
            "--outtype",
            "bf16",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and proc.stdout.strip() == str(out)


def test_export_names_map_back_through_gguf_tensor_map():
    """export's GGUF -> HF table and the converter's HF -> GGUF mapping (gguf's TensorNameMap) agree."""
    import gguf

    from llmcli.convert.export_hf import LLAMA_NAMES

    tmap = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
    for gguf_name, hf_name in LLAMA_NAMES.items():
        assert tmap.get_name(hf_name.format(bid=1), try_suffixes=(".weight",)) == gguf_name.format(bid=1)
