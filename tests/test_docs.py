"""The README and docs/ speak to readers: a short README, no project-history references, no dead
links."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 15_000

#: Issue numbers, temporary paths, commit hashes and notes that live outside the repository.
HISTORY = re.compile(
    (
        r"issue [0-9]|issues? [0-9]|/tmp/|founding team|shared/reference|learning_cpu"
        r"|reference/[a-z_]+\.md|commit [0-9a-f]{7}"
    ),
    re.IGNORECASE,
)
#: Folders whose text files the history check reads (the README is checked beside them).
CHECKED_DIRS = ("docs", "notebooks", "vsearcher_lite")
TEXT_SUFFIXES = {
    ".md",
    ".py",
    ".ipynb",
    ".svg",
    ".txt",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".jinja",
}

#: ``[text](target)`` and ``![alt](target)``; the target ends at whitespace or ``)``.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def history_hits(path: Path) -> list[str]:
    """``file:line: text`` for every line of ``path`` that the history pattern matches."""
    hits = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if HISTORY.search(line):
            hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    return hits


def checked_files() -> list[Path]:
    files = [README]
    for folder in CHECKED_DIRS:
        files += sorted(
            p
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
        )
    return files


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


def relative_links(path: Path) -> list[str]:
    """Link targets of a Markdown file outside code blocks, without web, mail and in-page links."""
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists() or ROOT not in (dest, *dest.parents):
            broken.append(f"{path.relative_to(ROOT)}: {target} (no such file in the repository)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(
                f"{path.relative_to(ROOT)}: {target} (no heading '#{anchor}' in {dest.name})"
            )
    return broken


def test_the_readme_is_short():
    size = README.stat().st_size
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes (at most {README_MAX_BYTES:,}): move detail to docs/"
    )


def test_no_project_history_in_the_readme_docs_or_library():
    files = checked_files()
    assert (
        README in files
        and any(p.suffix == ".py" for p in files)
        and any(p.parent.name == "docs" for p in files)
    )
    hits = [hit for path in files for hit in history_hits(path)]
    assert not hits, (
        "issue numbers, temporary paths, commit hashes or outside notes:\n" + "\n".join(hits)
    )


@pytest.mark.parametrize(
    "doc", [README, *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_every_relative_link_points_into_the_repository(doc):
    assert doc.is_file()
    broken = broken_links(doc)
    assert not broken, "\n".join(broken)


def test_the_link_check_sees_links_and_dead_ends(tmp_path, monkeypatch):
    """The checks above would catch a dead link, a missing heading and a history reference."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "# Measured results\n\nSee [b](b.md).\n", encoding="utf-8"
    )
    page = tmp_path / "page.md"
    page.write_text(
        (
            "![fig](docs/fig.svg) [ok](docs/a.md#measured-results) [no](docs/a.md#nothing)\n"
            "[web](https://example.org/x) [here](#top)\n```\n[in code](missing.md)\n```\n"
            "Measured at commit 0123abc in /tmp/x.\n"
        ),
        encoding="utf-8",
    )
    assert relative_links(page) == [
        "docs/fig.svg",
        "docs/a.md#measured-results",
        "docs/a.md#nothing",
        "#top",
    ]
    assert [b.split(": ")[1] for b in broken_links(page)] == [
        "docs/fig.svg (no such file in the repository)",
        "docs/a.md#nothing (no heading '#nothing' in a.md)",
        "#top (no heading '#top' in page.md)",
    ]
    assert len(history_hits(page)) == 1
