"""A hostile or broken manifest: `rm` deletes nothing outside blobs/, bad shapes are one line,
`list` escapes names.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_process


def write_manifest(home: Path, models: object) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "manifest.json"
    path.write_text(json.dumps({"version": 1, "models": models}))
    return path


def test_rm_never_deletes_through_dotdot_or_a_symlinked_folder(private_store: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "a").write_text("a")
    (outside / "dir" / "b").write_text("b")
    blobs = private_store / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "link").symlink_to(outside / "dir")
    (blobs / "out.gguf").symlink_to(outside / "a")  # a file link out of blobs/: the link's target is not ours
    own = blobs / "own.gguf"
    own.write_text("ours")
    files = [f"{blobs}/../../outside/a", f"{blobs}/link/b", str(blobs / "out.gguf"), str(own)]
    write_manifest(private_store, {"evil": {"name": "evil", "path": str(own), "files": files}})
    r = cli_process("rm", "evil")
    assert r.exit_code == 0, r.stderr
    assert (outside / "a").read_text() == "a" and (outside / "dir" / "b").read_text() == "b"
    assert not own.exists()  # the model's own file still goes
    lines = r.stderr.splitlines()
    assert (
        lines[0].startswith("llmcli: left 3 listed file(s) alone: they lie outside")
        and "outside/a" in lines[0]
    )
    assert lines[1:] == ["removed evil"]
    assert "evil" not in cli_process("list").stdout


@pytest.mark.parametrize(
    ("models", "says"),
    [
        ([1, 2], 'is not a {"models": {NAME: ENTRY}} object'),
        ({"m": "x.gguf"}, "the entry 'm' is str, not an object"),
        ({"m": {"name": "m"}}, "the entry 'm' has no 'path'"),
        ({"m": {"path": 7}}, "the entry 'm' has a bad 'path' (it must be a string)"),
        ({"m": {"path": "/x.gguf", "files": "/x.gguf"}}, "has a bad 'files' (it must be a list of strings)"),
        ({"m": {"path": "/x.gguf", "files": [None]}}, "has a bad 'files'"),
        ({"m": {"path": "/x.gguf", "size": "big"}}, "has a bad 'size' (it must be a whole number of bytes)"),
        ({"m": {"path": "/x.gguf", "size": 10**400}}, "has a bad 'size'"),
        ({"m": {"path": "/x.gguf", "n_params": True}}, "has a bad 'n_params'"),
        ({"m": {"path": "/x\u0000.gguf"}}, "has a bad 'path'"),
        ({"m\x1b[2J": {"path": 1}}, "the entry 'm\\x1b[2J' has a bad 'path'"),
    ],
)
def test_a_manifest_of_the_wrong_shape_is_one_line_naming_it(
    private_store: Path, models: object, says: str
) -> None:
    manifest = write_manifest(private_store, models)
    for args in (["list"], ["rm", "m"], ["chat", "m", "hi", "-n", "1"]):
        r = cli(*args)  # in this process: the manifest is refused before anything a child would show
        assert r.exit_code == 2, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "\x1b" not in r.stderr, r.stderr
        assert f"the store manifest {manifest}" in r.stderr and says in r.stderr
        assert "move the manifest away" in r.stderr or "move it away" in r.stderr


def test_a_manifest_that_is_not_an_object_or_nested_too_deeply(private_store: Path) -> None:
    private_store.mkdir()
    for text in ("[]", "7", "[" * 100_000 + "]" * 100_000, '{"models": null}'):
        (private_store / "manifest.json").write_text(text)
        r = cli_process("list")
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "internal error" not in r.stderr, r.stderr
        assert "the store manifest" in r.stderr


def test_list_escapes_terminal_escapes_newlines_and_markup_in_names(
    private_store: Path, embedded_path: str
) -> None:
    name = "evil\x1b[31m\nFAKE ROW\u202e[bold]x[/]"
    write_manifest(
        private_store,
        {
            name: {
                "path": embedded_path,
                "files": [],
                "source": "s\x07rc",
                "quant": "Q\rX",
                "created": "2024\x1b]0;t\x07",
            }
        },
    )
    r = cli_process("list")
    assert r.exit_code == 0, r.stderr
    assert (
        "\x1b" not in r.stdout
        and "\x07" not in r.stdout
        and "\r" not in r.stdout
        and "\u202e" not in r.stdout
    )
    row = next(line for line in r.stdout.splitlines() if line.startswith("evil"))
    assert "evil\\x1b[31m\\nFAKE ROW\\u202e[bold]x[/]" in row and "FAKE ROW" not in r.stdout.replace(row, "")
    rm = cli_process("rm", name)
    assert rm.exit_code == 0 and "\x1b" not in rm.stderr and rm.stderr.startswith("removed evil\\x1b")


def test_an_ambiguous_prefix_lists_escaped_names_on_one_line(private_store: Path, embedded_path: str) -> None:
    write_manifest(private_store, {"mod\nA": {"path": embedded_path}, "mod\x1b[2JB": {"path": embedded_path}})
    r = cli_process("rm", "mod")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "\x1b" not in r.stderr, r.stderr
    assert "matches several models (mod\\nA, mod\\x1b[2JB)" in r.stderr


def test_a_name_with_newlines_is_echoed_escaped_on_one_line(private_store: Path) -> None:
    for name in ("mod a\nb", "a\nb\r\nc"):
        r = cli_process("chat", name, "hi", "-n", "1")
        assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "\\n" in r.stderr, r.stderr


def test_a_model_path_with_newlines_fails_on_one_line(private_store: Path) -> None:
    write_manifest(private_store, {"m": {"path": "a\nb\r\nc", "files": []}})
    r = cli_process("chat", "m", "hi", "-n", "1")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "a\\nb\\r\\nc" in r.stderr, r.stderr
