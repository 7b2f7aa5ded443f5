"""OpenAI's logprobs shapes from the engine's records, without a model: a token that is part of a
character, and a completion's text_offset carried from one streamed chunk to the next."""

from __future__ import annotations

from llmcli.engine.local.logprobs import Candidate, TokenLogprob
from llmcli.serve.logprobs import ChoiceLogprobs, token_text

# "a", then 🙂 (f0 9f 99 82) cut across two tokens, then "b"
PIECES = [b"a", b"\xf0\x9f", b"\x99\x82", b"b"]


def entries(pieces: list[bytes]) -> list[TokenLogprob]:
    return [
        TokenLogprob(Candidate(i, p, -0.5 - i), (Candidate(i, p, -0.5 - i), Candidate(99, b"z", -3.0)))
        for i, p in enumerate(pieces)
    ]


def test_a_token_that_is_part_of_a_character_is_named_by_its_bytes():
    assert token_text(b"\xf0\x9f") == "bytes:\\xf0\\x9f"
    assert token_text("é".encode()) == "é"


def test_chat_entries_carry_the_raw_bytes():
    content = ChoiceLogprobs(chat=True).shape(entries(PIECES))["content"]
    assert [bytes(e["bytes"]) for e in content] == PIECES
    assert bytes(b for e in content for b in e["bytes"]).decode() == "a🙂b"
    assert content[1]["token"] == "bytes:\\xf0\\x9f" and content[1]["top_logprobs"][1]["token"] == "z"


def test_a_completions_offsets_count_characters_across_chunks():
    whole = ChoiceLogprobs(chat=False).shape(entries(PIECES))
    assert whole["text_offset"] == [0, 1, 1, 2]  # the emoji is one character, begun at 1
    streamed = ChoiceLogprobs(chat=False)
    chunks = [streamed.shape(entries(PIECES)[i : i + 1]) for i in range(len(PIECES))]
    assert [o for chunk in chunks for o in chunk["text_offset"]] == whole["text_offset"]
    # the chosen token is among the most likely, with the others asked for
    assert whole["top_logprobs"][0] == {"a": -0.5, "z": -3.0}
