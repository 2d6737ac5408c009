"""The package's imports flow one way: no module imports, directly or around a circle, a module
that imports it back, and no package imports one of a layer above its own (``LAYERS``).

The graph is read from the source with ``ast``: every ``import`` and ``from ... import``, at module
level or inside a function, relative or absolute. ``from vsearcher_lite.x import y`` is an edge to
``vsearcher_lite.x.y`` when that is a module, else to ``vsearcher_lite.x``. Importing a submodule
is not counted as importing its package's ``__init__`` (every package would otherwise sit in a
circle with the modules it re-exports).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "vsearcher_lite"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of the package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` (the module in ``path``) imports anywhere in it."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.add(sub if sub in modules else target)
    edges = set()
    for target in found:
        while target and target not in modules:  # ``import a.b.c`` of a name inside a.b
            target = target.rpartition(".")[0]
        if target and target != name and (target == PACKAGE or target.startswith(PACKAGE + ".")):
            edges.add(target)
    return edges


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    modules = module_files(root)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    edges = [f"    {a} -> {b}" for a in component for b in sorted(graph[a] & inside)]
    return "\n".join([" <-> ".join(component), *edges])


def test_the_graph_reader_resolves_names_modules_and_relative_imports(tmp_path):
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .leaf import thing\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from vsearcher_lite import top\n")
    (pkg / "top.py").write_text(
        "from vsearcher_lite.sub import leaf\nfrom vsearcher_lite.sub import thing\n"
    )
    graph = import_graph(pkg)
    assert graph[f"{PACKAGE}.top"] == {f"{PACKAGE}.sub.leaf", f"{PACKAGE}.sub"}
    assert graph[f"{PACKAGE}.sub"] == {f"{PACKAGE}.sub.leaf"}
    assert graph[f"{PACKAGE}.sub.leaf"] == {f"{PACKAGE}.top"}
    assert cycles(graph) == [[f"{PACKAGE}.sub", f"{PACKAGE}.sub.leaf", f"{PACKAGE}.top"]]


def test_the_package_has_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 50  # the package was found
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(describe(c, graph) for c in found)


#: The package's layers, bottom first. A module imports modules of its own package and of lower
#: layers only: never a higher layer's, nor another package's of its own layer. Each name is a
#: subpackage or a top-level module; ``vsearcher_lite`` is the package's ``__init__``.
LAYERS = (
    "vsearcher_lite runio cache profiles stepper redaction",  # import nothing of the package
    "options runtime net",  # options from fields, the device and threads, HTTP and its guard
    "manifest model",  # the run manifest; the tiny base's tokenizer and architecture
    "chat world",  # chat backends; the sandbox and the live web
    "tools",  # text_search, image_search, visit
    "live",  # the live web: Wikidata and Wikipedia, the live tools, API keys, the OpenAI client
    "backends",  # a run's toolbox and chat backends from its settings: sandbox or live
    "agent",  # protocol, format check, judges, the ReAct loop, teachers, exports
    "config",  # the settings the stages share (EvalConfig)
    "scoring synthesis",  # the evaluation runner; the data stages, seeds to trajectories
    "recipes training",  # the tiny base's pretraining recipe (recipes.pretraining); SFT
    "rl",  # GRPO, from the SFT checkpoint
    "widgets",  # the notebooks' explorers (ipywidgets), over the SFT data and GRPO's rules
    "evaluation",  # the eval stage: benchmarks, the comparison
    "reference sandbox_bench",  # the shipped full-length run's card; the sandbox benchmarks
    "reference_ship",  # shipping a finished run as the reference, its card
    "reference_run",  # making the reference run
    "report",  # report.html
    "notebooks",  # reproduce
    "cli",  # the vsearcher-lite command (imports the stages' commands by name)
    "__main__",  # python -m vsearcher_lite
)


def package_of(module: str) -> str:
    """``vsearcher_lite.agent.loop`` -> ``agent``; ``vsearcher_lite.runio`` -> ``runio``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(layers: tuple[str, ...]) -> dict[str, int]:
    return {name: i for i, names in enumerate(layers) for name in names.split()}


def upward_edges(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """``a -> b`` for every import of a module in a layer at or above the importer's, outside
    its own package."""
    level = layer_of(layers)
    found = []
    for a in sorted(graph):
        for b in sorted(graph[a]):
            pa, pb = package_of(a), package_of(b)
            if pa != pb and level[pb] >= level[pa]:
                found.append(f"{a} -> {b}")
    return found


def test_the_layer_checker_flags_imports_upward_and_across_a_layer():
    graph = {
        "vsearcher_lite": set(),
        "vsearcher_lite.low": {"vsearcher_lite.low.a"},
        "vsearcher_lite.low.a": {"vsearcher_lite"},
        "vsearcher_lite.low.b": {"vsearcher_lite.high.c"},
        "vsearcher_lite.high.c": {"vsearcher_lite.low.a", "vsearcher_lite.peer"},
        "vsearcher_lite.peer": {"vsearcher_lite.low"},
    }
    layers = ("vsearcher_lite", "low", "high peer")
    assert upward_edges(graph, layers) == [
        "vsearcher_lite.high.c -> vsearcher_lite.peer",
        "vsearcher_lite.low.b -> vsearcher_lite.high.c",
    ]


def test_packages_import_downward():
    graph = import_graph()
    packages = {package_of(m) for m in graph}
    listed = set(layer_of(LAYERS))
    assert packages == listed, (f"packages without a layer: {sorted(packages - listed)}; "
                                f"layers naming no package: {sorted(listed - packages)}")
    found = upward_edges(graph, LAYERS)
    assert not found, "imports at or above the importer's layer:\n" + "\n".join(found)


MAX_FILE_LINES = 600


def test_no_module_is_longer_than_a_reader_can_hold():
    """Every module of the package has at most ``MAX_FILE_LINES`` lines: a longer one has
    more than one job and is split by job."""
    long = {name: n for name, path in module_files().items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_FILE_LINES}
    assert not long, f"modules over {MAX_FILE_LINES} lines: {long}"


MAX_FUNCTION_LINES = 100


def long_functions(source: str, limit: int) -> dict[str, int]:
    """The functions (methods and nested ones too) of ``source`` longer than ``limit`` lines."""
    return {node.name: node.end_lineno - node.lineno + 1 for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > limit}


def test_the_function_length_reader_counts_nested_functions():
    source = "def outer():\n    def inner():\n" + "        x = 1\n" * 5 + "    return inner\n"
    assert long_functions(source, 4) == {"outer": 8, "inner": 6}
    assert long_functions(source, 8) == {}


def test_no_function_is_longer_than_a_reader_can_follow():
    """A function reads top to bottom in named steps: none in the package is over
    ``MAX_FUNCTION_LINES`` lines (a longer one is split into named stages)."""
    long = {f"{name}:{fn}": n for name, path in module_files().items()
            for fn, n in long_functions(path.read_text(encoding="utf-8"),
                                        MAX_FUNCTION_LINES).items()}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_the_teacher_passes_its_state_explicitly():
    """The teacher is the function a student reads to see what the trajectories hold: its steps
    take and return their state, none rebinds a variable of the function around it."""
    source = module_files()["vsearcher_lite.agent.teacher"].read_text(encoding="utf-8")
    assert not [node.lineno for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Nonlocal)]
    assert long_functions(source, 60) == {}
