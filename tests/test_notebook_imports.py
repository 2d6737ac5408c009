"""The sandbox course never loads the live web: every module a notebook imports is imported in a
fresh interpreter, one per notebook, and none of the live web's modules (``vsearcher_lite.live``,
the HTTP client in ``vsearcher_lite.net``, the HTTP libraries under it) is loaded, except by the
cells that demonstrate live mode, named in ``LIVE_CELLS``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys

import pytest

from vsearcher_lite.notebooks import list_notebooks

#: notebook -> ids of the cells that demonstrate live mode (they import ``vsearcher_lite.live``).
LIVE_CELLS = {"00_sandbox_web_tour.ipynb": {"d0da7885"}}

#: The live web's modules: none of them may be loaded by a sandbox cell's imports.
LIVE_PREFIXES = ("vsearcher_lite.live", "vsearcher_lite.net", "httpx", "requests")

NOTEBOOKS = list_notebooks()


def cell_imports(source: str) -> list[str]:
    """The import statements of one code cell, at any depth, as source lines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell with IPython magics: no imports of the package are hidden there
        return []
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))]


def notebook_imports(path) -> tuple[list[str], list[str]]:
    """(the imports of the sandbox cells, those of the cells named in ``LIVE_CELLS``)."""
    live_ids = LIVE_CELLS.get(path.name, set())
    sandbox, live = [], []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            found = cell_imports("".join(cell["source"]))
            (live if cell.get("id") in live_ids else sandbox).extend(found)
    return sandbox, live


def loaded_modules(imports: list[str]) -> list[str]:
    """The modules that ``imports`` load in a fresh interpreter."""
    code = "\n".join(["import json, sys", *imports, "print(json.dumps(sorted(sys.modules)))"])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def is_live(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in LIVE_PREFIXES)


def test_the_cell_reader_finds_imports_at_any_depth():
    assert cell_imports("import os\nif True:\n    from a.b import c as d\n") == [
        "import os", "from a.b import c as d"]
    assert cell_imports("%matplotlib inline\nimport os") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebooks_imports_load_no_live_module(path):
    sandbox, _ = notebook_imports(path)
    modules = loaded_modules(sandbox)
    assert "vsearcher_lite" in modules  # the notebook imports the package
    live = [m for m in modules if is_live(m)]
    assert not live, f"{path.name} loads the live web: {live}"


def test_the_named_live_cells_are_the_ones_that_go_live():
    names = {p.name for p in NOTEBOOKS}
    assert set(LIVE_CELLS) <= names
    for path in NOTEBOOKS:
        if path.name in LIVE_CELLS:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            assert LIVE_CELLS[path.name] <= {c.get("id") for c in cells}
            _, live = notebook_imports(path)
            assert "vsearcher_lite.live" in loaded_modules(live)
