"""How `llmcli logs` shows exchanges: Markdown-like text (as `llm logs`), or one JSON list."""

from __future__ import annotations

from llmcli.display import printable
from llmcli.ui.output import Output


def block(text: str) -> str:
    """Logged text, line by line, with every control character but the newline shown escaped."""
    return "\n".join(printable(line, limit=len(line)) for line in text.split("\n"))


def show_exchanges(out: Output, found, json_out: bool) -> None:
    if json_out:
        out.json([e.as_dict() for e in found.exchanges])
        return
    if not found.exchanges:
        out.info(f"no exchanges to show from {found.path}")
        return
    parts = []
    for e in found.exchanges:
        head = (
            f"# {printable(e.datetime_utc, 40)}    conversation: {printable(e.conversation_id, 40)}"
            f"    id: {printable(e.id, 40)}\n\nModel: "
            f"**{printable(e.model)}**\n\n## Prompt\n\n{block(e.prompt)}\n"
        )
        system = f"\n## System\n\n{block(e.system)}\n" if e.system else ""
        reasoning = f"\n## Reasoning\n\n{block(e.reasoning)}\n" if e.reasoning else ""
        parts.append(f"{head}{system}{reasoning}\n## Response\n\n{block(e.reply)}\n")
    out.write("\n".join(parts))
