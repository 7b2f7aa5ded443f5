"""A grammar no token can continue: refused from its text where possible, else the reply ends.

llama.cpp aborts the process when it accepts a token its grammar refuses (GGML_ABORT on an end
token, an exception thrown through its C API otherwise), and a sampler draws one as soon as the
grammar masks every candidate. The text check (gbnf_chars) is held against llama.cpp's own masking
on the embedded model's vocabulary; the sampler's guard is driven to a real dead end.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from llmcli.engine.local.batch import TokenBatch
from llmcli.engine.local.gbnf_chars import check_chars, check_text
from llmcli.engine.local.grammar import ThinkGate, check_gbnf, grammar_sampler
from llmcli.engine.local.runtime import Runtime, RuntimeConfig
from llmcli.engine.local.sampler import GrammarCheck, Sampler
from llmcli.engine.sampling import SamplingParams
from llmcli.errors import UsageError

# Refused from the text, with the words of the message. The first ones llama.cpp itself masks every
# token on (ABORTS_FIRST); the others it would let a byte-level vocabulary write as invalid UTF-8.
ABORTS_FIRST = [
    (r"root ::= [z-a]", "the character class [z-a] at line 1, column 10 matches no character"),
    (r"root ::= [^\x00-\U0010FFFF]", "the character class [^\\x00-\\U0010FFFF] at line 1, column 10"),
    (r"root ::= [\x00]", "the character class [\\x00] at line 1"),
    (r"root ::= [c-ab-a\x00]", "the character class [c-ab-a\\x00] at line 1"),
    (r'root ::= "\x00"', 'the literal "\\x00" at line 1, column 10 holds NUL (\\x00)'),
    (r'root ::= "\u0000b"', 'the literal "\\u0000b" at line 1, column 10 holds NUL (\\x00)'),
]
REFUSED = [
    *ABORTS_FIRST,
    (r"root ::= [^\x01-\uD7FF\uE000-\U0010FFFF]", "matches no character a model can write"),
    (r"root ::= [\uD800-\uDFFF]", "matches no character a model can write"),
    (r"root ::= [\U00110000-\UFFFFFFFF]", "matches no character a model can write"),
    (
        r'root ::= "ok" x' + "\n" + r'x ::= "\U00110000"',
        'the literal "\\U00110000" at line 2, column 7 holds U+110000',
    ),
    (r'root ::= "a" | "\uD83D"', "holds U+D83D, which no model can write"),
]
# Accepted: escapes that only look alike, classes that leave a character, empty classes (an empty
# string to llama.cpp), and what sits in comments or token references.
ACCEPTED = [
    r'root ::= "\\x00"',
    r'root ::= "\x41BC"',
    r"root ::= [a-a]",
    r"root ::= [\x00-\x01]",
    r"root ::= [\uD7FF-\uE000]",
    r"root ::= [b-ac-c]",
    r"root ::= [a-] [-] [\]] [\[-\]]",
    r'root ::= [] [^] "x"',
    'root ::= "x" # [z-a] "\\x00"',
    r'root ::= "x" <[0]>',
]


@pytest.mark.parametrize("gbnf, words", REFUSED)
def test_a_grammar_demanding_what_no_model_writes_is_refused_with_its_place(gbnf, words):
    with pytest.raises(UsageError) as err:
        check_gbnf(gbnf + "\n", "g.gbnf")
    message = str(err.value)
    assert message.startswith("g.gbnf: ") and words in message and message.endswith("; fix the grammar")
    assert "\n" not in message


# Dead ends no text check sees: after "a", a token past the vocabulary; or U+10FFFF alone, which
# this vocabulary writes only in pieces, and llama.cpp lets no piece of a character through a
# negated class that could still complete to one it excludes.
LATE_DEAD_ENDS = ['root ::= "a" <[999999]>', r'root ::= "a" [^\x00-\U0010FFFE]']


@pytest.mark.parametrize("gbnf", ACCEPTED + LATE_DEAD_ENDS)
def test_a_grammar_that_leaves_a_character_is_accepted(gbnf):
    check_gbnf(gbnf + "\n", "g.gbnf")


@pytest.mark.parametrize(
    "text, words",
    [
        (
            'root ::= "ab"\x00 junk',
            "holds a NUL character at line 1, column 14 (llama.cpp would stop reading",
        ),
        ('root ::= "\ud800"', "holds a lone surrogate (U+D800) at line 1, column 11"),
    ],
)
def test_raw_nul_or_surrogate_in_the_text_is_refused(text, words):
    with pytest.raises(UsageError) as err:
        check_text(text, "grammar", "fix the grammar")
    assert str(err.value).startswith("grammar ") and words in str(err.value)


def test_a_schema_grammar_is_refused_in_schema_words():
    with pytest.raises(UsageError) as err:
        check_chars('root ::= "\\x00"', "--schema: the grammar made from it", "simplify the schema")
    assert str(err.value).startswith("--schema: the grammar made from it: the literal")


def _allowed(rt: Runtime, ptr) -> int:
    """How many tokens of the vocabulary llama.cpp's grammar lets through as the first one."""
    n = rt.n_vocab
    cands = np.zeros(n, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
    cands["id"] = np.arange(n, dtype=np.int32)
    arr = rt.ll.llama_token_data_array(cands.ctypes.data_as(rt.ll.llama_token_data_p), n, -1, False)
    rt.ll.llama_sampler_apply(ptr, ctypes.byref(arr))
    return int((cands["logit"] > -np.inf).sum())


@pytest.mark.parametrize("gbnf", [g for g, _ in ABORTS_FIRST])
def test_the_text_check_refuses_what_llama_cpp_masks_every_token_on(runtime, gbnf):
    ptr = runtime.ll.llama_sampler_init_grammar(runtime.vocab, gbnf.encode(), b"root")  # no check
    try:
        assert _allowed(runtime, ptr) == 0
    finally:
        runtime.ll.llama_sampler_free(ptr)


@pytest.mark.parametrize("gbnf", ACCEPTED)
def test_what_the_text_check_accepts_llama_cpp_lets_some_token_through(runtime, gbnf):
    ptr = grammar_sampler(runtime.vocab, gbnf, "g")
    try:
        assert _allowed(runtime, ptr) > 0
    finally:
        runtime.ll.llama_sampler_free(ptr)


@pytest.fixture(scope="module")
def decoded(embedded_path):
    """A runtime with one decoded prompt, whose last row the samplers read."""
    rt = Runtime(embedded_path, RuntimeConfig(n_ctx=256, n_threads=1))
    batch = TokenBatch(rt.ll, 64)
    batch.add_scored(rt.tokenize("The answer is", add_special=True), 0, 0)
    assert rt.ll.llama_decode(rt.ctx_ptr, batch.for_decode()) == 0
    yield rt, batch.n - 1
    batch.close()
    rt.close()


@pytest.mark.parametrize("gbnf", LATE_DEAD_ENDS)
@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0),
        SamplingParams(temperature=0.8, seed=3),
        SamplingParams(temperature=0.8, seed=3, repeat_penalty=1.3),  # the stateful chain's path
    ],
)
def test_a_dead_end_ends_the_reply_with_the_end_token_instead_of_aborting(decoded, gbnf, params):
    rt, idx = decoded
    check = GrammarCheck(rt, grammar_sampler(rt.vocab, gbnf, "g"), ThinkGate(None))
    sampler = Sampler(rt, params, grammar=check)
    try:
        assert rt.piece(sampler.sample(idx)) == b"a" and check.dead_ends == 0
        for n in (1, 2):  # and again: the grammar was left as it was
            token = sampler.sample(idx)
            assert rt.is_eog(token) and check.dead_ends == n
    finally:
        sampler.close()
