"""The README and docs/ speak to readers: a short README, no project-history references, no dead
links; docs/results.md holds what is measured now, within a page limit, and docs/log.md the
experiments, each entry with its question, command, commits and verdict (the one place, beside
the two commands' table, that names commits)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_BYTES = 15_000
RESULTS = ROOT / "docs" / "results.md"
RESULTS_MAX_LINES = 400
LOG = ROOT / "docs" / "log.md"
#: A log entry's body, blank lines aside: the question, the command, the commits, the verdict.
LOG_ENTRY_MAX_LINES = 10
#: The results page's one section that names commits (where each command last ran).
COMMANDS_SECTION = "The two commands"

#: Issue numbers, temporary paths, commit hashes and notes that live outside the repository.
HISTORY = re.compile(
    (
        r"issue [0-9]|issues? [0-9]|/tmp/|founding team|shared/reference|learning_cpu"
        r"|reference/[a-z_]+\.md|commit [0-9a-f]{7}|\.\./shared"
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


#: A commit hash as the pages write one: 7 to 40 hex digits, at least one a letter and one a digit.
COMMIT = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w-])")
ENTRY_HEADING = re.compile(r"^### (\d{4}-\d{2}-\d{2}): (\S.*)$", re.MULTILINE)
ENTRY_FIELDS = ("- **Question**:", "- **Command**:", "- **Commit**:", "- **Verdict**:")
RERUN_AT = re.compile(r"rerun at `([0-9a-f]{7,40})`")
BENCHMARK = re.compile(r"benchmarks/(\w+\.py)")


def log_entries(text: str) -> list[tuple[str, str, str]]:
    """``(date, title, body)`` of each ``### YYYY-MM-DD: title`` entry of the log, in order."""
    heads = list(ENTRY_HEADING.finditer(text))
    ends = [h.start() for h in heads[1:]] + [len(text)]
    return [(h.group(1), h.group(2), text[h.end():end]) for h, end in zip(heads, ends)]


def entry_fields(lines: list[str]) -> dict[str, str]:
    """Each ``- **Field**:`` bullet of an entry, its continuation lines joined to it."""
    fields: dict[str, str] = {}
    field = None
    for line in lines:
        if line.startswith("- **"):
            field = line.split("**:", 1)[0] + "**:"
            fields[field] = line
        elif field:
            fields[field] += " " + line.strip()
    return fields


