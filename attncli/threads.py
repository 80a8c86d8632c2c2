"""How many threads the output-only path runs, and BLAS set up for them before numpy loads.

Light (os and sys only): `attn compute` calls `before_numpy` at start-up, before the core loads
numpy. The thread pool itself, and BLAS's thread count once numpy is loaded, are in attncli/pool.py.

- `threads` workers each run whole blocks of queries, and every BLAS call inside a worker runs
  on that worker's thread: N workers × 1 BLAS thread, never N × N (threads that each start a
  multi-threaded BLAS call oversubscribe the cores).
- OpenBLAS picks its kernels by CPU model. Some CPUs with AVX-512 it does not know (an AMD EPYC of
  family 26 under KVM gets its AVX2 "Haswell" kernels); there `before_numpy` asks for its AVX-512
  ("SkylakeX") kernels, which run the blocks' matrix products 1.3-1.5× faster. A user's
  OPENBLAS_CORETYPE is kept.
"""

import os
import sys

BLAS_THREADS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
AVX512 = {"avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"}  # what OpenBLAS's SkylakeX kernels use


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
    """Before numpy is imported: one BLAS thread per caller (unless the user chose a count; the
    pool holds BLAS to one thread while it runs anyway), and OpenBLAS's AVX-512 kernels on an AMD
    CPU with AVX-512. Does nothing once numpy is loaded (BLAS reads these when it loads)."""
    if "numpy" in sys.modules:
        return
    for variable in BLAS_THREADS:
        os.environ.setdefault(variable, "1")
    if "OPENBLAS_CORETYPE" not in os.environ and _amd_with_avx512():
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"


def _amd_with_avx512(cpuinfo: str = "/proc/cpuinfo") -> bool:
    """Whether the first CPU in `cpuinfo` is AMD's and has the AVX-512 OpenBLAS's SkylakeX
    kernels use (Linux; elsewhere False). Intel CPUs are left to OpenBLAS, which knows them."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as file:
            first = file.read(1 << 16).split("\n\n", 1)[0]  # the first processor's block
    except OSError:
        return False
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {key.strip(): value.strip() for key, value in fields.items()}
    return fields.get("vendor_id") == "AuthenticAMD" and AVX512 <= set(fields.get("flags", "").split())
