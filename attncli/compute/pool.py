"""The output-only path's thread pool: tasks on `threads` workers, each with scratch buffers of
its own made once, and BLAS held to one thread while they run (numpy releases the GIL in matrix
products and ufuncs, so the workers' arithmetic runs on every core).

BLAS's thread count is read when numpy loads (attncli/compute/threads.py sets it first in `attn compute`);
once numpy is loaded, `one_blas_thread` sets it through OpenBLAS's own call and puts it back
after. Without OpenBLAS (MKL, Accelerate) the count the environment gave BLAS stays.
"""

from __future__ import annotations

import ctypes
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterable, Iterator

# OpenBLAS's thread count calls, by the names its builds export (numpy's wheels: scipy_openblas64_).
SETTERS = (("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
           ("scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
           ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
           ("openblas_set_num_threads", "openblas_get_num_threads"))


@lru_cache(maxsize=1)
def _openblas() -> tuple[tuple, ...]:
    """(set, get) for each OpenBLAS this process has loaded (numpy's, and scipy's when it is
    loaded too): found among the libraries in /proc/self/maps (Linux); () elsewhere."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:
        return ()
    found = []
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        found += [(getattr(library, set_name), getattr(library, get_name)) for set_name, get_name in SETTERS
                  if hasattr(library, set_name) and hasattr(library, get_name)][:1]
    return tuple(found)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """OpenBLAS on one thread per call while the blocks run, then as it was."""
    found = _openblas()
    before = [get_threads() for _, get_threads in found]
    for set_threads, _ in found:
        set_threads(1)
    try:
        yield
    finally:
        for (set_threads, _), count in zip(found, before):
            set_threads(count)


def run(task: Callable, items: Iterable, threads: int, scratch: Callable[[], dict]) -> Iterator:
    """task(item, buffers) for each item, in order of the items, on `threads` workers; `buffers`
    is the worker's own dict from `scratch()`, made once per worker. One thread: the caller's own,
    no pool. Either way BLAS runs one thread per call. Results are yielded in order as they come."""
    with one_blas_thread():
        if threads == 1:
            buffers = scratch()
            for item in items:
                yield task(item, buffers)
            return
        mine = threading.local()

        def in_worker(item):
            if not hasattr(mine, "buffers"):
                mine.buffers = scratch()
            return task(item, mine.buffers)

        with ThreadPoolExecutor(threads) as pool:
            yield from pool.map(in_worker, items)