def without_section(text: str, title: str) -> str:
    """``text`` less the ``## title`` section (up to the next heading of level 2)."""
    return re.sub(rf"(?ms)^## {re.escape(title)}\n.*?(?=^## |\Z)", "", text)


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def full_history() -> bool:
    """Whether this checkout has its whole history, so that old commits can be read."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return False
    shallow = git("rev-parse", "--is-shallow-repository")
    return shallow.returncode == 0 and shallow.stdout.strip() == "false"


def anchors_text(path: Path) -> list[str]:
    return HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def test_the_results_page_is_the_current_page_and_short():
    lines = len(RESULTS.read_text(encoding="utf-8").splitlines())
    assert lines <= RESULTS_MAX_LINES, (
        f"docs/results.md is {lines} lines (at most {RESULTS_MAX_LINES}): experiments go to "
        "docs/log.md"
    )
    assert COMMANDS_SECTION in anchors_text(RESULTS)


def test_the_readme_points_to_the_results_and_the_log():
    targets = {t.partition("#")[0] for t in relative_links(README)}
    assert {"docs/results.md", "docs/log.md"} <= targets


def test_every_log_entry_asks_names_its_command_and_commits_and_answers():
    text = LOG.read_text(encoding="utf-8")
    entries = log_entries(text)
    assert len(entries) >= 10 and text.count("\n### ") == len(entries)
    problems = []
    for date, title, body in entries:
        lines = [line for line in body.splitlines() if line.strip()]
        fields = entry_fields(lines)
        if missing := [f for f in ENTRY_FIELDS if f not in fields]:
            problems.append(f"{date} {title}: no {', '.join(missing)}")
        if len(lines) > LOG_ENTRY_MAX_LINES:
            problems.append(f"{date} {title}: {len(lines)} lines (at most {LOG_ENTRY_MAX_LINES})")
        if not RERUN_AT.search(fields.get("- **Commit**:", "")):
            problems.append(f"{date} {title}: its commit field names no commit to rerun at")
    dates = [date for date, _, _ in entries]
    assert dates == sorted(dates, reverse=True), "docs/log.md: entries not newest first"
    assert not problems, "docs/log.md:\n" + "\n".join(problems)


def test_commits_are_named_only_in_the_log_and_where_the_two_commands_ran():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    assert LOG in pages and RESULTS in pages
    found = []
    for page in pages:
        if page == LOG:
            continue
        text = page.read_text(encoding="utf-8")
        if page == RESULTS:
            assert COMMIT.search(text), "docs/results.md: the two commands name their commits"
            text = without_section(text, COMMANDS_SECTION)
        found += [f"{page.relative_to(ROOT)}: {m.group(0)}" for m in COMMIT.finditer(text)]
    assert not found, "commits outside docs/log.md and the two commands' table:\n" + "\n".join(
        found)


def test_every_benchmark_a_page_names_exists_and_every_benchmark_is_named():
    scripts = {p.name for p in (ROOT / "benchmarks").glob("*.py")}
    current = [README, RESULTS, ROOT / "docs" / "architecture.md"]
    missing = [f"{page.relative_to(ROOT)}: benchmarks/{name}"
               for page in current
               for name in BENCHMARK.findall(page.read_text(encoding="utf-8"))
               if name not in scripts]
    assert not missing, "benchmarks named but not in benchmarks/:\n" + "\n".join(missing)
    named = {name for page in (*current, LOG)
             for name in BENCHMARK.findall(page.read_text(encoding="utf-8"))}
    assert scripts and scripts <= named, f"benchmarks no page names: {sorted(scripts - named)}"


def test_every_log_entry_reruns_at_a_commit_that_holds_its_benchmarks():
    """Each commit the log names is in the history, and the commit an entry reruns at holds every
    benchmark script the entry runs (a deleted one included)."""
    if not full_history():
        pytest.skip("needs the repository's whole git history")
    missing = []
    for date, title, body in log_entries(LOG.read_text(encoding="utf-8")):
        for commit in set(COMMIT.findall(body)):
            if git("cat-file", "-e", f"{commit}^{{commit}}").returncode:
                missing.append(f"{date} {title}: no commit {commit}")
        rerun = RERUN_AT.search(body)
        for name in set(BENCHMARK.findall(body)) if rerun else ():
            if git("cat-file", "-e", f"{rerun.group(1)}:benchmarks/{name}").returncode:
                missing.append(f"{date} {title}: benchmarks/{name} not at {rerun.group(1)}")
    assert not missing, "docs/log.md:\n" + "\n".join(missing)


def test_the_log_checks_see_a_bad_entry(tmp_path):
    """The entry checks above would catch a missing field, a missing commit and a page that names
    a commit outside the log and the two commands."""
    text = (
        "# Log\n\n### 2026-11-30: Later\n\n- **Question**: q?\n- **Command**: `c`\n"
        "- **Commit**: measured on `a1b2c3d`; rerun at `8ecdec5`.\n- **Verdict**: no.\n\n"
        "### 2026-11-29: Earlier\n\n- **Question**: q?\n- **Verdict**: yes.\n"
    )
    entries = log_entries(text)
    assert [(d, t) for d, t, _ in entries] == [("2026-11-30", "Later"), ("2026-11-29", "Earlier")]
    later, earlier = (entry_fields(body.strip().splitlines()) for _, _, body in entries)
    assert list(later) == list(ENTRY_FIELDS) and "- **Commit**:" not in earlier
    assert RERUN_AT.search(later["- **Commit**:"]).group(1) == "8ecdec5"
    wrapped = entry_fields(["- **Commit**: measured on `a1b2c3d`;", "  rerun at `8ecdec5`."])
    assert RERUN_AT.search(wrapped["- **Commit**:"]).group(1) == "8ecdec5"
    page = "## The two commands\n\n| x | `108fb26` |\n\n## Engine\n\nat `854bab8`, 1.25e-05, 2026\n"
    assert [m.group(0) for m in COMMIT.finditer(page)] == ["108fb26", "854bab8"]
    assert [m.group(0) for m in COMMIT.finditer(without_section(page, "The two commands"))] == [
        "854bab8"]
