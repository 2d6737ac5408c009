"""Process settings: which device a stage runs on, torch's thread count and how the C heap gives
memory back.

Devices. Every stage that runs a torch model (``sft``, ``grpo``, ``eval``, ``pretrain``) takes a
``device`` setting, ``auto`` (the default: the GPU when torch sees one), ``cpu`` or ``cuda``,
independent of the profile: the cpu profile's recipe trains and evaluates on a GPU when there is
one, and ``--device cpu`` keeps it on the CPU. ``resolve_device`` turns the name into a
``torch.device``.

Why the heap matters here. PyTorch's CPU tensors come from glibc ``malloc``. glibc serves a
request above ``M_MMAP_THRESHOLD`` with its own ``mmap`` and returns it to the system on
``free``; below it, from a heap that keeps freed pages for reuse. The threshold starts at
128 KB but is *dynamic*: each time a mapped block is freed it rises to that block's size (up to
32 MB). A stage that allocates and frees tens-of-MB activations many times over (batched
generation, GRPO updates, evaluation) soon has every such buffer served from the heap, where
fragmentation keeps the pages; and each worker thread that allocates gets a heap (arena) of its
own, up to 8 per core. Setting the threshold explicitly turns the dynamic rise off, and capping
the arenas keeps the tool threads of a rollout from holding heaps of their own.

``benchmarks/heap_growth.py`` measures the effect on cpu GRPO steps (less than half the peak
resident memory for about 10 % more wall time; numbers in ``docs/results.md``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from vsearcher_lite.runio import InputError

#: glibc's ``mallopt`` parameter numbers (``malloc.h``).
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
#: Blocks of 1 MB and up are mapped and unmapped one by one.
MMAP_THRESHOLD = 1 << 20
ARENA_MAX = 2

_applied: bool | None = None

#: The names ``--device`` accepts; ``resolve_device`` also takes ``cuda:N``.
DEVICES = ("auto", "cpu", "cuda")


def check_device_name(name: str) -> str:
    """``name`` when it names a device (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else ``ValueError``.

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
    """The ``torch.device`` a stage runs on: ``auto`` (or ``None``) is ``cuda`` when torch sees a GPU,
    else ``cpu``. An unknown name, or ``cuda`` without a GPU, is an ``InputError`` (one line).
    """
    import torch

    name = "auto" if name is None else str(name).strip().lower()
    try:
        check_device_name(name)
    except ValueError as exc:
        raise InputError(f"{exc} (--device)") from None
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {name}: torch {torch.__version__} sees no CUDA GPU here; use --device cpu or auto")
    return torch.device(name)


def add_device_option(group) -> None:
    """The ``--device`` option of the commands that run a torch model."""
    group.add_argument("--device", choices=DEVICES, default=None,
                       help="where the model runs: auto (default: the GPU when there is one), cpu or cuda")


def limit_heap_growth(mmap_threshold: int = MMAP_THRESHOLD, arenas: int = ARENA_MAX) -> bool:
    """Fix glibc's mmap threshold and cap its arenas (see the module docstring); True when applied.

    A no-op returning False where the C library is not glibc (macOS, musl) and when the user set
    ``MALLOC_MMAP_THRESHOLD_`` or ``MALLOC_ARENA_MAX`` in the environment (their choice wins).
    Calling it again does nothing more.
    """
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
        # gnu_get_libc_version exists only in glibc: other C libraries have different mallopt numbers
        libc.gnu_get_libc_version
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    _applied = bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(mallopt(M_ARENA_MAX, int(arenas)))
    return _applied


def set_threads(threads: int | None, *, limit_heap: bool = True) -> int:
    """Use ``threads`` torch threads (None: torch's default) and limit heap growth; returns the count.

    Every stage that runs a torch model on the CPU calls this first. Pretraining passes
    ``limit_heap=False``: its batches have one fixed shape, so the heap does not grow, and mapping
    its large activations afresh each step made it about 1.5x slower (docs/results.md).
    """
    import torch

    if threads is not None and int(threads) < 1:
        raise ValueError(f"threads must be at least 1 (or unset), got {threads}")
    if limit_heap:
        limit_heap_growth()
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()
