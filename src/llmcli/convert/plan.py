"""Plan a conversion: check everything about the input and decide every output tensor; write nothing.

Planning reads only headers (config.json, tokenizer files, safetensors headers), so it is cheap
and catches every input problem before a byte is written: the typed config (hparams.py), the
files (regular, inside the folder, sizes matching their byte ranges) and the consistency of every
tensor's shape with the config (consistency.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from llmcli.convert import files, safetensors_io
from llmcli.convert.consistency import check_layer_count, check_shape, dimensions, vocab_rows
from llmcli.convert.errors import (
    BadCheckpoint,
    NotACheckpoint,
    UnsafeCheckpoint,
    UnsupportedArchitecture,
    shown,
)
from llmcli.convert.outtypes import CONVERT_DEFAULT, OutType, outtype_named
from llmcli.convert.vocab import Vocab, load_vocab

if TYPE_CHECKING:
    import numpy as np

    from llmcli.convert.families.base import Family

PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl")


@dataclass
class PlannedTensor:
    name: str  # the GGUF name
    shape: tuple[int, ...]  # numpy order (outermost first), as HF stores it
    qtype: str  # GGML type written
    nbytes: int
    source: safetensors_io.TensorRef | None = None
    hf_name: str | None = None
    transform: Callable[[np.ndarray], np.ndarray] | None = None
    data: np.ndarray | None = None  # tensors made by the converter (rope factors)
    kind: str = ""  # the gguf.MODEL_TENSOR member name, e.g. "FFN_DOWN"

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)


@dataclass
class ConversionPlan:
    src: Path
    hf_arch: str
    arch: str  # GGUF architecture name, e.g. "llama"
    outtype: OutType
    family: Family
    vocab: Vocab
    tensors: list[PlannedTensor]
    source_bytes: int
    source_dtypes: list[str]
    n_params: int
    tied_embeddings: bool
    estimated_size: int  # bytes of the final file (exact for direct types, an estimate for K-quants)
    intermediate_size: int = 0  # the f16/bf16 file a K-quant is made from, 0 otherwise
    notes: list[str] = field(default_factory=list)


def read_config(src: Path, root: Path | None = None) -> dict:
    if not src.exists():
        raise NotACheckpoint(f"no such folder: {src}; give a Hugging Face model folder or a cached repo id")
    if not src.is_dir():
        raise NotACheckpoint(f"{src} is a file; give the Hugging Face model folder that holds config.json")
    path = src / "config.json"
    if not files.is_present(path):
        raise NotACheckpoint(
            f"no config.json in {src}; SRC must be a Hugging Face "
            "model folder (config.json, tokenizer, *.safetensors)"
        )
    return files.read_json(path, root or files.checkpoint_root(src), what=f"{src.name}/config.json")


def find_weights(src: Path) -> list[Path]:
    found = safetensors_io.weight_files(src)
    if found:
        return found
    pickles = sorted(p.name for pattern in PICKLE_PATTERNS for p in src.glob(pattern))
    if pickles:
        raise UnsafeCheckpoint(
            f"{src} has only pickle weights ({', '.join(pickles[:3])}); loading pickle can run "
            "arbitrary code, so llmcli converts safetensors only: get the model's .safetensors files"
        )
    raise NotACheckpoint(f"no *.safetensors weights in {src}; download the model's weight files too")


def plan_conversion(src_dir: Path, outtype: str = CONVERT_DEFAULT) -> ConversionPlan:
    """Check everything about the input and decide every output tensor; writes nothing."""
    import gguf

    from llmcli.convert.families import family_for

    src = Path(src_dir)
    out = outtype_named(outtype)
    config = read_config(src)
    where = f"{src.name}/config.json"
    family = family_for(config, where=where)
    family.check_rope()
    family.read_extras(src, files.checkpoint_root(src))
    refs = safetensors_io.index_tensors(find_weights(src), files.checkpoint_root(src))
    wanted = sorted((n for n in refs if not family.skip(n)), key=_natural_key)
    # Before any per-layer work: a config claiming ten million layers is refused here, not looped over.
    check_layer_count(wanted, family.n_layers, where)

    allowed = set(gguf.MODEL_TENSORS[family.arch])
    planned: list[PlannedTensor] = []
    unmapped: list[str] = []
    for hf_name in wanted:
        mapped = family.map_name(hf_name)
        if mapped is None or mapped[0] not in allowed:
            unmapped.append(hf_name)
            continue
        key, gguf_name = mapped  # gguf keeps the .weight/.bias suffix it matched
        ref = refs[hf_name]
        planned.append(
            PlannedTensor(
                name=gguf_name,
                shape=ref.shape,
                qtype="",
                nbytes=0,
                source=ref,
                hf_name=hf_name,
                transform=family.transform(key, hf_name),
                kind=key.name,
            )
        )
    if unmapped:
        more = f" and {len(unmapped) - 3} more" if len(unmapped) > 3 else ""
        raise UnsupportedArchitecture(
            f"tensors {', '.join(shown(n) for n in unmapped[:3])}{more} have no place in llama.cpp's "
            f"{family.arch_name} architecture; this {family.hf_arch} "
            "checkpoint is a variant llmcli cannot convert"
        )

    names = [t.name for t in planned]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise BadCheckpoint(f"two checkpoint tensors map to {dup}; the checkpoint is inconsistent")
    present = set(names)
    missing = [n for n in family.required_names() if n not in present]
    if missing:
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise BadCheckpoint(
            f"the checkpoint lacks tensors {family.hf_arch} needs ({', '.join(missing[:3])}{more}); "
            "download every shard of the model"
        )
    embd = next(t for t in planned if t.name == "token_embd.weight")
    n_vocab = vocab_rows(embd.hf_name or embd.name, embd.shape, family.hp, where)
    dims = {**dimensions(family.hp, n_vocab), **family.extra_dimensions()}
    for t in planned:
        check_shape(
            t.hf_name or t.name,
            t.shape,
            family.shapes,
            t.kind,
            t.name.rsplit(".", 1)[-1],
            dims,
            family.arch_name,
        )
    for name, data in family.extra_tensors():
        planned.append(PlannedTensor(name=name, shape=tuple(data.shape), qtype="F32", nbytes=0, data=data))

    vocab = load_vocab(src, n_rows=n_vocab)
    if vocab.pre_candidates:
        _choose_pre_tokenizer(vocab, family, src)
    elif vocab.model == "bert":
        from llmcli.convert.vocab_verify import verify_wordpiece

        assert vocab.hf_json is not None
        vocab.pre_check = verify_wordpiece(vocab, vocab.hf_json, f"{src.name}/tokenizer.json")

    source_dtypes = sorted({t.source.dtype for t in planned if t.source})
    direct = out.qtype or ("BF16" if source_dtypes == ["BF16"] else "F16")
    for t in planned:
        t.qtype = "F32" if t.data is not None else _tensor_type(t, direct)
        t.nbytes = _nbytes(t.shape, t.qtype)
    direct_size = sum(t.nbytes for t in planned) + _metadata_bytes(vocab)
    n_params = sum(t.n_elements for t in planned)
    if out.qtype:
        estimate, intermediate = direct_size, 0
    else:
        matrices = sum(t.n_elements for t in planned if t.qtype not in ("F32",))
        vectors = sum(t.nbytes for t in planned if t.qtype == "F32")
        estimate = int(matrices * out.bits_per_weight / 8) + vectors + _metadata_bytes(vocab)
        intermediate = direct_size

    notes = []
    if vocab.pre_check is not None and vocab.pre_check.verified_by == "behaviour":
        notes.append(f"pre-tokenizer {vocab.pre_check.describe()}")
    if vocab.n_padding:
        notes.append(f"embedding has {vocab.n_padding} rows beyond the tokenizer: written as padding tokens")
    tied = family.has_output and "output.weight" not in present
    if tied:
        notes.append("tied embeddings: llama.cpp reuses token_embd for the output")
    return ConversionPlan(
        src=src,
        hf_arch=family.hf_arch,
        arch=family.arch_name,
        outtype=out,
        family=family,
        vocab=vocab,
        tensors=planned,
        source_bytes=sum(t.source.nbytes for t in planned if t.source),
        source_dtypes=source_dtypes,
        n_params=n_params,
        tied_embeddings=tied,
        estimated_size=estimate,
        intermediate_size=intermediate,
        notes=notes,
    )


def _choose_pre_tokenizer(vocab: Vocab, family: Family, src: Path) -> None:
    """Pick the pre-tokenizer by behaviour: llama.cpp gives HF's ids on the check corpus (vocab_verify.py)."""
    from llmcli.convert.vocab_verify import choose_by_behaviour

    assert vocab.hf_json is not None
    check = choose_by_behaviour(
        vocab,
        vocab.hf_json,
        vocab.pre_candidates,
        arch=family.arch_name,
        name=src.name,
        write_header=family.hparams,
        where=f"{src.name}/tokenizer.json",
    )
    vocab.pre, vocab.pre_check = check.pre, check


