"""How the package's lines divide into code, docstrings, comments and blank lines, by package.

A count from the source (``ast`` finds the docstrings of modules, classes and functions), not a
timing; its total is the same as ``find vsearcher_lite -name '*.py' | xargs cat | wc -l``.

    python benchmarks/package_lines.py
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "vsearcher_lite"
KINDS = ("code", "docstring", "comment", "blank")


def line_kinds(source: str) -> Counter:
    """How many lines of ``source`` are code, docstring, comment or blank.

    >>> dict(line_kinds("def f():\\n    'Say hi.'\\n\\n    # greet\\n    return 1\\n"))
    {'code': 2, 'docstring': 1, 'blank': 1, 'comment': 1}
    """
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstring_lines = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            docstring_lines.update(range(first.lineno, first.end_lineno + 1))
    kinds = Counter()
    for number, line in enumerate(source.splitlines(), 1):
        text = line.strip()
        kind = ("docstring" if number in docstring_lines else "blank" if not text
                else "comment" if text.startswith("#") else "code")
        kinds[kind] += 1
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the package folder")
    args = parser.parse_args()
    by_package: dict[str, Counter] = {}
    files = sorted(args.root.rglob("*.py"))
    for path in files:
        parts = path.relative_to(args.root).parts
        package = parts[0] if len(parts) > 1 else "(top level)"
        by_package.setdefault(package, Counter()).update(line_kinds(path.read_text("utf-8")))
    total = sum(by_package.values(), Counter())
    print(f"{'package':14} {'lines':>7} " + " ".join(f"{k:>9}" for k in KINDS))
    for package, kinds in sorted(by_package.items(), key=lambda kv: -kv[1].total()):
        print(f"{package:14} {kinds.total():7d} " + " ".join(f"{kinds[k]:9d}" for k in KINDS))
    print(f"{'all':14} {total.total():7d} " + " ".join(f"{total[k]:9d}" for k in KINDS))
    print(f"{len(files)} files")


if __name__ == "__main__":
    main()
