"""Seeded request model names through serve's Catalog.find (store mode): the store's names, mutated
with path parts, `..`, NUL and control characters, confusable letters (fullwidth, Cyrillic), `:latest`
and case, long runs. Each answer is a model of the store or UnknownModel with one short line; any
name with a character outside a name's alphabet is unknown; and no file is opened but the manifest.

400 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 8,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import random
import string
import sys
from collections import Counter
from pathlib import Path

import pytest

from llmcli.serve.catalog import Catalog, UnknownModel
from llmcli.store import NAME_SHAPE
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.serve.test_catalog import stocked

CASES = cases(default=400, long=8_000)
FIXED_SEED = 20261204
INSERTS = ["/", "..", "../", "/..", "\x00", "\\", "~", ":", ":latest", "\n", " ", ".gguf", "%2e%2e", "//"]
CONFUSABLES = {"a": "а", "e": "е", "i": "і", "o": "о", "m": "ｍ", "n": "ｎ", "Q": "Ｑ", "0": "０", "-": "‐"}
OPENED: list[str] = []  # files opened while a case runs (an audit hook cannot be removed: it stays idle)
WATCHING = [False]


def _audit(event: str, args: tuple) -> None:
    if WATCHING[0] and event == "open" and isinstance(args[0], (str, bytes, Path)):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)


def mutate(rng: random.Random, name: str) -> str:
    for _ in range(rng.randint(0, 3)):
        at = rng.randint(0, len(name))
        kind = rng.choice(("insert", "confuse", "case", "cut", "long", "tag", "junk"))
        if kind == "insert":
            name = name[:at] + rng.choice(INSERTS) + name[at:]
        elif kind == "confuse":
            spots = [i for i, c in enumerate(name) if c in CONFUSABLES]
            if spots:
                i = rng.choice(spots)
                name = name[:i] + CONFUSABLES[name[i]] + name[i + 1 :]
        elif kind == "case":
            name = name.swapcase() if rng.random() < 0.5 else name.lower()
        elif kind == "cut":
            name = name[:at]
        elif kind == "long":
            name = name + rng.choice("m/.:") * rng.choice((200, 201, 10_000))
        elif kind == "tag":
            name = name + ":latest"
        else:
            name = (
                name[:at]
                + "".join(rng.choice(string.printable) for _ in range(rng.randint(1, 4)))
                + name[at:]
            )
    return name


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_fuzzed_model_names_find_a_store_model_or_are_unknown(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    store = stocked(tmp_path / "store")
    catalog = Catalog(store=store)
    paths = {m.name: Path(m.path) for m in store.list()}
    names = [*paths, str(store.root / "0.gguf"), "../manifest.json"]
    counts: Counter[str] = Counter()
    for _ in range(CASES):
        text = mutate(rng, rng.choice(names))
        OPENED.clear()
        WATCHING[0] = True
        try:
            served = catalog.find(text)
        except UnknownModel as exc:
            counts["unknown"] += 1
            assert exc.message.startswith("model '") and "\n" not in exc.message and "\x00" not in exc.message
            assert len(exc.message) < 600, (seed, text[:80])
        else:
            counts["found"] += 1
            assert paths[served.name] == served.path, (seed, text[:80])
            # Only a name's alphabet finds a model: no path part, NUL, space or confusable letter.
            assert NAME_SHAPE.fullmatch(text) and ".." not in text, (seed, text[:80])
        finally:
            WATCHING[0] = False
        assert {Path(p) for p in OPENED} <= {store.manifest_path}, (seed, text[:80], OPENED)
        counts["read the manifest"] += bool(OPENED)  # the hook sees what the catalog opens
    assert_reached(counts, "found", "unknown", "read the manifest", seed=seed)
