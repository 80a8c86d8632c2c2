"""Refuse, before allocating, a problem whose stages cannot fit in memory."""

from __future__ import annotations

import os

from attncli.errors import AttnError


class ResourceError(AttnError):
    """The problem is valid but too big for this machine."""


def available_bytes() -> int | None:
    """Memory the process can still get: MemAvailable on Linux, else physical pages; None if unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


def check_fits(heads: int, lq: int, lk: int, itemsize: int, stages: int, available: int | None = None) -> None:
    """Raise ResourceError when `stages` arrays of (heads × Lq × Lk) would not fit."""
    available = available_bytes() if available is None else available
    need = stages * heads * lq * lk * itemsize
    if available is not None and need > available:
        halved = itemsize == 8 and need // 2 <= available
        raise ResourceError(
            f"the {stages} score-sized stages ({heads} × {lq} × {lk}) would need {_size(need)}, and "
            f"{_size(available)} is available; use --stages output (computed in blocks of about 16 MiB)"
            + (" or --dtype float32" if halved else ""))
