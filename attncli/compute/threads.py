"""How many threads the output-only path runs, and BLAS set up for them before numpy loads.

Light (os and sys only): `attn compute` calls `before_numpy` at start-up, before the core loads
numpy. The thread pool itself, and BLAS's thread count once numpy is loaded, are in attncli/compute/pool.py.

`threads` workers each run whole blocks of queries, and every BLAS call inside a worker runs on
that worker's thread: N workers × 1 BLAS thread, never N × N (threads that each start a
multi-threaded BLAS call oversubscribe the cores).
"""

import os
import sys

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def workers(threads: int | None) -> int:
    """The worker threads for `threads` (None: every core)."""
    return cores() if threads is None else max(1, threads)


def before_numpy() -> None:
    """Before numpy is imported: one BLAS thread per caller, unless the user chose a count (the
    pool holds OpenBLAS to one thread while it runs anyway). Does nothing once numpy is loaded:
    BLAS reads these when it loads."""
    if "numpy" in sys.modules:
        return
    for variable in BLAS_THREADS:
        os.environ.setdefault(variable, "1")
