"""Process settings: the device a stage runs on, torch's thread count, how the C heap gives
memory back, how long a training loop may run, and how its progress bar ends.

glibc's mmap threshold rises each time a large block is freed, so a stage that keeps allocating
tens-of-MB CPU tensors (generation, GRPO, evaluation) ends up serving them from a fragmenting
heap, one arena per thread. Fixing the threshold and capping the arenas keeps peak memory down
(measured in ``docs/log.md``).

OpenMP's spin-wait is set once per process, before torch loads: the package's ``__init__``
(``keep_openmp_spin``) says why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from vsearcher_lite.runio import InputError

M_MMAP_THRESHOLD, M_ARENA_MAX = -3, -8  # glibc's mallopt parameter numbers (malloc.h)
MMAP_THRESHOLD = 1 << 20  # blocks of 1 MB and up are mapped and unmapped one by one
ARENA_MAX = 2
_applied: bool | None = None
THREADS_VAR = "VSEARCHER_THREADS"  # replaces the ``threads`` setting of a stage (set_threads)
DEVICES = ("auto", "cpu", "cuda")  # what --device accepts; resolve_device also takes cuda:N


def check_device_name(name: str) -> str:
    """``name`` if it names a device (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else ValueError.

    >>> check_device_name("cuda:1")
    'cuda:1'
    >>> check_device_name("gpu")
    Traceback (most recent call last):
    ...
    ValueError: device must be auto, cpu or cuda, got 'gpu'
    """
    kind, sep, index = str(name).partition(":")
    if kind not in DEVICES or (sep and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"device must be auto, cpu or cuda, got {name!r}")
    return str(name)


def resolve_device(name: str | None = "auto"):
    """The ``torch.device`` to run on (``auto``: the GPU when torch sees one), or ``InputError``."""
    import torch

    name = "auto" if name is None else str(name).strip().lower()
    try:
        check_device_name(name)
    except ValueError as exc:
        raise InputError(f"{exc} (--device)") from None
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {name}: torch {torch.__version__} sees no CUDA GPU here; "
                         "use --device cpu or auto")
    return torch.device(name)


def add_device_option(group) -> None:
    """The ``--device`` option of the commands that run a torch model."""
    text = "where the model runs: auto (default: the GPU when there is one), cpu or cuda"
    group.add_argument("--device", choices=DEVICES, default=None, help=text)


def limit_heap_growth(mmap_threshold: int = MMAP_THRESHOLD, arenas: int = ARENA_MAX) -> bool:
    """Fix glibc's mmap threshold and cap its arenas, once; True when applied. False where the C
    library is not glibc and when ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` is set."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return False
    try:
        libc = ctypes.CDLL(libc_name)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # glibc only: other C libraries number mallopt differently
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) \
        and bool(mallopt(M_ARENA_MAX, int(arenas)))
    return _applied


def set_threads(threads: int | None, *, limit_heap: bool = True) -> int:
    """Use ``threads`` torch threads (None: torch's default) and limit heap growth; returns the
    count. Pretraining passes ``limit_heap=False``: its fixed-shape batches do not grow the heap,
    and mapping its activations afresh each step slows it down (``docs/results.md``).

    ``$VSEARCHER_THREADS``, when set, replaces ``threads`` wherever a stage sets it: two torch
    processes on one machine (two test workers, a notebook beside a training run) each take their
    share of the cores instead of each spinning on all of them.
    """
    import torch

    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be at least 1 (or unset), got {threads}")
    override = os.environ.get(THREADS_VAR, "").strip()
    if override:
        if not override.isdigit() or int(override) < 1:
            raise ValueError(f"${THREADS_VAR} must be a whole number of at least 1, "
                             f"got {override!r}")
        threads = int(override)
    if limit_heap:
        limit_heap_growth()
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def training_budget_s(minutes: float | None, total_minutes: float | None, elapsed_s: float,
                      still_to_come_s: float, margin_s: float,
                      floor_s: float = 0.0) -> float | None:
    """Seconds a training loop may run: the ``minutes`` cap, and what ``total_minutes`` leaves
    after the time spent, the time estimated for what follows (an evaluation) and a margin;
    never below ``floor_s``; ``None`` when neither cap is set.

    >>> training_budget_s(2.5, 3.0, 20.0, 25.0, 5.0), training_budget_s(1.0, 3.0, 20.0, 25.0, 5.0)
    (130.0, 60.0)
    >>> training_budget_s(2.5, 6.0, 200.0, 120.0, 15.0), training_budget_s(None, 1, 70, 0, 5, 10.0)
    (25.0, 10.0)
    """
    budgets = []
    if minutes:
        budgets.append(minutes * 60)
    if total_minutes:
        budgets.append(total_minutes * 60 - elapsed_s - still_to_come_s - margin_s)
    return max(min(budgets), floor_s) if budgets else None


def progress_bar(desc: str, total: int | None = None, *, items=None, initial: int = 0,
                 enabled: bool = True):
    """The progress bar of one loop: a widget in a notebook, a line in a terminal, over ``items``
    when given. Close it with ``end_progress`` where the loop may stop before ``total``.

    In a notebook the bar stays once closed: the saved output then ends on what the loop did. In a
    terminal it clears itself, so that a command's own lines (an error above all) stand alone.
    """
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm as notebook_tqdm

    return tqdm(items, total=total, initial=initial, desc=desc, disable=not enabled,
                leave=issubclass(tqdm, notebook_tqdm))


def end_progress(bar, why: str | None = None) -> None:
    """Close ``bar`` on a last line that says how its loop ended.

    A loop that stopped short of its planned total (a time budget, a pool that ran out) would
    leave a bar frozen part-way, as a crashed run does. Its total becomes what was done instead,
    with ``why`` and the plan in its postfix: ``grpo: 100%|##| 2/2 [04:40<00:00, stopped by the
    time budget after 2 of 200]``.
    """
    if bar.disable:  # disabled, or closed already
        return
    planned = bar.total
    if planned and bar.n < planned:
        bar.total = bar.n
        note = f"{why or 'stopped'} after {bar.n} of {planned}"
        bar.set_postfix_str(", ".join(p for p in (bar.postfix, note) if p), refresh=False)
        widget = getattr(bar, "container", None)  # a notebook's bar keeps its own maximum
        if widget is not None:
            widget.children[1].max = bar.n
    bar.leave = True
    bar.close()
