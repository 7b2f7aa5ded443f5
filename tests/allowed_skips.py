"""The only skips a strict run (LLMCLI_TEST_STRICT=1, as `make test` and CI run) accepts.

Each row names the tests it covers (a regular expression over the pytest id), the skip reason it
accepts (another one), and why such a skip is not a hole in the suite. Any other skip fails a strict
run, and every run prints its skips grouped by reason (tests/conftest.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AllowedSkip:
    test: str  # re.fullmatch over the test id
    reason: str  # re.search over the skip reason
    why: str


CORPUS_TEST = r"tests/engine/test_template_corpus\.py::test_template_renders_as_transformers_does"

# Tool-use templates whose own code raises, in transformers too, on a conversation without tools.
TOOL_ONLY_TEMPLATES = (
    "CohereForAI-c4ai-command-r-plus-tool_use.jinja",  # iterates `tools`: 'NoneType' is not iterable
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",  # the same
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",  # the same
    "fireworks-ai-llama-3-firefunction-v2.jinja",  # reads `functions`: undefined
)

ALLOWED_SKIPS: list[AllowedSkip] = [
    AllowedSkip(
        test=CORPUS_TEST + r"\[(" + "|".join(re.escape(name) for name in TOOL_ONLY_TEMPLATES) + r")\]",
        reason=r"^transformers refuses every conversation",
        why="transformers' own rendering raises on every conversation of these templates (they need tools "
        "or functions, which the corpus does not send), so there is nothing to compare with; "
        "test_corpus_summary states how many templates must be compared",
    ),
]


def is_allowed(test: str, reason: str) -> bool:
    return any(re.fullmatch(row.test, test) and re.search(row.reason, reason) for row in ALLOWED_SKIPS)
