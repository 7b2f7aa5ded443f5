"""Seeded key files through read_key_file (serve's --api-key-file): keys of visible ASCII, comments,
blank lines, and keys no client could send (a character that is not ASCII or not UTF-8, a control
character, spaces around it), with \\n or \\r\\n line ends and maybe a byte order mark.

The generator knows what each line is, so each case has one expected outcome: the keys in order, or
a UsageError naming the first unsendable line by its number (and never its text), or "holds no key".

300 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 5,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import random
import string
from collections import Counter
from pathlib import Path

import pytest

from llmcli.errors import UsageError
from llmcli.serve.config import read_key_file
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

CASES = cases(default=300, long=5_000)
FIXED_SEED = 20261204
VISIBLE = string.ascii_letters + string.digits + string.punctuation
CONTROLS = [chr(c) for c in (*range(0x20), 0x7F) if chr(c) not in "\n"]
NOT_ASCII = ["é", "日", "\u200b", "\ufeff", "\u2028", "\x85", "🙂"]
PADS = [" ", "  "]


def good_key(rng: random.Random) -> str:
    inner = "".join(rng.choice(VISIBLE + " ") for _ in range(rng.randint(0, 30)))
    return rng.choice(VISIBLE.replace("#", "")) + inner + rng.choice(VISIBLE)


def bad_key(rng: random.Random, kind: str) -> bytes:
    key = good_key(rng)
    at = rng.randint(0, len(key))
    if kind == "control":
        # Not a \r last: that is a \r\n line end, which the file may use.
        control = rng.choice([c for c in CONTROLS if c != "\r"] if at == len(key) else CONTROLS)
        return (key[:at] + control + key[at:]).encode()
    if kind == "not ascii":
        char = rng.choice(NOT_ASCII)
        # A U+FEFF that opens the file's first line is its byte order mark, not part of a key
        at = max(at, 1) if char == "\ufeff" else at
        return (key[:at] + char + key[at:]).encode()
    if kind == "not utf-8":
        return key[:at].encode() + bytes([rng.randint(0x80, 0xFF)]) + key[at:].encode()
    pad = rng.choice(PADS)
    return {"before": pad + key, "after": key + pad, "both": pad + key + pad}[
        rng.choice(("before", "after", "both"))
    ].encode()


def make_case(rng: random.Random, index: int) -> tuple[bytes, str, list[str] | int | None]:
    """(the file's bytes, the outcome class, the keys expected / the bad line's number / None)."""
    # The first cases reach every outcome by construction; the rest are drawn.
    shape = (
        ("keys", "unsendable", "no key")[index]
        if index < 3
        else rng.choice(("keys", "keys", "unsendable", "no key"))
    )
    lines: list[bytes] = []
    keys: list[str] = []
    bad_line = None
    for _ in range(rng.randint(1, 12)):
        kind = rng.choice(("key", "key", "comment", "blank"))
        if kind == "key" and shape != "no key":
            key = good_key(rng)
            keys.append(key)
            lines.append(key.encode())
        elif kind == "comment" or (kind == "key" and shape == "no key"):
            lines.append((rng.choice(("", " ", "\t")) + "#" + good_key(rng)).encode())
        else:
            lines.append(rng.choice(("", " ", "\t", "  \t ")).encode())
    if shape == "unsendable":
        at = rng.randint(0, len(lines))
        lines.insert(at, bad_key(rng, rng.choice(("control", "not ascii", "not utf-8", "padded"))))
        bad_line = at + 1
        keys = []
    elif shape == "keys" and not keys:
        keys.append(good_key(rng))
        lines.append(keys[-1].encode())
    data = rng.choice((b"\n", b"\r\n")).join(lines) + rng.choice((b"", b"\n", b"\r\n"))
    if rng.random() < 0.3:
        data = b"\xef\xbb\xbf" + data
    return data, shape, keys if shape == "keys" else bad_line


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_key_files_give_their_keys_or_one_line_naming_the_bad_line(tmp_path: Path, seed: int):
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    path = tmp_path / "keys.txt"
    for index in range(CASES):
        data, shape, expected = make_case(rng, index)
        path.write_bytes(data)
        where = f"seed {seed} case {index}: {data!r}"
        try:
            keys = read_key_file(path)
        except UsageError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(f"--api-key-file {path} "), where
            if shape == "unsendable":
                assert isinstance(expected, int)
                assert f" line {expected}: the key " in message, (where, message)
                bad = data.split(b"\n")[expected - 1].strip(b"\r \t").decode("utf-8", "replace")
                assert len(bad) < 4 or bad not in message, (where, message)
            else:
                assert shape == "no key" and "holds no key" in message, (where, message)
            counts[shape] += 1
            continue
        assert shape == "keys" and keys == expected, (where, keys)
        counts[shape] += 1
    assert_reached(counts, "keys", "unsendable", "no key", seed=seed)
