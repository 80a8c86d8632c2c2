"""BLAS threading for the blocked path. Imports nothing heavy: it must run before numpy loads."""

import os
import sys


def one_blas_thread() -> int:
    """Before numpy is imported: ask BLAS for one thread, so that blocks can run one per core
    (threads that each start a multi-threaded BLAS call oversubscribe the cores). Returns the
    number of worker threads to use: the core count, or 1 when numpy is already loaded or the
    user chose a BLAS thread count."""
    variables = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
    if "numpy" in sys.modules or any(v in os.environ for v in variables):
        return 1
    for variable in variables:
        os.environ[variable] = "1"
    return os.cpu_count() or 1
