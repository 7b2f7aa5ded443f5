"""Stage ⑤ on hand-made token streams: every split point of every word."""

from __future__ import annotations

import pytest

from llmcli.engine.postprocess import Postprocessor, StopMatcher, Utf8Stream, WordFilter


def feed_all(obj, chunks) -> str:
    return "".join(obj.feed(c) for c in chunks) + obj.flush()


@pytest.mark.parametrize("split", range(1, 9))
def test_filter_masks_a_word_at_every_split_point(split):
    text = "the Darkness falls"
    chunks = [text[: 4 + split], text[4 + split :]]
    assert feed_all(WordFilter(["darkness"]), chunks) == "the *** falls"


def test_filter_on_one_character_per_token_and_phrases():
    f = WordFilter(["secret plan", "xyz"])
    assert feed_all(f, list("My SECRET PLAN is xyzzy")) == "My *** is ***zy"
    assert f.masked == 2


def test_filter_releases_a_near_miss():
    assert feed_all(WordFilter(["darkness"]), list("dark and darker")) == "dark and darker"


def test_filter_file_errors(tmp_path):
    from llmcli.errors import UsageError

    with pytest.raises(UsageError, match="no such filter file: "):
        WordFilter.from_file(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not UTF-8"):
        WordFilter.from_file(bad)


def test_stop_string_split_across_tokens_is_trimmed():
    m = StopMatcher(["</end>"])
    out = "".join(m.feed(c) for c in ["hello </", "en", "d> tail"])
    assert out == "hello " and m.stopped


def test_utf8_bytes_split_mid_character_wait_for_the_rest():
    data = "你好🙂".encode()
    s = Utf8Stream()
    outs = [s.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(outs) == "你好🙂"
    assert all("\ufffd" not in o for o in outs)


def test_postprocessor_chains_stop_then_filter():
    p = Postprocessor(stops=["STOP"], word_filter=WordFilter(["bad"]))
    chunks = [b"a b", b"ad word ST", b"OP ignored"]
    assert "".join(p.feed(c) for c in chunks) + p.flush() == "a *** word "
