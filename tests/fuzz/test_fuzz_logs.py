"""A tampered logs.db: rows edited with any SQLite value, flipped bytes, a truncated file.

Each seeded case tampers with a small good log, then reads it every way llmcli does: `logs` (text
and --json, recent, -q, --cid) in-process through the real error boundary, and the continuation
a `chat -c` / `--cid` would load. Each must either work (and then the output is one JSON document,
or text without terminal escapes, and stderr at most one line for each note: a damaged row
skipped, a search without its index) or end with one `llmcli: error:` line and exit 1 or 2. A
traceback or any other exception is a failure, as is a file written outside the case's folder.
Rows that are not UTF-8 text are among the tampering. The run checks it reached every outcome:
read whole, read with damaged rows skipped, and refused.

30 cases per seed by default; LLMCLI_FUZZ_LONG=1 runs 1,000
(seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sqlite3
import traceback

import pytest

from llmcli.chatlog import ChatLog, Exchange
from llmcli.errors import LlmcliError
from llmcli.usecases.conversation import ContinueFrom, open_chat_log
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds
from tests.support.cli import cli

CASES = cases(default=30, long=1000)
FIXED_SEED = 20250611
COLUMNS = [
    "id",
    "conversation_id",
    "model",
    "system",
    "messages",
    "prompt",
    "reply",
    "reasoning",
    "options",
    "usage",
    "timings",
    "finish_reason",
    "datetime_utc",
]
TEXTS = [
    "",
    "x",
    "中文 🙂",
    "\x1b[2J\x1b]0;t\x07",
    "\u202e",
    "{",
    "[]",
    "{}",
    "null",
    '"s"',
    "[1,2]",
    '[{"role": "user", "content": "hi"}]',
    '[{"role": "system", "content": 1}]',
    "[" * 5000,
    "01j0000000000000000000000a",
    "a" * 100_000,
]
ESCAPES = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _value(rng: random.Random):
    kind = rng.choice(["text", "blob", "int", "float", "null", "json"])
    if kind == "json":
        shapes = [
            [],
            {},
            [
                {
                    "role": rng.choice(["user", "assistant", "tool", 3]),
                    "content": rng.choice(["x", 1, None, ["a"]]),
                }
            ],
            {"a": [1, {"b": None}]},
            "str",
            5,
        ]
        return json.dumps(rng.choice(shapes))
    return {
        "text": lambda: rng.choice(TEXTS),
        "blob": lambda: rng.randbytes(rng.randint(0, 64)),
        "int": lambda: rng.randint(-(2**63), 2**63 - 1),
        "float": lambda: rng.uniform(-1e300, 1e300),
        "null": lambda: None,
    }[kind]()


@pytest.fixture(scope="module")
def good_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("good") / "logs.db"
    log = ChatLog(path)
    first = log.add(Exchange("", "m", "apples are red", "yes", system="s"))
    log.add(
        Exchange(
            first.conversation_id,
            "m",
            "and pears?",
            "green",
            messages=[{"role": "user", "content": "apples are red"}, {"role": "assistant", "content": "yes"}],
        )
    )
    log.add(Exchange("", "m2", "cherries are red", "indeed", finish_reason="cancelled"))
    log.close()
    return path


def _tamper(rng: random.Random, path) -> str:
    how = rng.choice(["update", "update", "update", "flip", "truncate", "drop"])
    if how in ("flip", "truncate"):
        data = bytearray(path.read_bytes())
        if how == "flip":
            for _ in range(rng.randint(1, 20)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        else:
            data = data[: rng.randrange(len(data))]
        path.write_bytes(bytes(data))
        return how
    with sqlite3.connect(path) as db:
        if how == "update" and rng.random() < 0.3:  # bytes that are not UTF-8, stored as TEXT
            column = rng.choice(COLUMNS)
            try:
                db.execute(
                    f"UPDATE exchanges SET {column} = CAST(? AS TEXT) WHERE n = ?",
                    (rng.choice([b"\xff", b"a\xc3(b", b"\xed\xa0\x80", rng.randbytes(8)]), rng.randint(1, 3)),
                )
            except sqlite3.Error:
                pass
            return "not utf-8"
        if how == "drop":
            db.execute(
                rng.choice(
                    [
                        "DROP TABLE exchanges_fts",
                        "DROP TABLE conversations",
                        "DELETE FROM conversations",
                        "PRAGMA user_version = 99",
                        "ALTER TABLE exchanges DROP COLUMN reasoning",
                    ]
                )
            )
            return how
        for _ in range(rng.randint(1, 3)):
            column = rng.choice(COLUMNS)
            try:
                db.execute(f"UPDATE exchanges SET {column} = ? WHERE n = ?", (_value(rng), rng.randint(1, 3)))
            except sqlite3.Error:
                pass  # a NOT NULL or UNIQUE column refused it: SQLite keeps those promises itself
    return how


def _reads(path, home):
    """Every way llmcli reads the log; each yields a description for the failure report."""
    for args in (
        ["logs"],
        ["logs", "--json", "--count", "0"],
        ["logs", "--query", "red"],
        ["logs", "--query", "red", "--json"],
    ):
        yield " ".join(args), lambda a=args: _cli(a, home)
    try:
        cids = [r[0] for r in sqlite3.connect(path).execute("SELECT conversation_id FROM exchanges LIMIT 2")]
    except (sqlite3.Error, UnicodeDecodeError):
        cids = []
    for cid in cids:
        if isinstance(cid, str):
            yield f"logs --cid {cid!r}", lambda c=cid: _cli(["logs", "--cid", c, "--json"], home)
            yield f"resume {cid!r}", lambda c=cid: _resume(home, ContinueFrom(c.strip().lower() or "x"))
    yield "resume latest", lambda: _resume(home, ContinueFrom(None))


def _cli(args, home):
    r = cli(*args, vars={"LLMCLI_HOME": str(home)})
    if r.exit_code == 0:
        if "--json" in args:
            json.loads(r.stdout)
        assert not ESCAPES.search(r.stdout.replace("\t", "")), r.stdout[:200]
        notes = [line for line in r.stderr.splitlines() if line.startswith("llmcli: ")]  # besides info
        assert "Traceback" not in r.stderr and "error" not in " ".join(notes), r.stderr
        assert len(notes) <= 2, r.stderr  # a damaged row skipped; a search without its index
        if any("damaged row" in line for line in notes):
            return "skipped"
    else:
        assert r.exit_code in (1, 2) and "Traceback" not in r.stderr, r.stderr
        lines = [line for line in r.stderr.splitlines() if line.startswith("llmcli: error:")]
        assert len(lines) == 1 and r.stderr.count("\n") == 1, r.stderr
    return r.exit_code


def _resume(home, which):
    try:
        opened = open_chat_log(home, write=True, resume=which)
    except LlmcliError:
        return "refused"
    try:
        for m in opened.resumed.messages:
            assert m.role in ("user", "assistant") and isinstance(m.content, str)
            m.content.encode("utf-8")
        assert opened.note is None or "\n" not in opened.note
    finally:
        opened.close()
    return "skipped" if opened.note else "ok"


def _snapshot(root) -> set[tuple[str, int, int]]:
    return {(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_a_tampered_log_is_read_or_refused_in_one_line(good_log, tmp_path, seed):
    rng = random.Random(seed)
    counts = {"ok": 0, "skipped": 0, "refused": 0}
    failures = []
    watched = tmp_path.parent
    before = {p for p in _snapshot(watched) if not p[0].startswith(str(tmp_path))}
    for case in range(CASES):
        home = tmp_path / f"case{case}"
        home.mkdir()
        path = home / "logs.db"
        shutil.copy(good_log, path)
        how = _tamper(rng, path)
        for what, read in _reads(path, home):
            try:
                outcome = read()
                counts[
                    "ok" if outcome in (0, "ok") else "skipped" if outcome == "skipped" else "refused"
                ] += 1
            except Exception:  # noqa: BLE001 - the fuzz target: anything but a clean answer is a failure
                failures.append(f"case {case} ({how}), {what}: {traceback.format_exc(limit=3)}")
        shutil.rmtree(home)
    after = {p for p in _snapshot(watched) if not p[0].startswith(str(tmp_path))}
    if after != before:
        failures.append(f"written outside the cases' folders: {sorted(after ^ before)[:3]}")
    print(
        f"\nfuzz logs.db: {CASES} cases, {sum(counts.values())} reads: {counts['refused']} clean errors, "
        f"{counts['ok'] + counts['skipped']} successes ({counts['skipped']} of them skipping damaged rows "
        f"with one note), {len(failures)} failures (seed {seed})"
    )
    assert not failures, f"seed {seed}:\n" + "\n".join(failures[:5])
    assert_reached(counts, "ok", "skipped", "refused", seed=seed)  # read whole, skipping rows, refused
