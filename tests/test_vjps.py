"""Each stage's backward step (attncli/stages/vjps.py) on its own, where the whole backward pass
cannot show a mistake."""

import numpy as np

from attncli.document.reading import build_problem
from attncli.stages import table as stages
from attncli.stages import vjps


def test_weights_vjp_is_zero_on_a_row_whose_every_key_is_masked_under_uniform():
    """Mutation: the weights vjp no longer zeroes dead rows. Under masked_rows "uniform" a dead
    row's weights are 1/Lk whatever its logits, so their gradient by the logits is 0; P ∘ (dP − D)
    alone is (dP − mean dP) / Lk there. (Through the whole backward pass the masked stage's vjp
    zeroes these cells again, so only the vjp by itself shows it.)"""
    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "masked_rows": "uniform",
                             "mask": [[False, False, False], [True, True, False]]})
    x = np.array([[[-np.inf, -np.inf, -np.inf], [0.5, -0.25, -np.inf]]])  # (1, 2, 3): row 0 dead
    y, dead = stages.softmax(x, "uniform")
    assert dead.tolist() == [[True, False]] and np.allclose(y[0, 0], 1 / 3)
    d = np.array([[[1.0, -2.0, 4.0], [0.5, 1.5, -1.0]]])
    block = stages.Block(problem, np.zeros((1, 2, 2)), np.zeros((1, 3, 2)), np.zeros((1, 3, 2)), 1.0)
    found = vjps.weights(block, x, y, d)
    np.testing.assert_array_equal(found[stages.PREVIOUS][0, 0], 0.0)
    live = y[0, 1] * (d[0, 1] - (d[0, 1] * y[0, 1]).sum())
    np.testing.assert_allclose(found[stages.PREVIOUS][0, 1], live)
