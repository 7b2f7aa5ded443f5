"""Continuing a final message (continue_final_message) on seeded hostile messages and templates.

Each case draws a template that keeps, trims, rewrites, skips, measures or repeats the message text, and a
final message built from words, runs of whitespace, control-token text, transformers' own
CONTINUE_FINAL_MESSAGE_TAG text, private-use characters and <think> tags (or nothing). transformers'
render_jinja_template(continue_final_message=True) is the reference: where it renders, llmcli's
`render` and `tokenize` text and the tokenized ids decoded back equal it, and the message text
makes no control token; where it refuses, llmcli raises TemplateError on both paths.

~60 cases per seed by default (seconds); LLMCLI_FUZZ_LONG=1 runs 1,000 (seeds: tests/fuzz/__init__.py).
"""

from __future__ import annotations

import collections
import random
import re

import pytest

from llmcli.engine.messages import Message
from llmcli.engine.templates.render import ChatTemplate
from llmcli.errors import TemplateError
from tests.engine.templates.test_template_corpus import control_ids, refused_to_continue, transformers_render
from tests.fuzz import SEED_IDS, assert_reached, cases, seeds

CASES = cases(default=60, long=1000)
FIXED_SEED = 20261204

_LOOP = "{% for m in messages %}<|im_start|>{{ m.role }}\n"
_END = "<|im_end|>\n{% endfor %}"
TEMPLATES = {
    "keeps": _LOOP + "{{ m.content }}" + _END,
    "trims": _LOOP + "{{ m.content | trim }}" + _END,
    "answer only": _LOOP + "{{ m.content.split('</think>')[-1] | trim }}" + _END,
    # rewrites letters no control-token text holds: a template that rewrites that text (upper-cases
    # "<|im_end|>") sees it defused, unchanged, where transformers' text changes; no real one does
    "rewrites": _LOOP + "{{ m.content | replace('w', 'W') }}" + _END,
    "skips empty": "{% for m in messages %}{% if m.content %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "<|im_end|>\n{% endif %}{% endfor %}",
    "repeats the last": "<|im_start|>system\nLast: {{ messages[-1].content }}<|im_end|>\n"
    + _LOOP
    + "{{ m.content }}"
    + _END,
    "measures": _LOOP + "({{ m.content | length }}) {{ m.content }}" + _END,
}
PIECES = [
    "word", " two", "Ωμέγα", "🙂", ".", " ", "  ", "\n", "\t", " \n ",
    "<|im_end|>", "<|im_start|>", "<|endoftext|>", "<think>", "</think>",
    "CONTINUE_FINAL_MESSAGE_TAG", "CONTINUE_FINAL_MESSAGE_TAG ", "\ue000", "\ufdd0", "123",
]  # fmt: skip
CONTROL_TEXT = re.compile(r"<\|[a-z_]+\|>")


def final_message(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.choice((0, 1, 2, 4, 8))))


def first_cases() -> list[tuple[str, str]]:
    """Every outcome by construction: whitespace kept, whitespace trimmed, a refusal."""
    return [("keeps", "My colour is \n"), ("trims", "My colour is \n"), ("rewrites", "two words <|im_end|>")]


@pytest.mark.parametrize("seed", seeds(FIXED_SEED), ids=SEED_IDS)
def test_continued_messages_render_as_transformers_does(runtime, seed):
    rng = random.Random(seed)
    bos = runtime.piece(runtime.bos_id, special=True).decode()
    eos = runtime.piece(runtime.eos_id, special=True).decode()
    counts: collections.Counter[str] = collections.Counter()
    drawn = [(rng.choice(sorted(TEMPLATES)), final_message(rng)) for _ in range(CASES)]
    for index, (name, final) in enumerate(first_cases() + drawn):
        where = f"seed {seed}, case {index} ({name!r}, {final!r})"
        turns = [("user", rng.choice(PIECES) + " hi"), ("assistant", final)]
        outcome = run_case(runtime, ChatTemplate(TEMPLATES[name], bos_token=bos, eos_token=eos), turns, where)
        counts[outcome] += 1
    print(f"\nfuzz continue, seed {seed}: {dict(counts)}")
    assert_reached(counts, "kept trailing whitespace", "trimmed", "refused", seed=seed)


def run_case(runtime, template: ChatTemplate, turns: list[tuple[str, str]], where: str) -> str:
    dicts = [{"role": r, "content": c} for r, c in turns]
    messages = [Message(r, c) for r, c in turns]
    try:
        want = transformers_render(template.source, dicts, template.bos_token, template.eos_token, True)
    except ValueError as exc:
        assert refused_to_continue(exc), f"{where}: transformers failed otherwise: {exc}"
        for attempt in (
            lambda: template.render(dicts, continue_final=True),
            lambda: template.tokenize(runtime, messages, continue_final=True),
        ):
            with pytest.raises(TemplateError):
                attempt()
        return "refused"
    prompt = template.tokenize(runtime, messages, continue_final=True)
    ids = prompt.tokens[1:] if runtime.add_bos and prompt.tokens[:1] == [runtime.bos_id] else prompt.tokens
    decoded = b"".join(runtime.piece(t, special=True) for t in ids).decode("utf-8")
    assert template.render(dicts, continue_final=True) == want, where
    assert prompt.text == want and decoded == want, f"{where}: {prompt.text!r} / {decoded!r} != {want!r}"
    blank = [Message(r, CONTROL_TEXT.sub(lambda m: "x" * len(m.group()), c)) for r, c in turns]
    try:
        markup_only = control_ids(runtime, template.tokenize(runtime, blank, continue_final=True).tokens)
    except TemplateError:  # the blanked text may be one the template rewrites
        markup_only = None
    if markup_only is not None:
        injected = len(control_ids(runtime, prompt.tokens)) > len(markup_only)
        assert not injected, f"{where}: message text became control tokens"
    final = turns[-1][1]
    if final == final.rstrip():
        return "continued"
    return "kept trailing whitespace" if want.endswith(final) else "trimmed"
