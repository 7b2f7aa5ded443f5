"""config.json parsed once, at the boundary, into typed and range-checked hyperparameters.

config.json is untrusted: a layer count of ten million, zero heads or a vocabulary of 10^12 would
hang the converter or write a GGUF that llama.cpp aborts on. Every field the converter reads is a
row of `FIELDS` (name, type, range, required); the cross-field rules (heads divide the width, kv
heads divide heads) follow the table. The tensors are checked against these values later
(`consistency.py`), so a config that lies about the weights is refused too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from llmcli.convert.errors import BadCheckpoint, shown

INT, FLOAT, BOOL = "an integer", "a number", "true or false"


@dataclass(frozen=True)
class Field:
    name: str
    kind: str  # INT, FLOAT or BOOL
    low: float | None = None  # inclusive
    high: float | None = None  # inclusive
    required: bool = False
    above_low: bool = False  # low is exclusive (eps, theta, factors)


# Bounds are far beyond any real model and small enough that nothing sized by them can hang.
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 20
MAX_HEADS = 4096
MAX_VOCAB = 1 << 24
MAX_CONTEXT = (1 << 31) - 1  # a u32 in the GGUF

FIELDS: tuple[Field, ...] = (
    Field("num_hidden_layers", INT, 1, MAX_LAYERS, required=True),
    Field("hidden_size", INT, 1, MAX_WIDTH, required=True),
    Field("intermediate_size", INT, 1, MAX_WIDTH * 8, required=True),
    Field("num_attention_heads", INT, 1, MAX_HEADS, required=True),
    Field("num_key_value_heads", INT, 1, MAX_HEADS),
    Field("head_dim", INT, 2, 1 << 16),
    Field("max_position_embeddings", INT, 1, MAX_CONTEXT, required=True),
    Field("original_max_position_embeddings", INT, 1, MAX_CONTEXT),
    Field("rms_norm_eps", FLOAT, 0, 1, required=True, above_low=True),
    Field("vocab_size", INT, 1, MAX_VOCAB),
    Field("rope_theta", FLOAT, 0, 1e12, above_low=True),
    Field("partial_rotary_factor", FLOAT, 0, 1, above_low=True),
    Field("sliding_window", INT, 0, MAX_CONTEXT),
    Field("tie_word_embeddings", BOOL),
)

# The rope-scaling object (rope_scaling, or rope_parameters in transformers 5).
ROPE_FIELDS: tuple[Field, ...] = (
    Field("rope_theta", FLOAT, 0, 1e12, above_low=True),
    Field("factor", FLOAT, 0, 1e6, above_low=True),
    Field("original_max_position_embeddings", INT, 1, MAX_CONTEXT),
    Field("low_freq_factor", FLOAT, 0, 1e6, above_low=True),
    Field("high_freq_factor", FLOAT, 0, 1e6, above_low=True),
    Field("partial_rotary_factor", FLOAT, 0, 1, above_low=True),
)
# rope_type -> the fields it cannot do without.
ROPE_NEEDS: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings"),
    "dynamic": ("factor",),
}


@dataclass(frozen=True)
class Rope:
    kind: str  # "default", "linear", "yarn", "llama3", "longrope", ...
    theta: float
    values: dict[str, Any] = field(default_factory=dict)  # the checked ROPE_FIELDS present
    long_factor: tuple[float, ...] | None = None
    short_factor: tuple[float, ...] | None = None

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)


@dataclass(frozen=True)
class HParams:
    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    head_dim_explicit: bool  # config.json names head_dim (written as key/value length)
    max_positions: int
    rms_eps: float
    vocab_size: int | None
    tied: bool
    rope: Rope
    partial_rotary_factor: float = 1.0
    sliding_window: int | None = None
    original_max_positions: int | None = None
    # transformers 5: each layer's attention kind (one of LAYER_TYPES), and a rope per kind when
    # rope_parameters is keyed by layer type (Gemma 3); `rope` is then the full-attention one.
    layer_types: tuple[str, ...] | None = None
    rope_by_layer_type: dict[str, Rope] = field(default_factory=dict)

    @property
    def q_width(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def rope_dims(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)


def _check(f: Field, value: Any, where: str) -> Any:
    if f.kind == BOOL:
        ok = isinstance(value, bool)
    elif f.kind == INT:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if ok and f.kind != BOOL:
        low_ok = f.low is None or (value > f.low if f.above_low else value >= f.low)
        ok = low_ok and (f.high is None or value <= f.high)
    if not ok:
        raise BadCheckpoint(
            f"{where}: {f.name} is {shown(repr(value))}; it must be {_expected(f)} (fix config.json)"
        )
    return float(value) if f.kind == FLOAT else value


def _expected(f: Field) -> str:
    if f.kind == BOOL or f.low is None:
        return f.kind
    low = f"more than {_number(f.low)}" if f.above_low else f"at least {_number(f.low)}"
    return f"{f.kind} {low} and at most {_number(f.high)}"


def _number(x: float | None) -> str:
    return f"{int(x):,}" if x is not None and x == int(x) and abs(x) < 1e15 else f"{x:g}"


def fields(table: tuple[Field, ...], source: dict, where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in table:
        value = source.get(f.name)
        if value is None:
            if f.required:
                raise BadCheckpoint(
                    f"{where} has no {f.name}, which the converter needs; the checkpoint is incomplete"
                )
            continue
        out[f.name] = _check(f, value, where)
    return out


def text_config(config: dict, where: str) -> dict:
    """The language model's settings: multimodal wrappers keep them under text_config."""
    inner = config.get("text_config")
    if inner is None:
        return config
    if not isinstance(inner, dict):
        raise BadCheckpoint(f"{where}: text_config is not an object (fix config.json)")
    return {**config, **inner}


