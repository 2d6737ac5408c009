"""Notebooks as programs: clean-checking, execution under papermill, and the reproduction.

``python -m vsearcher_lite.notebooks --clean FILES`` cleans notebooks for committing;
``reproduce`` runs every numbered notebook in order, then writes ``summary.json`` and
``report.html``, also after a failure. Peak memory is measured two ways: the sampled sum over the
process tree (a spike shorter than the interval can be missed) and the largest finished child's
exact high-water mark (``getrusage``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from vsearcher_lite.report import offline_html_exporter, report_html
from vsearcher_lite.runio import InputError, atomic_write_json, atomic_write_text

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NUMBERED = re.compile(r"^\d\d[a-z]?_.*\.ipynb$")


def list_notebooks(folder: str | Path = NOTEBOOK_DIR) -> list[Path]:
    """The numbered notebooks of the pipeline, in order (00_..., 01_..., 06a_...)."""
    folder = Path(folder)
    return sorted(p for p in folder.glob("*.ipynb") if NUMBERED.match(p.name))


def notebook_problems(path: str | Path) -> list[str]:
    """What keeps a notebook from being clean enough to commit; empty when it is clean."""
    path = Path(path)
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        return [f"not valid JSON ({exc.msg} at line {exc.lineno})"]
    problems = []
    if nb.get("metadata", {}).get("widgets"):
        problems.append("metadata holds widget state")
    n_params = 0
    for i, cell in enumerate(nb.get("cells", [])):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            n_params += 1
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            problems.append(f"cell {i} has outputs")
        if cell.get("execution_count") is not None:
            problems.append(f"cell {i} has an execution count")
    if n_params != 1:
        problems.append(f"expected exactly one cell tagged 'parameters', found {n_params}")
    return problems


def clean_notebook(path: str | Path) -> bool:
    """Strip outputs, execution counts and widget state in place; True when the file changed."""
    path = Path(path)
    before = path.read_text(encoding="utf-8")
    nb = json.loads(before)
    nb.get("metadata", {}).pop("widgets", None)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    after = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if after != before:
        atomic_write_text(path, after)
        return True
    return False


def cell_imports(source: str) -> list[str]:
    """The import statements of one code cell, at any depth, as source lines (none for a cell
    with IPython magics, which does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))]


def notebook_imports(path: str | Path, apart: set[str] = frozenset()
                     ) -> tuple[list[str], list[str]]:
    """``(the imports of the code cells, those of the cells whose ids are in apart)``."""
    kept, set_apart = [], []
    for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] == "code":
            found = cell_imports("".join(cell["source"]))
            (set_apart if cell.get("id") in apart else kept).extend(found)
    return kept, set_apart


def loaded_modules(imports: list[str], root: str | Path | None = None) -> dict[str, str | None]:
    """Module name -> file of every module that ``imports`` load in a fresh interpreter (the
    package of the checkout at ``root`` when given, else the installed one)."""
    import subprocess

    code = "\n".join(["import json, sys", *imports, "print(json.dumps({n: getattr(m, '__file__', "
                      "None) for n, m in sys.modules.items()}))"])
    env = dict(os.environ, **({"PYTHONPATH": str(root)} if root else {}))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=root, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"importing {len(imports)} statements failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def parameter_names(path: str | Path) -> set[str]:
    """The names the notebook's ``parameters`` cell assigns."""
    names: set[str] = set()
    for cell in json.loads(Path(path).read_text(encoding="utf-8")).get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = "".join(cell["source"])
            names |= {t.id for node in ast.parse(source).body if isinstance(node, ast.Assign)
                      for t in node.targets if isinstance(t, ast.Name)}
    return names


class NotebookFailed(RuntimeError):
    """A notebook raised; the message names the notebook, the cell and the error."""


PAPERMILL_TAGS = {"injected-parameters", "papermill-error-cell-tag"}  # cells papermill adds


