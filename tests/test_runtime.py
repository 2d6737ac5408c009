"""runtime.limit_heap_growth and set_threads, and the package's keep_openmp_spin, each in a
fresh interpreter (mallopt and OpenMP's settings are process-wide)."""

import json
import os
import platform
import subprocess
import sys

import pytest

glibc_only = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="mallopt settings are glibc's"
)

# Frees one 4 MB block (by glibc's default that lifts the mmap threshold above 4 MB), allocates 40
# blocks of 4 MB from C, each followed by a 256 KB block that pins the heap above it, then frees the
# big blocks: served from the heap they stay resident (holes below the top cannot be trimmed),
# mapped one by one they go back to the system. Prints the resident growth, at the peak and what
# remains, in MB.
PROBE = r"""
import ctypes, json, sys
from vsearcher_lite.runtime import limit_heap_growth

def rss_mb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024

applied = [limit_heap_growth(), limit_heap_growth()]
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
# glibc's default: freeing a mapped block raises the threshold above it
libc.free(libc.malloc(4 << 20))
before = rss_mb()
big, pins = [], []
for _ in range(40):
    p = libc.malloc(4 << 20)
    ctypes.memset(p, 1, 4 << 20)
    big.append(p)
    # too big for any free small chunk: it lands right after the block
    pins.append(libc.malloc(256 << 10))
peak = rss_mb()
for p in big:
    libc.free(p)
print(json.dumps({"applied": applied, "grown_mb": peak - before, "kept_mb": rss_mb() - before}))
"""


def run_python(code: str, **env_extra: str) -> dict:
    # this process imported the package, which set OpenMP's variables: a child starts without them
    # and without the thread settings the test suite gives its workers
    dropped = ("MALLOC_", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
               "VSEARCHER_THREADS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(dropped)}
    env.update(env_extra)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@glibc_only
def test_limited_heap_returns_freed_big_blocks_and_default_keeps_them():
    limited = run_python(PROBE)
    assert limited["applied"] == [True, True]
    assert limited["grown_mb"] > 150
    assert limited["kept_mb"] < 20
    # glibc's own default arena count makes limit_heap_growth step aside: the dynamic threshold
    # then moves the 4 MB blocks onto the heap after the first free, and they stay resident
    default = run_python(PROBE, MALLOC_ARENA_MAX=str(8 * (os.cpu_count() or 1)))
    assert default["applied"] == [False, False]
    assert default["kept_mb"] > 100


@glibc_only
@pytest.mark.parametrize("var", ["MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_"])
def test_user_malloc_settings_win(var):
    code = (
        "import json; from vsearcher_lite.runtime import limit_heap_growth; "
        "print(json.dumps({'applied': limit_heap_growth()}))"
    )
    assert run_python(code, **{var: "4" if var == "MALLOC_ARENA_MAX" else "65536"}) == {
        "applied": False
    }


def test_set_threads_sets_torch_threads_and_none_keeps_the_default():
    code = (
        "import json, torch; from vsearcher_lite import runtime; d = torch.get_num_threads(); "
        "kept = runtime.set_threads(None, limit_heap=False); untouched = runtime._applied; "
        "one = runtime.set_threads(1); "
        "print(json.dumps({'default': d, 'kept': kept, 'one': one, 'now': torch.get_num_threads(), "
        "'untouched': untouched, 'applied': runtime._applied}))"
    )
    got = run_python(code)
    assert got["kept"] == got["default"]
    assert got["one"] == 1 and got["now"] == 1
    assert got["untouched"] is None  # limit_heap=False (pretraining) leaves malloc alone
    if platform.libc_ver()[0] == "glibc":
        assert got["applied"] is True


def test_the_threads_variable_replaces_every_stages_setting(monkeypatch):
    from vsearcher_lite.runtime import set_threads

    code = (
        "import json, torch; from vsearcher_lite import runtime; "
        "got = [runtime.set_threads(t, limit_heap=False) for t in (2, None)]; "
        "print(json.dumps({'got': got, 'now': torch.get_num_threads()}))"
    )
    assert run_python(code, VSEARCHER_THREADS="1") == {"got": [1, 1], "now": 1}
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("VSEARCHER_THREADS", bad)
        with pytest.raises(ValueError, match=r"\$VSEARCHER_THREADS must be a whole number"):
            set_threads(2, limit_heap=False)


SPIN_PROBE = (
    "import json, os, sys; {first}; "
    "print(json.dumps({{k: os.environ.get(k) for k in ('OMP_WAIT_POLICY', 'GOMP_SPINCOUNT')}}))"
)


def test_importing_the_package_before_torch_keeps_openmp_spinning():
    assert run_python(SPIN_PROBE.format(first="import vsearcher_lite")) == {
        "OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}
    # too late once torch (and with it OpenMP) is loaded, and a user's own setting wins
    after = run_python(SPIN_PROBE.format(first="import torch, vsearcher_lite"))
    assert after == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None}
    mine = run_python(SPIN_PROBE.format(first="import vsearcher_lite"), GOMP_SPINCOUNT="1000")
    assert mine == {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": "1000"}
