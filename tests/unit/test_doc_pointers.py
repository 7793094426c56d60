"""Pointers into the documentation lead somewhere: every ``FILE.md, "Section"`` written in the
package's docstrings and comments, and in the Markdown docs, names a file that exists and a
heading (or a bold paragraph lead) that it has. A section renamed or removed fails here."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# `docs/safety.md`, "Warnings" — quotes, brackets and a line break (with its comment or
# indentation) may sit between the file and the section.
POINTER = re.compile(
    r"((?:docs/|bench/|deploy/)?[\w-]+\.md)[`\])]*(?:\([^)\s]*\))?,?\s*(?:#\s*)?\"([^\"]+)\""
)


def _prose(path: Path) -> list[str]:
    """The docstrings and comments of one module."""
    source = path.read_text(encoding="utf-8")
    texts = [
        docstring
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (docstring := ast.get_docstring(node, clean=False)) is not None
    ]
    comments = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    # Consecutive comment lines read as one text, so a pointer may wrap.
    return [*texts, "\n".join(comments)]


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    headings = re.findall(r"^#+\s+(.*)$", text, re.MULTILINE)
    leads = re.findall(r"\*\*([^*]+)\*\*", text)
    return {re.sub(r"[`*]", "", anchor).strip().rstrip(".") for anchor in headings + leads}


def _target(name: str, where: Path) -> Path | None:
    for candidate in (ROOT / name, ROOT / "docs" / name, where.parent / name):
        if candidate.is_file():
            return candidate
    return None


def broken_pointers() -> list[str]:
    sources: list[tuple[Path, str]] = [
        (path, text)
        for path in sorted((ROOT / "watchdog_gpu").rglob("*.py"))
        for text in _prose(path)
    ]
    markdown = [
        *sorted((ROOT / "docs").glob("*.md")),
        ROOT / "README.md",
        ROOT / "deploy" / "README.md",
    ]
    sources += [(path, path.read_text(encoding="utf-8")) for path in markdown]
    broken = []
    for where, text in sources:
        for match in POINTER.finditer(text):
            name = match.group(1)
            section = re.sub(r"\s*\n\s*(?:#\s*)?", " ", match.group(2)).strip().rstrip(".")
            target = _target(name, where)
            if target is None:
                broken.append(f"{where.relative_to(ROOT)}: {name} does not exist")
                continue
            anchors = _anchors(target)
            if not any(anchor.startswith(section) for anchor in anchors):
                broken.append(f'{where.relative_to(ROOT)}: {name} has no "{section}"')
    return broken


def test_every_pointer_to_a_documentation_section_names_one_that_exists() -> None:
    assert broken_pointers() == []


def test_the_check_sees_pointers_in_comments_docstrings_and_markdown() -> None:
    # A guard against a check that passes because it reads nothing.
    found = 0
    for path in sorted((ROOT / "watchdog_gpu").rglob("*.py")):
        found += sum(len(POINTER.findall(text)) for text in _prose(path))
    assert found >= 20
    assert POINTER.search('see `docs/safety.md`, "Fuse"')
    assert POINTER.search('(bench/README.md, "The daemon\'s memory\n# floor")')
