"""Reranking with any chat model as a judge, as Qwen3-Reranker scores: after a fixed judging prompt,
rendered with the model's own chat template, the score is the logit margin of "yes" over "no" at the
reply's first token; relevance is its sigmoid (the probability of "yes" against "no").

The query and instruction come first and the document last, so every document's prompt shares the
same prefix: it is prefilled once and kept, and each document costs only its own tokens. The judge
decodes in a context of its own on the Runtime's weights (one sequence, `JUDGE_CTX` cells), so a
server's scheduler and its cells are never touched.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:
    from llmcli.engine.local.runtime import Runtime

SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
INSTRUCTION = "Given a search query, retrieve relevant passages that answer the query"
# The document's place in the user message: everything before it is shared by every document.
DOC_MARK = "\u0000DOCUMENT\u0000"
USER = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: " + DOC_MARK


@dataclass(frozen=True)
class Judged:
    index: int
    margin: float  # logit("yes") - logit("no")

    @property
    def relevance(self) -> float:
        return 1.0 / (1.0 + math.exp(-self.margin))


JUDGE_CTX = 2048


class Judge:
    def __init__(self, rt: Runtime, n_ctx: int = JUDGE_CTX) -> None:
        from llmcli.engine.local.logits import LogitRows
        from llmcli.engine.local.model_template import model_template

        self.rt = rt
        self.template = model_template(rt).template
        self.yes, self.no = self._answer_token("yes"), self._answer_token("no")
        ll = self.ll = rt.ll
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = min(n_ctx, rt.n_ctx_train or n_ctx)
        cparams.n_batch = cparams.n_ubatch = min(512, cparams.n_ctx)
        cparams.n_seq_max = 1
        cparams.n_threads = cparams.n_threads_batch = rt.n_threads
        cparams.no_perf = True
        self._ctx = ll.llama_init_from_model(rt.model_ptr, cparams)
        if not self._ctx:
            raise RuntimeFailure(f"llama.cpp could not create the judge's context ({rt.last_log()})")
        self.n_ctx, self.n_batch = int(ll.llama_n_ctx(self._ctx)), int(ll.llama_n_batch(self._ctx))
        self._memory = ll.llama_get_memory(self._ctx)
        self._buf = (ll.llama_token * self.n_batch)()
        self.kept: list[int] = []  # the tokens the context's cells hold
        self.n_tokens = 0
        self.rows = LogitRows(ll, self._ctx, rt.n_vocab)

    def close(self) -> None:
        if self._ctx:
            self.ll.llama_free(self._ctx)
            self._ctx = None

    def _keep(self, n: int) -> None:
        if n < len(self.kept):
            self.ll.llama_memory_seq_rm(self._memory, 0, n, -1)
            del self.kept[n:]

    def _prefill(self, tokens: list[int]) -> None:
        ll, buf = self.ll, self._buf
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            buf[: len(chunk)] = chunk
            rc = ll.llama_decode(self._ctx, ll.llama_batch_get_one(buf, len(chunk)))
            if rc != 0:
                raise RuntimeFailure(f"llama_decode failed with code {rc} ({self.rt.last_log()})")
            self.kept.extend(chunk)

    def _answer_token(self, word: str) -> int:
        ids = self.rt.tokenize(word)
        if len(ids) != 1:
            raise UsageError(
                f"the model's vocabulary has no single token for {word!r}; it cannot judge relevance"
            )
        return ids[0]

    def _prompt(self, query: str) -> tuple[str, str]:
        """The prompt's text before and after the document."""
        user = USER.format(instruction=INSTRUCTION, query=query)
        text = self.template.render(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
            add_generation_prompt=True,
        )
        before, _, after = text.partition(DOC_MARK)
        return before, after

    def score(self, query: str, documents: list[str]) -> list[Judged]:
        """Each document's margin, in the documents' order."""
        rt = self.rt
        before, after = self._prompt(query)
        prefix = rt.tokenize(before, parse_special=True, add_special=rt.add_bos)
        out = []
        self.n_tokens = 0  # the tokens of every document's whole prompt (the shared prefix counted each time)
        for i, doc in enumerate(documents):
            rest = rt.tokenize(doc) + rt.tokenize(after, parse_special=True)
            if len(prefix) + len(rest) > self.n_ctx:
                raise UsageError(
                    f"document {i} and the query take {len(prefix) + len(rest)} tokens; the judge's context "
                    f"holds {self.n_ctx}: shorten it"
                )
            self._keep(len(prefix) if self.kept[: len(prefix)] == prefix else 0)
            self._prefill((prefix + rest)[len(self.kept) :])
            self.n_tokens += len(prefix) + len(rest)
            row = self.rows.row(-1)
            out.append(Judged(i, float(row[self.yes]) - float(row[self.no])))
        return out
