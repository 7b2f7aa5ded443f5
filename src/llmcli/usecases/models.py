"""The store's models as the commands show them: list (the manifest completed from each file's
header), show (a model's facts and the template chat would use), rm, and tokenize."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.model_ref import ModelRef
from llmcli.store import ModelEntry, Removed, Store

if TYPE_CHECKING:
    from llmcli.engine.openai.client import Endpoint
    from llmcli.engine.openai.models import RemoteModel
    from llmcli.engine.templates.choice import TemplateChoice
    from llmcli.gguf_check import ModelFacts


def model_names(store: Store) -> list[str]:
    """The store's names, from the manifest alone (shell completion runs on every Tab press)."""
    return [entry.name for entry in store.list()]


def list_models(store: Store) -> list[ModelEntry]:
    """The store's models, with what the manifest lacks (architecture, parameters, quant) read from
    each file; a damaged file is still listed, so that it can be removed."""
    from llmcli.gguf_check import model_facts

    rows = []
    for entry in store.list():
        if not entry.arch or not entry.n_params:
            try:
                facts = model_facts(entry.path)
                entry.arch, entry.n_params = entry.arch or facts.arch, entry.n_params or facts.n_params
                entry.quant = entry.quant or facts.quant
            except Exception:  # noqa: BLE001 - whatever is wrong with the file, the row stays
                pass
        rows.append(entry)
    return rows


def list_remote_models(endpoint: Endpoint) -> list[RemoteModel]:
    """The models a server serves (its /v1/models)."""
    from llmcli.engine.openai.models import list_models as served

    return served(endpoint)


@dataclass
class ModelView:
    entry: ModelEntry
    facts: ModelFacts
    n_ctx: int  # the context the KV cache size is given for: --ctx, else what chat would use
    kv_bytes_per_token: int | None
    template: TemplateChoice  # the chat template chat would use, and why


def show_model(store: Store, ref: ModelRef, ctx: int | None = None) -> ModelView:
    from llmcli.engine.local.runtime import DEFAULT_CTX
    from llmcli.gguf_check import model_facts
    from llmcli.usecases.render import template_choice_for

    entry = store.resolve(ref)
    facts = model_facts(entry.path)
    n_ctx = ctx or min(facts.context_length or DEFAULT_CTX, DEFAULT_CTX)
    choice = template_choice_for(entry.path, facts.chat_template, facts.arch)
    return ModelView(entry, facts, n_ctx, facts.kv_bytes_per_token(), choice)


def remove_model(store: Store, ref: ModelRef) -> Removed:
    return store.remove(ref)


@dataclass
class Tokens:
    model_name: str
    ids: list[int]
    pieces: list[bytes]  # each id's bytes: a piece may be part of a UTF-8 character


def tokenize(store: Store, ref: ModelRef, text: str, special: bool = False) -> Tokens:
    """TEXT as the model's tokenizer splits it; `special`: special-token text becomes the token."""
    from llmcli.engine.local.runtime import Runtime, RuntimeConfig

    entry = store.resolve(ref)
    with Runtime(entry.path, RuntimeConfig(n_ctx=64)) as rt:
        ids = rt.tokenize(text, parse_special=special)
        return Tokens(entry.name, ids, [rt.piece(i, special=True) for i in ids])
