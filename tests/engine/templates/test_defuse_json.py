"""A template's `tojson` of defused tools and tool calls writes what transformers writes of the originals."""

from __future__ import annotations

import json

import pytest

from llmcli.engine.templates.defuse import Defuser

# Control-token texts as vocabularies spell them: ASCII (ChatML), non-ASCII (DeepSeek's full-width
# bars), and, never seen but possible, one JSON must escape.
CONTROLS = ["<|im_end|>", "<｜end▁of▁sentence｜>", '<"tab\t>']


def defused(defuser: Defuser, text: str) -> str:
    spans, at = [], 0
    while True:
        found = [(text.find(c, at), c) for c in CONTROLS if text.find(c, at) >= 0]
        if not found:
            return defuser.defuse(text, spans)
        start, control = min(found)
        spans.append((start, start + len(control)))
        at = start + len(control)


@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_tojson_of_defused_data_restores_to_transformers_text_of_the_original(ensure_ascii):
    data = {"city": "Paris " + "".join(CONTROLS), "note": "café \ue000 🙂", "n": 3}
    defuser = Defuser()
    data_defused = {k: defused(defuser, v) if isinstance(v, str) else v for k, v in data.items()}
    raw = json.dumps(data_defused, ensure_ascii=False)
    written = defuser.json_text(raw, ensure_ascii)
    assert defuser.restore(written) == json.dumps(data, ensure_ascii=ensure_ascii)
    # The ASCII control text stays stand-ins (tokenized as text), never the control token itself.
    assert "<|im_end|>" not in written
