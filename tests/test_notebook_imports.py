"""The sandbox course never loads the live web: every module a notebook imports is imported in a
fresh interpreter, one per notebook, and none of the live web's modules (``vsearcher_lite.live``,
the HTTP client in ``vsearcher_lite.net``, the HTTP libraries under it) is loaded, except by the
cells that demonstrate live mode, named in ``LIVE_CELLS``.
"""

from __future__ import annotations

import json

import pytest

from vsearcher_lite.notebooks import cell_imports, list_notebooks, loaded_modules, notebook_imports

#: notebook -> ids of the cells that demonstrate live mode (they import ``vsearcher_lite.live``).
LIVE_CELLS = {"00_sandbox_web_tour.ipynb": {"d0da7885"}}

#: The live web's modules: none of them may be loaded by a sandbox cell's imports.
LIVE_PREFIXES = ("vsearcher_lite.live", "vsearcher_lite.net", "httpx", "requests")

NOTEBOOKS = list_notebooks()


def is_live(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in LIVE_PREFIXES)


def test_the_cell_reader_finds_imports_at_any_depth():
    assert cell_imports("import os\nif True:\n    from a.b import c as d\n") == [
        "import os", "from a.b import c as d"]
    assert cell_imports("%matplotlib inline\nimport os") == []


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebooks_imports_load_no_live_module(path):
    sandbox, _ = notebook_imports(path, LIVE_CELLS.get(path.name, set()))
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
            _, live = notebook_imports(path, LIVE_CELLS[path.name])
            assert "vsearcher_lite.live" in loaded_modules(live)
