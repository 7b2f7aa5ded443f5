"""Token ids beside their pieces, as `tokenize` and `render --ids` print them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from llmcli.display import printable


def token_table(ids: Sequence[int], pieces: Sequence[bytes | str]) -> Table:
    """One row per token: its place, id and piece, quoted. A piece may be part of a UTF-8 character
    (its bytes shown as \\xNN), whitespace or a control character such as ESC (shown escaped, so
    that tokenizing text never writes an escape sequence to the terminal)."""
    table = Table(box=None, pad_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("id", justify="right")
    table.add_column("piece")
    for n, (i, piece) in enumerate(zip(ids, pieces, strict=True)):
        text = piece.decode("utf-8", "backslashreplace") if isinstance(piece, bytes) else piece
        table.add_row(str(n), str(i), Text(f"'{printable(text, limit=len(text))}'"))  # Text: no markup
    return table
