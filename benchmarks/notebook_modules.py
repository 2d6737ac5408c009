"""What a student's notebooks load: the package modules their imports pull in, and their lines.

Each notebook's code-cell imports run in a fresh interpreter; the modules of ``vsearcher_lite``
that end up loaded are counted with their lines, per notebook and for all notebooks together,
and those of the live web (``vsearcher_lite.live``, ``vsearcher_lite.net``) are counted apart.

    python benchmarks/notebook_modules.py            # this checkout
    python benchmarks/notebook_modules.py --root DIR --live vsearcher_lite.net ...
        # another checkout (an export of a commit), with the live web where it kept it
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

LIVE = ("vsearcher_lite.live", "vsearcher_lite.net")


def imports_of(notebook: Path) -> list[str]:
    """The import statements of a notebook's code cells, at any depth."""
    found = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code":
            continue
        try:
            tree = ast.parse("".join(cell["source"]))
        except SyntaxError:
            continue
        found += [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import,
                                                                           ast.ImportFrom))]
    return found


def loaded_files(root: Path, imports: list[str]) -> dict[str, int]:
    """Module name -> lines of its file, for the package modules ``imports`` load."""
    code = "\n".join(["import json, sys", *imports,
                      "print(json.dumps({n: getattr(m, '__file__', None) "
                      "for n, m in sys.modules.items() if n.startswith('vsearcher_lite')}))"])
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, env=env, check=True)
    files = json.loads(done.stdout.splitlines()[-1])
    return {name: len(Path(f).read_text(encoding="utf-8").splitlines())
            for name, f in files.items() if f and f.endswith(".py")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                   help="the checkout to measure (default: this one)")
    p.add_argument("--live", action="append",
                   help="a module prefix that counts as the live web (repeat; default: "
                        + ", ".join(LIVE) + ")")
    args = p.parse_args()
    root, live_prefixes = Path(args.root).resolve(), tuple(args.live or LIVE)
    union: dict[str, int] = {}
    print(f"{'notebook':28} {'modules':>7} {'lines':>7} {'live modules':>12} {'live lines':>10}")
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        found = loaded_files(root, imports_of(notebook))
        union.update(found)
        live = {n: k for n, k in found.items() if n.startswith(live_prefixes)}
        print(f"{notebook.stem:28} {len(found):7d} {sum(found.values()):7d} {len(live):12d} "
              f"{sum(live.values()):10d}")
    live = {n: k for n, k in union.items() if n.startswith(live_prefixes)}
    print(f"{'all notebooks':28} {len(union):7d} {sum(union.values()):7d} {len(live):12d} "
          f"{sum(live.values()):10d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
