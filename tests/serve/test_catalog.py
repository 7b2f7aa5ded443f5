"""The names a request may give a model in store mode (serve/catalog.py): the store name, `name:latest`,
`REPO[:QUANT]` once pulled, a unique prefix; and hostile names, which are 404s that touch no path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmcli.model_ref import EMBEDDED_NAME
from llmcli.serve.catalog import Catalog, Served, UnknownModel
from llmcli.store import Store

REPO = "Org/Tiny-GGUF"


def stocked(home: Path) -> Store:
    """A store with two pulled quants of one repo and one converted model (their files are stand-ins:
    the catalog never opens them)."""
    home.mkdir(parents=True, exist_ok=True)
    models = {}
    for name, source, quant in (
        (f"{REPO}:Q4_K_M", f"hf:{REPO}", "Q4_K_M"),
        (f"{REPO}:Q8_0", f"hf:{REPO}", "Q8_0"),
        ("mine", "convert:/x", "F16"),
    ):
        path = home / f"{len(models)}.gguf"
        path.write_bytes(b"GGUF")
        models[name] = {"name": name, "path": str(path), "source": source, "quant": quant}
    (home / "manifest.json").write_text(json.dumps({"version": 1, "models": models}))
    return Store(home)


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("mine", "mine"),
        ("mine:latest", "mine"),
        (f"{EMBEDDED_NAME}:latest", EMBEDDED_NAME),
        (f"{REPO}:Q8_0", f"{REPO}:Q8_0"),
        (f"{REPO.lower()}:q8_0", f"{REPO}:Q8_0"),  # a repo and a quant in any case, as `pull` takes them
        (f"hf.co/{REPO}:Q4_K_M", f"{REPO}:Q4_K_M"),
        ("min", "mine"),  # a unique prefix
    ],
)
def test_a_name_finds_its_model(tmp_path: Path, text: str, found: str) -> None:
    store = stocked(tmp_path / "store")
    served = Catalog(store=store).find(text)
    assert served.name == found
    assert served.path == Path({m.name: m.path for m in store.list()}[found])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("nope", "model 'nope' not found, try pulling it first"),
        (REPO, f"model '{REPO}' names several models ({REPO}:Q4_K_M, {REPO}:Q8_0); give one"),
        (f"{REPO}:Q2_K", f"model '{REPO}:Q2_K' not found, try pulling it first"),
        ("", "model '' not found, try pulling it first"),
    ],
)
def test_an_unknown_or_ambiguous_name_is_refused_naming_the_fix(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(UnknownModel) as caught:
        Catalog(store=stocked(tmp_path / "store")).find(text)
    assert caught.value.message == says


def test_a_prefix_is_not_taken_where_the_whole_name_is_asked_for(tmp_path: Path) -> None:
    with pytest.raises(UnknownModel, match="model 'min' not found"):
        Catalog(store=stocked(tmp_path / "store")).find("min", prefix=False)


# Each is a real file or folder on this machine, or names one through the store, or looks like a name
# it is not: none may find a model, and none is ever opened.
HOSTILE = [
    "../manifest.json",
    "mine/../mine",
    "./mine",
    "/etc/passwd",
    "{root}/0.gguf",
    "mine\x00",
    "\x00",
    "m" * 10_000,
    "mine" + ":latest" * 2_000,
    "ｍｉｎｅ",  # fullwidth
    "mіnе",  # Cyrillic і and е
    "mine\u200b",  # a zero-width space
    "C:\\Windows\\x",
    "~/x.gguf",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_name_is_unknown_and_never_a_path(tmp_path: Path, text: str) -> None:
    store = stocked(tmp_path / "store")
    text = text.replace("{root}", str(store.root))
    with pytest.raises(UnknownModel) as caught:
        Catalog(store=store).find(text)
    message = caught.value.message
    assert message.startswith("model '") and message.endswith("not found, try pulling it first")
    assert "\x00" not in message and len(message) < 300


def test_one_model_mode_answers_any_name_with_its_model(tmp_path: Path) -> None:
    one = Served("x", tmp_path / "x.gguf")
    catalog = Catalog(one=one)
    assert catalog.find("anything:7b") is one and catalog.find(None) is one and catalog.all() == [one]


def test_the_store_lists_every_model_whose_file_is_there(tmp_path: Path) -> None:
    store = stocked(tmp_path / "store")
    (store.root / "2.gguf").unlink()  # mine's file is gone
    names = [served.name for served in Catalog(store=store).all()]
    assert names == [EMBEDDED_NAME, f"{REPO}:Q4_K_M", f"{REPO}:Q8_0"]
    with pytest.raises(UnknownModel, match="the file of model 'mine' is gone; pull it again, or delete it"):
        Catalog(store=store).find("mine")
