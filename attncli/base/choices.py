"""The core's choice lists, in a module without numpy.

The command line makes its option choices (`--masked-rows`, `--carry`, `--rope-style`, `--dtype`,
`--mask` of `attn exercise`) from these tuples at start-up, when numpy must not load yet
(`attn --version` and `--help` never import it); the core reads the same tuples (rope.STYLES;
trace.MASKED_ROWS, steps.CARRIES and problem.DTYPES are held to them by
tests/test_choices.py). A new choice is added here, once. The exercise kinds are records of their
own (attncli/marking/kinds.py), which `--kind` reads.
"""

MASKED_ROWS = ("zero", "uniform", "error")  # a query whose every key is masked (trace.MASKED_ROWS)
CARRIES = ("exact", "rounded")  # how --explain carries its numbers (steps.CARRIES)
ROPE_STYLES = ("half", "interleaved")  # RoPE's pairing of dims (rope.STYLES)
DTYPES = ("float64", "float32", "bfloat16", "float16")  # the arithmetic (problem.DTYPES)
LOW_DTYPES = ("bfloat16", "float16")  # stored in fewer bits; computed by a recipe (attncli/problem/recipes.py)
ACCUMULATE = ("float32", "same")  # where a low dtype's products and sums accumulate (recipes.py)
STORE = ("stages", "output")  # what a low dtype's run rounds to its dtype: every stage, or the output alone
MASK_FILLS = ("-inf", "min", "-1e4", "-1e9")  # what a masked score becomes (or any number: --mask-fill VALUE)
EXERCISE_MASKS = ("causal", "random")  # an exercise's mask: the causal rule, or a random matrix
# attn check --code (attncli/code/): the axes of the arrays a learner's function takes, how its
# boolean or additive mask reads, and the array library it is called with.
CODE_LAYOUTS = ("L,d", "B,L,d", "B,H,L,d")
MASK_CONVENTIONS = ("keep", "block", "additive")  # True = attend (SDPA); True = blocked (nn.MultiheadAttention); 0/−∞
CODE_ARRAYS = ("numpy", "torch", "jax")