def failing_cell(executed: Path) -> str:
    """``cell N ('first line'): Error: message`` where an executed notebook failed (N counts the
    cells as written, not those papermill adds)."""
    try:
        nb = json.loads(executed.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return "unknown cell"
    index = -1
    for cell in nb.get("cells", []):
        if PAPERMILL_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        index += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                first = "".join(cell.get("source", "")).strip().splitlines()
                head = first[0][:80] if first else ""
                return f"cell {index} ({head!r}): {out.get('ename')}: {out.get('evalue')}"
    return "unknown cell"


#: The longest path a Unix socket may have (108 bytes on Linux, 104 on macOS), less room for the
#: suffix jupyter adds to each of a kernel's five sockets.
UNIX_SOCKET_ROOM = 96


@contextlib.contextmanager
def kernel_transport():
    """The transport settings for one papermill kernel: Unix sockets in a fresh temporary folder
    where the system has them, else TCP.

    Over local sockets no TCP port is opened, so ipykernel has no unencrypted port to warn about
    once per notebook. Each kernel gets its own folder because jupyter's default socket name is
    relative to the working folder, which two notebooks run side by side would share. Windows, and
    a temporary folder too deep for a socket path, keep TCP.
    """
    from traitlets.config import Config

    if os.name == "nt":
        yield Config({"KernelManager": {"transport": "tcp"}})
        return
    with tempfile.TemporaryDirectory(prefix="vsl-kernel-") as folder:
        sockets = str(Path(folder) / "kernel")
        if len(sockets) > UNIX_SOCKET_ROOM:
            yield Config({"KernelManager": {"transport": "tcp"}})
        else:
            yield Config({"KernelManager": {"transport": "ipc", "ip": sockets}})


def execute_notebook(src: str | Path, dst: str | Path, parameters: dict[str, Any] | None = None,
                     *, timeout: int = 600, cwd: str | Path | None = None) -> Path:
    """Run ``src`` top to bottom with papermill into ``dst``; raise ``NotebookFailed`` on error."""
    import papermill

    src, dst = Path(src), Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        with kernel_transport() as transport:
            papermill.execute_notebook(str(src), str(dst), parameters=parameters or {},
                                       kernel_name="python3", execution_timeout=timeout,
                                       cwd=str(cwd or src.parent), progress_bar=False,
                                       config=transport)
    except papermill.PapermillExecutionError as exc:
        raise NotebookFailed(f"{src.name} failed in {failing_cell(dst)}") from exc
    except Exception as exc:  # timeouts and kernel deaths come as other errors
        raise NotebookFailed(f"{src.name} failed: {type(exc).__name__}: {exc}") from exc
    return dst


# ---------------------------------------------------------------------------------------------
# Memory


def tree_rss_bytes(process: Any) -> tuple[int, int]:
    """``(rss of the process tree, rss of the descendants)`` in bytes of a ``psutil.Process``."""
    import psutil

    def rss(p: Any) -> int:
        try:
            return int(p.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return 0

    try:
        children = process.children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        children = []
    below = sum(rss(c) for c in children)
    return rss(process) + below, below


class PeakMemory:
    """Samples this process tree's resident memory in a thread while the ``with`` block runs;
    ``peak_tree`` / ``peak_children`` are the largest sums seen, in bytes.

    >>> with PeakMemory(interval=0.01) as mem:
    ...     block = bytearray(20_000_000)
    >>> mem.peak_tree >= 20_000_000
    True
    """

    def __init__(self, interval: float = 0.2, pid: int | None = None):
        self.interval = interval
        self.pid = pid or os.getpid()
        self.peak_tree = 0
        self.peak_children = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> None:
        import psutil

        tree, children = tree_rss_bytes(psutil.Process(self.pid))
        self.peak_tree = max(self.peak_tree, tree)
        self.peak_children = max(self.peak_children, children)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def __enter__(self) -> "PeakMemory":
        self.sample()
        self._thread = threading.Thread(target=self._run, name="peak-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()


def max_rss_mb(who: str = "children") -> float:
    """The OS's peak resident memory in MB of the largest finished child, or of ``"self"``."""
    import resource

    whose = resource.RUSAGE_CHILDREN if who == "children" else resource.RUSAGE_SELF
    usage = resource.getrusage(whose)
    scale = 1 if sys.platform == "darwin" else 1024  # macOS reports bytes, Linux kilobytes
    return round(usage.ru_maxrss * scale / 2**20, 1)


def mb(n_bytes: int) -> float:
    return round(n_bytes / 2**20, 1)


# ---------------------------------------------------------------------------------------------
# The reproduction


# plotly figures also carry an HTML copy with plotly.js, so the HTML copies show them offline.
KERNEL_ENVIRONMENT = {"PLOTLY_RENDERER": "plotly_mimetype+notebook"}


@contextlib.contextmanager
def kernel_environment(settings: dict[str, str] = KERNEL_ENVIRONMENT):
    """Environment variables for the kernels started inside the block (the user's values win)."""
    added = {k: v for k, v in settings.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def select_notebooks(notebooks: list[Path], only: list[str] | None) -> list[Path]:
    """The notebooks whose names start with one of ``only`` (all of them when ``only`` is empty).

    >>> select_notebooks([Path("06_sft.ipynb"), Path("08_eval.ipynb")], ["08"])[0].name
    '08_eval.ipynb'
    """
    if not only:
        return list(notebooks)
    chosen = [p for p in notebooks if any(p.name.startswith(prefix) for prefix in only)]
    unknown = [prefix for prefix in only if not any(p.name.startswith(prefix) for p in notebooks)]
    if unknown:
        raise InputError(f"no numbered notebook starts with {unknown[0]!r} "
                         f"(have: {', '.join(p.stem for p in notebooks)})")
    return chosen


def reproduce(
    run_dir: str | Path,
    *,
    profile: str = "cpu",
    world: str = "sandbox",
    seed: int = 0,
    notebooks: list[Path] | None = None,
    timeout: int = 1200,
    html: bool = True,
    extra_parameters: dict[str, Any] | None = None,
    reference_dir: str | Path | None = None,
    memory_interval: float = 0.2,
    log: Any = print,
) -> dict:
    """Run the numbered notebooks in order and return the summary. The first failure stops the
    run: the files are still written (with ``failed``) and ``NotebookFailed`` is raised."""
    from vsearcher_lite.manifest import utc_now, write_manifest
    from vsearcher_lite.reference import REFERENCE_DIR, reference_summary

    run_dir = Path(run_dir).resolve()
    out_dir = run_dir / "notebooks"
    notebooks = notebooks if notebooks is not None else list_notebooks()
    if not notebooks:
        raise InputError(f"no numbered notebooks found in {NOTEBOOK_DIR}")
    reference_dir = Path(reference_dir or REFERENCE_DIR).resolve()
    params = {"PROFILE": profile, "WORLD": world, "RUN_DIR": str(run_dir), "SEED": seed,
              "REFERENCE_DIR": str(reference_dir)}
    params.update(extra_parameters or {})
    runs: dict[str, dict] = {}
    failure: NotebookFailed | None = None
    started = time.perf_counter()
    for nb in notebooks:
        start = time.perf_counter()
        log(f"[reproduce] {nb.name} ...")
        executed = out_dir / nb.name
        with kernel_environment(), PeakMemory(memory_interval) as mem:
            # REFERENCE_DIR only where a notebook reads it (papermill warns of unknown ones)
            names = parameter_names(nb)
            own = {k: v for k, v in params.items() if k != "REFERENCE_DIR" or k in names}
            try:
                execute_notebook(nb, executed, own, timeout=timeout)
            except NotebookFailed as exc:
                failure = exc
        seconds = round(time.perf_counter() - start, 2)
        runs[nb.stem] = {"status": "failed" if failure else "ok", "seconds": seconds,
                         "peak_tree_rss_mb": mb(mem.peak_tree),
                         "peak_kernel_rss_mb": mb(mem.peak_children)}
        log(f"[reproduce] {nb.name} {'FAILED' if failure else 'done'} in {seconds:.1f} s, "
            f"peak memory {mb(mem.peak_tree):.0f} MB")
        if html and executed.exists():
            _write_html(executed)
        if failure:
            break
        write_manifest(run_dir, f"notebooks/{nb.stem}", params, seconds, extra=runs[nb.stem])
    summary = collect_summary(run_dir)
    summary["notebooks"] = runs
    summary["notebook_seconds"] = {k: v["seconds"] for k, v in runs.items()}
    summary["total_seconds"] = round(time.perf_counter() - started, 2)
    summary["peak_memory"] = {
        "peak_tree_rss_mb": max((v["peak_tree_rss_mb"] for v in runs.values()), default=None),
        "max_process_rss_mb": max_rss_mb("children"),
        "driver_rss_mb": max_rss_mb("self"),
        "sampling_interval_s": memory_interval,
    }
    summary["settings"] = {"profile": profile, "world": world, "seed": seed, "parameters": params}
    failed = {"notebook": notebooks[len(runs) - 1].name, "message": str(failure)}
    summary["failed"] = failed if failure else None
    summary["finished_at"] = utc_now()
    summary["reference"] = reference_summary(reference_dir)
    atomic_write_json(run_dir / "summary.json", summary)
    page = report_html(summary, run_dir, html_links=html, reference_dir=reference_dir)
    atomic_write_text(run_dir / "report.html", page)
    if failure is None:
        write_manifest(run_dir, "reproduce", summary["settings"], summary["total_seconds"],
                       extra={"notebooks": runs, "peak_memory": summary["peak_memory"]})
        return summary
    raise failure


HEADLINE_POLICIES = ("base", "sft", "rl")


def headline_numbers(stages: dict) -> dict:
    """Exam and held-out accuracy of base, SFT and RL (``None`` where not measured), plus any
    other policy notebook 08 evaluated, and which policies are missing.

    >>> headline_numbers({"comparison": {"exam_accuracy": {"base": 0.0, "sft": 0.1, "teacher": 0.3},
    ...                                  "missing": {"rl": "not trained yet"}}})["exam_accuracy"]
    {'base': 0.0, 'sft': 0.1, 'rl': None, 'teacher': 0.3}
    """
    comparison = stages.get("comparison") or {}
    out: dict[str, Any] = {}
    for key in ("exam_accuracy", "heldout_accuracy"):
        found = comparison.get(key) or {}
        out[key] = {**{p: found.get(p) for p in HEADLINE_POLICIES}, **found}
    not_run = {p: "notebook 08 has not run" for p in HEADLINE_POLICIES}
    out["missing_policies"] = comparison.get("missing", {}) if comparison else not_run
    return out


def collect_summary(run_dir: str | Path) -> dict:
    """Every stage's ``metrics.json`` (keyed by stage folder) and the ``headline_numbers``."""
    run_dir = Path(run_dir)
    stages = {}
    for metrics in sorted(run_dir.glob("*/metrics.json")):
        try:
            stages[metrics.parent.name] = json.loads(metrics.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            stages[metrics.parent.name] = {"error": "metrics.json is not valid JSON"}
    return {**headline_numbers(stages), "stages": stages}


def _write_html(executed: Path) -> None:
    body, _ = offline_html_exporter().from_filename(str(executed))
    atomic_write_text(executed.with_suffix(".html"), body)


def parse_parameter(text: str) -> tuple[str, Any]:
    """``NAME=VALUE`` from the command line; the value is a Python literal when it reads as one.

    >>> [parse_parameter(p) for p in ("MAX_STEPS=None", "EVAL_TASKS=40", "TEACHER=heuristic")]
    [('MAX_STEPS', None), ('EVAL_TASKS', 40), ('TEACHER', 'heuristic')]
    """
    name, sep, raw = text.partition("=")
    if not sep or not name.strip().isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE (a notebook parameter), "
                                         f"got {text!r}")
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return name.strip(), value


def register(subparsers, common) -> None:
    p = subparsers.add_parser(
        "reproduce", parents=[common],
        help="run every notebook in order with papermill (the one-command reproduction)",
        description="Run the numbered notebooks (00..08) in order into RUN_DIR/notebooks/ with an "
                    "HTML copy of each, then write RUN_DIR/summary.json (every stage's metrics, "
                    "exam accuracy of base, SFT and RL, wall time and peak memory per notebook) "
                    "and RUN_DIR/report.html. Stops at the first failing notebook and names it and "
                    "the cell.")
    p.add_argument("--timeout", type=int, default=1200,
                   help="per-cell execution timeout in seconds")
    p.add_argument("--no-html", action="store_true", help="skip the HTML copies of the notebooks")
    p.add_argument("--only", nargs="+", metavar="PREFIX", default=None,
                   help="run only the notebooks whose names start with these prefixes "
                        "(e.g. --only 07 08)")
    p.add_argument("--param", "-p", action="append", type=parse_parameter, default=[],
                   metavar="NAME=VALUE", help="set a notebook parameter in every notebook "
                                              "(e.g. -p MAX_STEPS=None -p EVAL_TASKS=40)")
    p.add_argument("--notebook-dir", default=None,
                   help="folder of the numbered notebooks (default: the repository's)")
    p.add_argument("--reference-dir", default=None,
                   help="the full-length reference run notebooks 06-08 and the report study "
                        "(default: data/reference)")
    p.set_defaults(func=_cmd_reproduce)


def _cmd_reproduce(args) -> int:
    if args.timeout < 1:
        raise InputError(f"--timeout must be at least 1 second, got {args.timeout}")
    folder = Path(args.notebook_dir) if args.notebook_dir else NOTEBOOK_DIR
    notebooks = select_notebooks(list_notebooks(folder), args.only)
    if not notebooks:
        raise InputError(f"no numbered notebooks (NN_name.ipynb) in {folder}")

    def log(line: str) -> None:
        print(line, flush=True)

    summary_path = Path(args.run_dir) / "summary.json"
    written = f"{summary_path} and {summary_path.with_name('report.html')}"
    try:
        summary = reproduce(args.run_dir, profile=args.profile, world=args.world, seed=args.seed,
                            notebooks=notebooks, timeout=args.timeout, html=not args.no_html,
                            extra_parameters=dict(args.param), reference_dir=args.reference_dir,
                            log=log)
    except NotebookFailed as exc:
        print(f"vsearcher-lite reproduce: {exc}", file=sys.stderr)
        print(f"[reproduce] what ran is in {written}", file=sys.stderr)
        return 1
    memory = summary["peak_memory"]
    log(f"[reproduce] {len(summary['notebooks'])} notebooks in {summary['total_seconds']:.0f} s; "
        f"peak memory {memory['peak_tree_rss_mb']} MB (whole process tree), largest kernel "
        f"{memory['max_process_rss_mb']} MB")
    log(f"[reproduce] exam Pass@1: {summary['exam_accuracy']}")
    log(f"[reproduce] wrote {written}")
    return 0


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check or clean notebooks.")
    parser.add_argument("--clean", action="store_true", help="strip outputs in place")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args(argv)
    status = 0
    for f in args.files:
        if args.clean and clean_notebook(f):
            print(f"cleaned {f}")
        problems = notebook_problems(f)
        if problems:
            status = 1
            print(f"{f}: " + "; ".join(problems))
    return status


if __name__ == "__main__":
    raise SystemExit(_main())
