"""A teacher's points, read once for `attn check --points` and `attncli.check(points=…)`: without
numpy (the command reads them before anything loads).

`weights=2` gives a stage (every head's) 2 points shared by its cells, `heads[1].weights=2` one
head's; a stage not named keeps one point per cell. What a slip costs (names.COSTS, priced by
attncli/marking/scoring.py): `imprecise=N` points once per stage (0 or more), `percent=F` and
`transposed=F` a fraction of the stage (0 to 1).
"""

import math
import re

from attncli.base.errors import InputError, comma_items, did_you_mean, quote
from attncli.base.names import ASKABLE, COSTS

MOST = 1e6  # the most points a stage may be worth: a sum of them stays a finite number
STAGE_PATH = re.compile(r"^(?:heads\[\d+\]\.)?(\w+)$")


def read_points(given) -> dict[str, float] | None:
    """`"weights=2,imprecise=0.5"` or {"weights": 2, "imprecise": 0.5}, checked; None for None."""
    if given is None:
        return None
    if isinstance(given, str):
        parts = comma_items(given, "STAGE=N, comma-separated (e.g. weights=2)", field="points")  # '': no points
        items = []
        for item in parts:
            stage, equals, number = (x.strip() for x in item.partition("="))
            if not equals:
                raise InputError(f"{quote(item)} is not STAGE=N (e.g. weights=2)", field="points")
            items.append((stage, number, item))
    elif isinstance(given, dict):
        items = [(stage, number, f"{stage}={number}") for stage, number in given.items()]
    else:
        raise InputError(f"points is {type(given).__name__}; expected \"STAGE=N,…\" or a dict of stage → points",
                         field="points")
    points: dict[str, float] = {}
    for stage, number, item in items:
        named = STAGE_PATH.match(stage) if isinstance(stage, str) else None
        if not named:
            raise InputError(f"{quote(item)} is not STAGE=N (e.g. weights=2)", field="points")
        known = ASKABLE + COSTS
        if named.group(1) not in known or (stage in COSTS) != (named.group(1) in COSTS):
            hint = did_you_mean(named.group(1), known) or f"; answers are {', '.join(ASKABLE)}"
            raise InputError(f"unknown stage {quote(stage)}{hint}", field="points")
        value = _number(number)
        if stage in COSTS:
            top = MOST if stage == "imprecise" else 1.0
            if not 0 <= value <= top:  # also refuses nan and inf
                what = "points" if stage == "imprecise" else "a fraction of the stage"
                raise InputError(f"{quote(item)}: {stage} costs {what}, a number from 0 to {top:,.0f}", field="points")
        elif not 0 < value <= MOST:  # also refuses nan and inf
            raise InputError(f"{quote(item)}: the points must be a number above 0, at most {MOST:,.0f}", field="points")
        if stage in points:
            raise InputError(f"{quote(stage)} is given twice ({stage}={points[stage]:g} and {item}); keep one",
                             field="points")
        points[stage] = value
    return points or None


def read_max_score(value) -> float | None:
    """--max-score (`max_score=`), checked: a number above 0, at most MOST (0 would score every file 0)."""
    if value is not None and not 0 < _number(value) <= MOST:  # also refuses nan and inf
        raise InputError(f"max_score is {value!r}; expected a number above 0, at most {MOST:,.0f}", field="max_score")
    return None if value is None else _number(value)


def _number(x) -> float:
    if isinstance(x, bool):
        return math.nan
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan
