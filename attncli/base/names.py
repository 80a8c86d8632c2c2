"""The names of the stage table's stages and of the backward pass's, without numpy.

The commands read them at start-up: `attn check` makes one `--STAGE` option per stage when its
module loads (for `--help`), and `attn compute` checks `--stages` in its plan, which runs before
numpy loads (`threads.before_numpy` must come first). The tables themselves (attncli/stages/table.py,
attncli/stages/grads.py) import numpy at their top; tests/test_stages.py holds these tuples equal to them,
so a stage added to the table is added here too, or that test fails.
"""

STAGES = ("Q_normed", "K_normed", "Q_rope", "K_rope", "scores", "scaled", "capped", "masked", "weights", "output")  # stages.names()
GRADIENTS = ("d_output", "d_V", "d_weights", "D", "d_scores", "d_Q", "d_K")  # grads.names()
PROJECTED = ("Q", "K", "V")  # X W_Q, X W_K, X W_V: a projected problem's stages before the heads' own
ASKABLE = PROJECTED + STAGES + GRADIENTS + ("tiles", "slip")  # what `ask`, --require and --points may name
COSTS = ("imprecise", "percent", "transposed")  # --points' prices of a slip (attncli/marking/scoring.py)
GRADS = "grads"  # the top-level JSON key (and --stages word): one gradient per input, in its given shape


def stage_of(path: str) -> str:
    """The stage a path names, for `ask`, --require and --points: `heads[1].output` → output (one
    head's), `weights` → weights (every head's); anything else is returned as it is."""
    if path.startswith("heads[") and "]." in path:
        head, _, stage = path[len("heads["):].partition("].")
        if head.isdigit():
            return stage
    return path
