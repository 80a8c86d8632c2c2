"""The names of the stage table's stages and of the backward pass's, without numpy.

The commands read them at start-up: `attn check` makes one `--STAGE` option per stage when its
module loads (for `--help`), and `attn compute` checks `--stages` in its plan, which runs before
numpy loads (`threads.before_numpy` must come first). The tables themselves (attncli/stages/table.py,
attncli/stages/grads.py) import numpy at their top; tests/test_stages.py holds these tuples equal to them,
so a stage added to the table is added here too, or that test fails.
"""

STAGES = ("Q_normed", "K_normed", "Q_rope", "K_rope", "scores", "scaled", "capped", "biased", "masked", "weights", "output")  # stages.names()
GRADIENTS = ("d_output", "d_V", "d_weights", "D", "d_scores", "d_Q", "d_K")  # grads.names()
ASKABLE = STAGES + GRADIENTS + ("tiles", "slip")  # what `ask`, --require and --points may name
GRADS = "grads"  # the top-level JSON key (and --stages word): one gradient per input, in its given shape
