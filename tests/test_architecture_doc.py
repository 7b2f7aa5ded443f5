"""docs/architecture.md's layout is the tree: every module of src/llmcli is named in the entry of its
top-level folder (a top-level module by its file name), and every entry names a folder or file that
exists. A module added without a word in the layout fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "llmcli"
ENTRY = re.compile(r"^  (\S+)")  # a top-level entry: two spaces, then its name


def layout() -> dict[str, str]:
    """The Layout section's block: each src/llmcli entry's name -> its text (its lines and those of
    the entries indented under it)."""
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc[doc.index("## Layout") :]
    block = block[block.index("```") + 3 :]
    block = block[: block.index("```")]
    entries: dict[str, str] = {}
    name = None
    for line in block.splitlines():
        if line and not line.startswith(" "):  # docs/, scripts/, tests/: outside src/llmcli
            name = None
            continue
        found = ENTRY.match(line)
        if found is not None:
            name = found.group(1)
            entries[name] = ""
        if name is not None:
            entries[name] += line + "\n"
    return entries


def words(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][\w]*(?:\.py)?", text))


def missing() -> list[str]:
    entries = layout()
    gaps = []
    for path in sorted(PACKAGE.iterdir()):
        if path.name.startswith("__") or path.name.startswith("."):
            continue
        if path.is_file() and path.suffix == ".py":
            if path.name not in entries:
                gaps.append(f"{path.name}: no entry")
            continue
        if not path.is_dir():
            continue
        entry = entries.get(f"{path.name}/")
        if entry is None:
            gaps.append(f"{path.name}/: no entry")
            continue
        named = words(entry)
        for module in sorted(path.rglob("*.py")):
            if module.stem.startswith("__"):
                continue
            if module.stem not in named:
                gaps.append(f"{module.relative_to(PACKAGE)}: not named in the {path.name}/ entry")
    return gaps


def test_the_layout_names_every_module_of_the_tree():
    assert len(layout()) > 15  # the block was found
    assert missing() == []


def test_every_entry_of_the_layout_exists():
    for name in layout():
        assert (PACKAGE / name.rstrip("/")).exists(), (
            f"docs/architecture.md lists {name}, which is not in src/llmcli"
        )
