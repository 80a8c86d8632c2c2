"""A progress bar on stderr for long computations, only when stderr is a terminal."""

from __future__ import annotations

import contextlib
import sys

LONG = 200_000_000  # heads × Lq × Lk above which a computation takes about a second or more


@contextlib.contextmanager
def progress(total_rows: int, work: int, label: str = "attending"):
    """Yields a callback `done(rows)`, or None when no bar is wanted."""
    if work < LONG or not sys.stderr.isatty():
        yield None
        return
    # Imported here, for start-up: rich loads only when a bar is drawn (a second or more of work).
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total_rows)
        yield lambda rows: bar.update(task, completed=rows)
