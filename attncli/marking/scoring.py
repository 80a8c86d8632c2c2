"""What a marked stage is worth: its points (`--points`, else one per cell) and what its slips
cost, so that one slip costs once. The gradebook, Gradescope, the class summary, the marks page
and the Python API all score with these functions.

- A stage earns its points times its share of cells right (correct or carried).
- **Precision** (`imprecise=N`, default 1 point): a stage with cells written with too few
  decimals, or diagnosed `rounded_early` alone, earns those cells, less N points once for the
  stage (never below 0): the slip is the same whether it shows on one cell or on nine.
- **Percentages and a transposed stage** (`percent=F`, `transposed=F`, default 0.5): a stage whose
  every cell not right is explained by writing it as percentages, or transposed, loses that
  fraction of its points (a teacher gives half the stage), whatever cells happen to match.
"""

from __future__ import annotations

from dataclasses import dataclass

from attncli.base.names import COSTS
from attncli.marking.grading import StageMark
from attncli.marking.mistakes import ROUNDED_EARLY

Points = dict[str, float]  # --points: stage (`weights`, or a path `heads[1].weights`) → its points; COSTS → theirs
DEFAULT_COSTS = {"imprecise": 1.0, "percent": 0.5, "transposed": 0.5}
FRACTIONS = ("percent", "transposed")  # costs that are a fraction of the stage; `imprecise` is in points
assert set(DEFAULT_COSTS) == set(COSTS)


class FilePoints(dict):
    """`attn check --code`'s points for a class, by file: each function's own (a case's point is shared
    by the stages that function returned, so what a classmate returned changes no one's score)."""


def points_for(points, file: str | None) -> Points | None:
    """The points that score `file`: its own in a `FilePoints`, else the class's (--points)."""
    if isinstance(points, FilePoints):
        return points.get(file) if file in points else merged(points)
    return points


def merged(points) -> Points | None:
    """Every file's points in one mapping (a stage not marked in any file is worth what any file gives it)."""
    if isinstance(points, FilePoints):
        return {key: value for each in points.values() for key, value in each.items()} or None
    return points


def cost(name: str, points: Points | None) -> float:
    return (points or {}).get(name, DEFAULT_COSTS[name])


def stage_points(name: str, cells: int, points: Points | None) -> float:
    """A stage's worth: its cells, or its points from --points (by path, else by stage name; each
    tile table by `tiles`)."""
    if not points:
        return cells
    head, dot, stage = name.partition("[q ")[0].rpartition(".")
    return points.get(name, points.get(head + dot + stage, points.get(stage, cells)))


def earned(mark: StageMark, worth: float, points: Points | None = None) -> float:
    """What a marked stage worth `worth` earns (the module's docstring)."""
    n = int(mark.cells.size)
    if not n:
        return 0.0
    if mark.cause in FRACTIONS:
        return worth * (1 - min(1.0, cost(mark.cause, points)))
    imprecise = mark.count("imprecise") + (mark.count("wrong") if mark.cause == ROUNDED_EARLY else 0)
    got = worth * (mark.right + imprecise) / n
    return max(0.0, got - cost("imprecise", points)) if imprecise else got


def slip_cost(mark: StageMark, points: Points | None = None) -> str | None:
    """What the stage's slip cost, in words, when a cost applied (for notes and Gradescope)."""
    if mark.cause in FRACTIONS:
        return f"{mark.cause} costs {cost(mark.cause, points):g} of the stage"
    if mark.count("imprecise") or mark.cause == ROUNDED_EARLY:
        return f"too few decimals cost {cost('imprecise', points):g} point once for the stage"
    return None


@dataclass(frozen=True)
class Score:
    right: float  # points earned: cells right, unless --points weighs the stages or a slip has its cost
    max: float

    @property
    def percent(self) -> float:
        """Rounded to one decimal; 0 when nothing was marked."""
        return round(100 * self.right / self.max, 1) if self.max else 0.0


def is_required(name: str, required: tuple[str, ...]) -> bool:
    """Whether a stage path (`heads[1].weights`, `output`) is one of the required stages (named
    alone, for every head, or by its path); nothing required: every stage counts."""
    if not required:
        return True
    path = name.partition("[q ")[0]  # a tile table is `tiles`
    return path in required or path.rpartition(".")[2] in required and not _head_output(path, required)


def _head_output(path: str, required: tuple[str, ...]) -> bool:
    """`output` required names the final output alone; a head's output is required by its path."""
    return path.startswith("heads[") and path.endswith(".output")


def score(marks: dict[str, StageMark] | None, class_max: float, points: Points | None = None,
          required: tuple[str, ...] = ()) -> Score:
    """Points earned of points marked (of the required stages', when some are)."""
    if marks is None:
        return Score(0, class_max)
    marks = {name: mark for name, mark in marks.items() if is_required(name, required)}
    worth = {name: stage_points(name, int(m.cells.size), points) for name, m in marks.items()}
    return Score(whole(sum(earned(m, worth[n], points) for n, m in marks.items())), whole(sum(worth.values())))


def whole(x: float) -> float:
    """Rounded to 4 decimals; an int when whole (8, not 8.0, in the gradebook)."""
    x = round(x, 4)
    return int(x) if x == int(x) else x
