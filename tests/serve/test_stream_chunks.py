"""A streamed piece's chunk, spliced into a frame made once, is json.dumps of its whole envelope."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from sse_starlette import ServerSentEvent

from llmcli.engine.templates.thinking import ANSWER, REASONING
from llmcli.serve.call import Piece
from llmcli.serve.openai.routes import Shape, sse

TEXTS = ["Hello", ' "quoted" \\ back', "naïve 日本 😀", "\x00\x1f", "", "\n\t", '"}]}']


def shape(chat: bool, n: int = 2) -> Shape:
    # The parts of a Call that Shape reads for a plain piece: no log-probabilities asked, no tools.
    call = SimpleNamespace(gen=SimpleNamespace(logprobs=None, n=n), tools=[None] * n)
    return Shape(chat, 'model "x" \x00 ü', "fp_0123456789", call)  # type: ignore[arg-type]


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completion"])
def test_a_chunk_is_the_json_of_its_envelope_byte_for_byte(chat):
    s = shape(chat)
    for choice in (0, 1):
        for kind in (ANSWER, REASONING):
            for text in TEXTS:
                piece = Piece(kind, text, choice)
                assert s.chunk(piece) == json.dumps(s.envelope([s.piece(piece)], True))
                assert sse(s.chunk(piece)) == ServerSentEvent(s.chunk(piece), sep="\n").encode()
    assert len(s._frames) == 4  # one frame per choice and kind, reused for every text
