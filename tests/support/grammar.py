"""Shape the real model's output with llama.cpp's grammar sampler (no mock): the tests of thinking
replies need a model that writes `<think>…</think>` and then an answer, which a 135M model does
not do by itself."""

from __future__ import annotations

# Shaped as Qwen3 writes it: `<think>\n…\n</think>\n\n` then an answer that starts and ends with a letter.
ANSWER = "[A-Z] [a-z ]{1,16} [a-z]"
THINK_THEN_ANSWER = f'root ::= "<think>\\n" [a-z ]{{1,16}} "\\n</think>\\n\\n" {ANSWER}'
CLOSE_THEN_ANSWER = f'root ::= [a-z ]{{1,16}} "\\n</think>\\n\\n" {ANSWER}'  # the prompt opened <think>


def grammar_sampler(grammar: str):
    """A Sampler class for llmcli.engine.chat: the grammar, then greedy. Same interface as Sampler."""

    class GrammarSampler:
        def __init__(self, runtime, params, grammar_check=None) -> None:  # Sampler's signature
            ll = self.ll = runtime.ll
            self._ctx = runtime.ctx_ptr
            self._chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
            ll.llama_sampler_chain_add(
                self._chain, ll.llama_sampler_init_grammar(runtime.vocab, grammar.encode(), b"root")
            )
            ll.llama_sampler_chain_add(self._chain, ll.llama_sampler_init_greedy())

        def sample(self, idx: int = -1) -> int:
            return int(self.ll.llama_sampler_sample(self._chain, self._ctx, idx))

        def close(self) -> None:
            if self._chain:
                self.ll.llama_sampler_free(self._chain)
                self._chain = None

    return GrammarSampler
