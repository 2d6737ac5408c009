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
from pathlib import Path

LIVE = ("vsearcher_lite.live", "vsearcher_lite.net")


def package_lines(root: Path, imports: list[str]) -> dict[str, int]:
    """Module name -> lines of its file, for the package modules ``imports`` load."""
    from vsearcher_lite.notebooks import loaded_modules

    return {name: len(Path(f).read_text(encoding="utf-8").splitlines())
            for name, f in loaded_modules(imports, root).items()
            if name.startswith("vsearcher_lite") and f and f.endswith(".py")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(Path(__file__).resolve().parent.parent),
                   help="the checkout to measure (default: this one)")
    p.add_argument("--live", action="append",
                   help="a module prefix that counts as the live web (repeat; default: "
                        + ", ".join(LIVE) + ")")
    args = p.parse_args()

    from vsearcher_lite.notebooks import notebook_imports

    root, live_prefixes = Path(args.root).resolve(), tuple(args.live or LIVE)
    union: dict[str, int] = {}
    print(f"{'notebook':28} {'modules':>7} {'lines':>7} {'live modules':>12} {'live lines':>10}")
    for notebook in sorted((root / "notebooks").glob("*.ipynb")):
        found = package_lines(root, notebook_imports(notebook)[0])
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
