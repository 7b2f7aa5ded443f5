"""One size format for every command, and the shared file-system checks."""

from __future__ import annotations

import os
from collections import namedtuple

import pytest

from llmcli import fsutil
from llmcli.units import format_bytes


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (98_432_000, "98.4 MB"),
        (96_576_768, "96.6 MB"),
        (4_920_000_000, "4.9 GB"),
        (10**15, "1000000.0 GB"),
    ],
)
def test_sizes_are_decimal_with_one_decimal(n, text):
    assert format_bytes(n) == text


def test_space_shortfalls_add_up_targets_on_one_filesystem(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(fsutil.shutil, "disk_usage", lambda p: usage(10**9, 0, 1000))
    assert fsutil.space_shortfalls({tmp_path / "a": 600}) == []
    # two targets that each fit, on one filesystem, do not fit together; a missing folder counts as its parent
    short = fsutil.space_shortfalls({tmp_path / "a": 600, tmp_path / "not" / "yet": 600})
    assert short == [fsutil.Shortfall(tmp_path, 1200, 1000)]


def test_chmod_like_new_file_follows_the_umask(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"x")
    os.chmod(path, 0o600)
    old = os.umask(0o027)
    try:
        fsutil.chmod_like_new_file(path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
