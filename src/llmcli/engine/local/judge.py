"""Reranking with any chat model as a judge, as Qwen3-Reranker scores: after a fixed judging prompt,
rendered with the model's own chat template, the score is the logit margin of "yes" over "no" at the
reply's first token; relevance is its sigmoid (the probability of "yes" against "no").

The query and instruction come first and the document last, so every document's prompt shares the
same prefix: it is prefilled once and kept (Runtime.keep_prefix), and each document costs only its
own tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmcli.errors import UsageError

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


class Judge:
    def __init__(self, rt: Runtime) -> None:
        from llmcli.engine.local.logits import LogitRows
        from llmcli.engine.local.model_template import model_template

        self.rt = rt
        self.template = model_template(rt).template
        self.yes, self.no = self._answer_token("yes"), self._answer_token("no")
        self.rows = LogitRows(rt.ll, rt.ctx_ptr, rt.n_vocab)

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
        rt.clear()
        out = []
        for i, doc in enumerate(documents):
            rest = rt.tokenize(doc) + rt.tokenize(after, parse_special=True)
            if len(prefix) + len(rest) > rt.n_ctx:
                raise UsageError(
                    f"document {i} and the query take {len(prefix) + len(rest)} tokens; the context holds "
                    f"{rt.n_ctx}: shorten it or raise --ctx"
                )
            kept = rt.keep_prefix(len(prefix)) if rt.kv_tokens[: len(prefix)] == prefix else rt.keep_prefix(0)
            rt.prefill((prefix + rest)[kept:])
            row = self.rows.row(-1)
            out.append(Judged(i, float(row[self.yes]) - float(row[self.no])))
        return out