def parse_hparams(config: dict, where: str = "config.json", eps_field: str = "rms_norm_eps") -> HParams:
    """The typed config; `eps_field` names the norms' epsilon (BERT's is layer_norm_eps)."""
    table = tuple(replace(f, name=eps_field) if f.name == "rms_norm_eps" else f for f in FIELDS)
    v = fields(table, config, where)
    hidden, heads = v["hidden_size"], v["num_attention_heads"]
    kv_heads = v.get("num_key_value_heads", heads)
    if heads % kv_heads:
        raise BadCheckpoint(
            f"{where}: num_key_value_heads {kv_heads} does not divide num_attention_heads {heads} "
            "(fix config.json)"
        )
    head_dim = v.get("head_dim")
    if head_dim is None:
        if hidden % heads or (hidden // heads) % 2:
            raise BadCheckpoint(
                f"{where}: hidden_size {hidden} is not an even multiple of num_attention_heads "
                f"{heads}, and no head_dim is given (fix config.json)"
            )
        head_dim = hidden // heads
    elif head_dim % 2:
        raise BadCheckpoint(
            f"{where}: head_dim {head_dim} is odd; rotary embeddings need an even one (fix config.json)"
        )
    layer_types = _layer_types(config.get("layer_types"), v["num_hidden_layers"], where)
    rope_by_type = _rope_by_layer_type(config, v, where)
    rope = rope_by_type.get("full_attention") or _rope(config, v, where)
    partial = v.get("partial_rotary_factor", rope.get("partial_rotary_factor", 1.0))
    if int(head_dim * partial) % 2 or int(head_dim * partial) == 0:
        raise BadCheckpoint(
            f"{where}: partial_rotary_factor {partial:g} leaves an odd or empty rotary part of "
            f"head_dim {head_dim} (fix config.json)"
        )
    return HParams(
        n_layers=v["num_hidden_layers"],
        hidden=hidden,
        intermediate=v["intermediate_size"],
        n_heads=heads,
        n_kv_heads=kv_heads,
        head_dim=head_dim,
        head_dim_explicit="head_dim" in v,
        max_positions=v["max_position_embeddings"],
        rms_eps=v[eps_field],
        vocab_size=v.get("vocab_size"),
        tied=v.get("tie_word_embeddings", False),
        rope=rope,
        partial_rotary_factor=partial,
        sliding_window=v.get("sliding_window"),
        original_max_positions=v.get("original_max_position_embeddings"),
        layer_types=layer_types,
        rope_by_layer_type=rope_by_type,
    )


# The attention kinds transformers 5 names in layer_types and keys rope_parameters by.
LAYER_TYPES = ("full_attention", "sliding_attention")


def _layer_types(raw: Any, n_layers: int, where: str) -> tuple[str, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) != n_layers or not all(isinstance(t, str) for t in raw):
        raise BadCheckpoint(
            f"{where}: layer_types must be a list of {n_layers} names, one per layer "
            "(num_hidden_layers); fix config.json"
        )
    unknown = next((t for t in raw if t not in LAYER_TYPES), None)
    if unknown is not None:
        raise BadCheckpoint(
            f"{where}: layer_types names {shown(repr(unknown))}; each must be one of "
            f"{', '.join(LAYER_TYPES)} (fix config.json)"
        )
    return tuple(raw)


def _rope_by_layer_type(config: dict, top: dict[str, Any], where: str) -> dict[str, Rope]:
    """rope_parameters keyed by layer type ({"full_attention": {...}, "sliding_attention": {...}}), or {}."""
    raw = config.get("rope_parameters")
    if not isinstance(raw, dict) or not raw or not set(raw) & set(LAYER_TYPES):
        return {}
    unknown = next((k for k in raw if k not in LAYER_TYPES), None)
    if unknown is not None:
        raise BadCheckpoint(
            f"{where}: rope_parameters mixes layer types with {shown(repr(unknown))}; "
            f"key it by {', '.join(LAYER_TYPES)} or give one rope (fix config.json)"
        )
    if "full_attention" not in raw:
        raise BadCheckpoint(f"{where}: rope_parameters has no full_attention entry (fix config.json)")
    return {
        kind: _rope_object(raw[kind], top, f"{where} rope_parameters.{kind}")
        for kind in LAYER_TYPES
        if kind in raw
    }


def _rope(config: dict, top: dict[str, Any], where: str) -> Rope:
    # transformers 5 writes rope_parameters (rope_theta inside); older configs rope_scaling + rope_theta.
    key = "rope_parameters" if config.get("rope_parameters") else "rope_scaling"
    return _rope_object(config.get(key), top, f"{where} {key}")


def _rope_object(raw: Any, top: dict[str, Any], here: str) -> Rope:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise BadCheckpoint(f"{here} is not an object (fix config.json)")
    values = fields(ROPE_FIELDS, raw, here)
    kind = raw.get("rope_type", raw.get("type", "default"))
    if not isinstance(kind, str) or not kind:
        raise BadCheckpoint(
            f"{here}: rope_type is {shown(repr(kind))}; it must be a name such as 'linear' (fix config.json)"
        )
    kind = kind.lower()
    missing = [name for name in ROPE_NEEDS.get(kind, ()) if name not in values]
    if missing:
        raise BadCheckpoint(
            f"{here}: rope_type {kind!r} needs {', '.join(missing)}, which is missing (fix config.json)"
        )
    if kind == "llama3" and values.get("high_freq_factor", 4.0) <= values.get("low_freq_factor", 1.0):
        raise BadCheckpoint(
            f"{here}: high_freq_factor must be above low_freq_factor for llama3 rope (fix config.json)"
        )
    theta = values.get("rope_theta", top.get("rope_theta", 10000.0))
    factors = {
        name: _factor_list(raw.get(name), f"{here}: {name}") for name in ("long_factor", "short_factor")
    }
    return Rope(kind=kind, theta=theta, values=values, **factors)


def _factor_list(value: Any, where: str) -> tuple[float, ...] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) > 1 << 16
        or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) and x > 0
            for x in value
        )
    ):
        raise BadCheckpoint(f"{where} must be a list of positive numbers (fix config.json)")
    return tuple(float(x) for x in value)