def _natural_key(name: str) -> list:
    # model.layers.10 after model.layers.9, so the GGUF lists blocks in order. The kind tag keeps
    # numbers and words apart, so two names never compare an int with a str.
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in name.split(".")]


# Tensor kinds llama.cpp wants in f32 whatever the output type (it computes them in f32).
ALWAYS_F32_SUFFIXES = ("_norm.weight", ".bias")


def _tensor_type(t: PlannedTensor, direct: str) -> str:
    import gguf

    if len(t.shape) <= 1 or t.name.endswith(ALWAYS_F32_SUFFIXES):
        return "F32"
    qtype = direct
    # The embedding and output matrices suffer most from 4-bit rounding; llama.cpp's own
    # quantizer keeps them wider too.
    if qtype == "Q4_0" and t.name in ("token_embd.weight", "output.weight"):
        qtype = "Q8_0"
    block, _ = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    if t.shape[-1] % block:
        qtype = "F16"  # rows that do not fill whole blocks cannot be block-quantized
    return qtype


def _nbytes(shape: tuple[int, ...], qtype: str) -> int:
    import gguf

    return math.prod(gguf.quant_shape_to_byte_shape(shape, gguf.GGMLQuantizationType[qtype]))


def _metadata_bytes(vocab: Vocab) -> int:
    text = sum(len(t.encode("utf-8")) + 12 for t in vocab.tokens) + sum(len(m) + 8 for m in vocab.merges)
    return text + len((vocab.chat_template or "").encode("utf-8")) + 64 * 1024
