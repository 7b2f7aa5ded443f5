"""Safe GGUF header reading: validate a file in Python before llama.cpp ever opens it.

llama.cpp trusts the header it reads; a truncated or hostile file can make it allocate wildly or
read past the end and take the process down. So every count, length and offset is checked against
the file size and sane limits first (reader.py); tensors must be aligned, inside the file and not
overlap, and every metadata key llama.cpp reads is checked against the table of types and ranges
llama.cpp asserts on (rules.py) and across keys (consistency.py). The facts llmcli shows
(architecture, layers, heads, KV bytes per token) come from the same pass (facts.py). The records
(records.py) are what every module here reads; none of them imports the one that uses it.

Not named `gguf`: that is gguf-py's name, which the converter imports.
"""

from __future__ import annotations

from llmcli.gguf_check.facts import ModelFacts, facts_from_header, model_facts
from llmcli.gguf_check.reader import read_header
from llmcli.gguf_check.records import GGUFHeader

__all__ = ["GGUFHeader", "ModelFacts", "facts_from_header", "model_facts", "read_header"]
