"""Hostile and inconsistent checkpoints: each is one clear line naming the file or field, exit 2.

Every case runs the real CLI (`llmcli convert DIR`, in this process through its error boundary: a child
per case only repeated the interpreter's start) on a hand-made tiny checkpoint that converts cleanly,
with one thing broken. The run's time limit is the hang check. test_bad_inputs runs convert as a child.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from llmcli.errors import ExitStatus
from tests.convert.handmade import CONFIG, llama_shapes, write_tiny_llama
from tests.convert.test_bad_inputs import assert_clean_error
from tests.support.cli import cli

DEEP = "[" * 100_000 + "]" * 100_000  # nested past Python's recursion limit


def convert(src: Path, tmp_path: Path):
    out = tmp_path / "out.gguf"
    proc = cli("convert", str(src), "-o", str(out), time_limit=60)
    assert not out.exists() or proc.exit_code == 0
    return proc


def test_the_handmade_checkpoint_converts(tmp_path):
    proc = convert(write_tiny_llama(tmp_path / "ckpt"), tmp_path)
    assert proc.exit_code == 0, proc.stderr
    assert (tmp_path / "out.gguf").stat().st_size > 0


# -- config.json: the typed table ----------------------------------------------------------------


@pytest.mark.parametrize(
    "change, phrases",
    [
        ({"num_hidden_layers": 10_000_000}, ("num_hidden_layers", "at most 1,024")),
        ({"num_hidden_layers": 3}, ("num_hidden_layers 3", "weights hold 2 blocks")),
        ({"num_attention_heads": 0}, ("num_attention_heads is 0", "at least 1")),
        ({"num_attention_heads": 3}, ("hidden_size 16", "num_attention_heads 3")),
        ({"num_attention_heads": 4, "head_dim": 8}, ("self_attn", "[16, 16]", "q_width 32")),
        ({"num_key_value_heads": 3}, ("num_key_value_heads 3", "does not divide")),
        ({"vocab_size": 10**12}, ("vocab_size", "at most")),
        ({"vocab_size": 300}, ("vocab_size 300", "260 rows")),
        ({"head_dim": 0}, ("head_dim is 0",)),
        ({"hidden_size": "16"}, ("hidden_size is '16'", "an integer")),
        ({"rms_norm_eps": -1}, ("rms_norm_eps",)),
        ({"rope_scaling": {"rope_type": "linear"}}, ("rope_scaling", "needs factor")),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, ("original_max_position_embeddings",)),
        ({"rope_scaling": [1, 2]}, ("rope_scaling is not an object",)),
        (
            {
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8,
                    "low_freq_factor": 4,
                    "high_freq_factor": 4,
                }
            },
            ("high_freq_factor",),
        ),
        ({"tie_word_embeddings": "no"}, ("tie_word_embeddings", "true or false")),
        ({"text_config": [1]}, ("text_config",)),
        ({"architectures": {"a": 1}}, ("no architecture",)),
        ({"max_position_embeddings": None}, ("no max_position_embeddings",)),
    ],
)
def test_bad_config_values(tmp_path, change, phrases):
    src = write_tiny_llama(tmp_path / "ckpt")
    cfg = {**CONFIG, **change}
    (src / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))
    assert_clean_error(convert(src, tmp_path), ExitStatus.USAGE, *phrases)


# -- tensors against the config: the shape table ------------------------------------------------


def _shapes(**changed: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    return {**llama_shapes(CONFIG), **{k.replace("__", "."): v for k, v in changed.items()}}


@pytest.mark.parametrize(
    "shapes, phrases",
    [
        (
            _shapes(**{"model__layers__0__mlp__down_proj__weight": (32, 16)}),
            ("model.layers.0.mlp.down_proj.weight", "[32, 16]", "[16, 32]", "hidden 16, intermediate 32"),
        ),
        (_shapes(**{"model__embed_tokens__weight": (260, 8)}), ("model.embed_tokens.weight", "[260, 16]")),
        (
            _shapes(**{"model__embed_tokens__weight": (100_000_000, 0)}),
            ("model.embed_tokens.weight", "100000000 rows", "vocab_size 260"),
        ),
        (_shapes(**{"model__layers__1__input_layernorm__weight": (17,)}), ("input_layernorm", "[16]")),
        (_shapes(**{"model__layers__0__self_attn__k_proj__weight": (16, 16)}), ("k_proj", "kv_width 8")),
    ],
)
def test_tensor_shapes_that_disagree_with_the_config(tmp_path, shapes, phrases):
    src = write_tiny_llama(tmp_path / "ckpt", shapes=shapes)
    assert_clean_error(convert(src, tmp_path), ExitStatus.USAGE, *phrases)


def test_embedding_of_100M_empty_rows_without_vocab_size_is_bounded(tmp_path):
    cfg = {k: v for k, v in CONFIG.items() if k != "vocab_size"}
    src = write_tiny_llama(
        tmp_path / "ckpt", shapes=_shapes(**{"model__embed_tokens__weight": (100_000_000, 0)})
    )
    (src / "config.json").write_text(json.dumps(cfg))
    assert_clean_error(
        convert(src, tmp_path), ExitStatus.USAGE, "model.embed_tokens.weight", "100000000 rows", "16777216"
    )


def test_extra_block_beyond_the_config(tmp_path):
    src = write_tiny_llama(
        tmp_path / "ckpt", shapes={**_shapes(), "model.layers.2.input_layernorm.weight": (16,)}
    )
    assert_clean_error(convert(src, tmp_path), ExitStatus.USAGE, "num_hidden_layers 2", "3 blocks")


# -- files that are not what they claim ---------------------------------------------------------


def _fifo(src: Path) -> None:
    (src / "model.safetensors").unlink()
    os.mkfifo(src / "model.safetensors")


def _fifo_tokenizer(src: Path) -> None:
    (src / "tokenizer.json").unlink()
    os.mkfifo(src / "tokenizer.json")


def _link_out(src: Path) -> None:
    outside = src.parent / "elsewhere.safetensors"
    (src / "model.safetensors").rename(outside)
    (src / "model.safetensors").symlink_to(outside)


def _dev_zero(src: Path) -> None:
    (src / "model.safetensors").unlink()
    (src / "model.safetensors").symlink_to("/dev/zero")


def _header(src: Path, edit: Callable[[dict], object]) -> None:
    data = (src / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    blob = edit(header)
    blob = blob if isinstance(blob, bytes) else json.dumps(blob).encode()
    (src / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + data[8 + n :])


def _set(header: dict, name: str, field: str, value: object) -> dict:
    header[name][field] = value
    return header


def _write(name: str, text: str | bytes) -> Callable[[Path], None]:
    def write(src: Path) -> None:
        (src / name).write_bytes(text if isinstance(text, bytes) else text.encode())

    return write


def _tokenizer(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def change(src: Path) -> None:
        tj = json.loads((src / "tokenizer.json").read_text())
        edit(tj)
        (src / "tokenizer.json").write_text(json.dumps(tj))

    return change


EMBED = "model.embed_tokens.weight"
BROKEN: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "fifo weights": (_fifo, ("model.safetensors", "not a regular file")),
    "fifo tokenizer": (_fifo_tokenizer, ("tokenizer.json", "not a regular file")),
    "symlink out of the folder": (_link_out, ("model.safetensors", "outside the checkpoint folder")),
    "symlink to /dev/zero": (_dev_zero, ("model.safetensors", "outside the checkpoint folder")),
    "deep config.json": (_write("config.json", DEEP), ("config.json", "nested too deeply")),
    "config.json a list": (_write("config.json", "[1, 2]"), ("config.json", "not a JSON object")),
    "config.json not utf-8": (_write("config.json", b'{"a": "\xff"}'), ("config.json", "UTF-8")),
    "deep tokenizer.json": (_write("tokenizer.json", DEEP), ("tokenizer.json", "nested too deeply")),
    "tokenizer.json a number": (_write("tokenizer.json", "7"), ("tokenizer.json", "not a JSON object")),
    "tokenizer model a list": (_tokenizer(lambda tj: tj.update(model=[1])), ("tokenizer.json", "model")),
    "merges as a string": (_tokenizer(lambda tj: tj["model"].update(merges="t h")), ("merges",)),
    "merges of numbers": (_tokenizer(lambda tj: tj["model"].update(merges=[[1, 2]])), ("merges",)),
    "token id past the embedding": (
        _tokenizer(lambda tj: tj["model"]["vocab"].update(th=100_000)),
        ("'th'", "100000", "260 rows"),
    ),
    "negative token id": (_tokenizer(lambda tj: tj["model"]["vocab"].update(th=-1)), ("'th'", "-1")),
    "two tokens on one id": (_tokenizer(lambda tj: tj["model"]["vocab"].update(th=5)), ("share id 5",)),
    "vocabulary a list": (_tokenizer(lambda tj: tj["model"].update(vocab=["a"])), ("vocabulary",)),
    "added token without id": (
        _tokenizer(lambda tj: tj["added_tokens"][0].pop("id")),
        ("<|begin_of_text|>",),
    ),
    "added_tokens an object": (_tokenizer(lambda tj: tj.update(added_tokens={"a": 1})), ("added_tokens",)),
    "deep pre_tokenizer": (
        _tokenizer(lambda tj: tj.update(pre_tokenizer=json.loads("[" * 900 + "]" * 900))),
        ("tokenizer.json",),
    ),
    "deep tokenizer_config.json": (
        _write("tokenizer_config.json", DEEP),
        ("tokenizer_config.json", "nested"),
    ),
    "tokenizer_config.json a string": (_write("tokenizer_config.json", '"x"'), ("tokenizer_config.json",)),
    "chat template a number": (
        _write("tokenizer_config.json", '{"chat_template": 5}'),
        ("tokenizer_config.json", "chat_template is 5"),
    ),
    "non-utf-8 chat template": (
        lambda src: (
            (src / "tokenizer_config.json").write_text("{}"),
            (src / "chat_template.jinja").write_bytes(b"{{ messages }}\xff\xfe"),
        ),
        ("chat_template.jinja", "not UTF-8"),
    ),
    "deep safetensors header": (
        lambda src: _header(src, lambda h: DEEP.encode()),
        ("model.safetensors", "nested"),
    ),
    "header a list": (lambda src: _header(src, lambda h: [h]), ("model.safetensors", "not a JSON object")),
    "dtype a list": (
        lambda src: _header(src, lambda h: _set(h, EMBED, "dtype", ["F32"])),
        ("unknown dtype",),
    ),
    "shape of strings": (
        lambda src: _header(src, lambda h: _set(h, EMBED, "shape", ["260", 16])),
        ("invalid shape",),
    ),
    "header length past the end": (
        lambda src: (src / "model.safetensors").write_bytes(
            struct.pack("<Q", 2**63) + (src / "model.safetensors").read_bytes()[8:]
        ),
        ("corrupt safetensors header",),
    ),
    "index deep": (_write("model.safetensors.index.json", DEEP), ("model.safetensors.index.json", "nested")),
    "index weight_map a list": (
        _write("model.safetensors.index.json", '{"weight_map": ["model.safetensors"]}'),
        ("model.safetensors.index.json", "weight_map"),
    ),
    "index shard outside": (
        _write("model.safetensors.index.json", '{"weight_map": {"a": "../../etc/x.safetensors"}}'),
        ("outside the checkpoint folder",),
    ),
    "index shard the folder itself": (
        _write("model.safetensors.index.json", '{"weight_map": {"a": "."}}'),
        ("weight_map", ".safetensors"),
    ),
    "index shard a number": (
        _write("model.safetensors.index.json", '{"weight_map": {"a": 5}}'),
        ("weight_map",),
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_broken_files(tmp_path, case):
    breaks, phrases = BROKEN[case]
    src = write_tiny_llama(tmp_path / "ckpt")
    breaks(src)
    assert_clean_error(convert(src, tmp_path), ExitStatus.USAGE, *phrases)


def test_weights_beyond_float16_are_refused_not_written_as_inf(tmp_path):
    src = write_tiny_llama(tmp_path / "ckpt")
    data = bytearray((src / "model.safetensors").read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    start = 8 + n + json.loads(data[8 : 8 + n])["model.layers.0.mlp.up_proj.weight"]["data_offsets"][0]
    data[start : start + 4] = struct.pack("<f", 1e6)
    (src / "model.safetensors").write_bytes(bytes(data))
    proc = convert(src, tmp_path)
    assert_clean_error(proc, ExitStatus.USAGE, "model.layers.0.mlp.up_proj.weight", "float16", "f32")
    assert "Warning" not in proc.stderr
    assert list(tmp_path.iterdir()) == [src]


def test_hf_cache_snapshot_links_into_its_blobs_are_followed(tmp_path):
    """A Hugging Face cache snapshot is a folder of symlinks to ../../blobs: inside the repo, so allowed."""
    made = write_tiny_llama(tmp_path / "made")
    repo = tmp_path / "hub" / "models--someone--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(made.iterdir())):
        f.rename(repo / "blobs" / f"blob{i}")
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    proc = convert(snapshot, tmp_path)
    assert proc.exit_code == 0, proc.stderr
