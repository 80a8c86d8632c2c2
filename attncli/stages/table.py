"""The one stage table: every per-head stage of attention, defined once.

Each `Stage` record holds a stage's name (the Trace key, JSON per-head key, answer key in
`attn check` and first word of its table title), its table title and formulas as templates, which
problems have it, its compute function and its overflow check. The full trace (`attention`), the
output-only path (`blocks`), marking (`mistakes`) and every view read this table; adding a stage
is one entry here plus its compute function.

A compute function works on a `Block`: a slice of query rows, all heads (or one head, in marking),
a slice of keys; it takes the stage before it (`x`, None for the first) and returns this stage:

    Q_normed = q_norm(Q): RMSNorm or LayerNorm        (H, b, d_k)   only with q_norm (attncli/problem/qk_norm.py)
    K_normed = k_norm(K)                              (H, c, d_k)   only with k_norm
    Q_rope  = Q (Q_normed) rotated by q_positions     (H, b, d_k)   only with rope (attncli/problem/rope.py)
    K_rope  = K rotated by k_positions                (H, c, d_k)   only with rope
    scores  = Q Kᵀ (Q_rope K_ropeᵀ with rope)         (H, b, c)
    scaled  = scores · scale                          (H, b, c)
    capped  = c · tanh(scaled / c)                    (H, b, c)   only with a softcap
    biased  = capped + embedding[bucket(k − q)]       (H, b, c)   only with relative_bias (T5: attncli/problem/relative.py)
    masked  = capped + bias + ALiBi, −∞ where masked  (H, b, c)   only with a mask, bias or ALiBi
    weights = softmax(masked [, sink]) over keys      (H, b, c)   a sink logit joins the sum, then is dropped
    output  = weights V                               (H, b, d_v)

A stage with `replaces` ("Q" or "K") stands in for that input of the block for the stages after
it: `run` computes scores from Q_rope and K_rope; marking from a learner's own Q_rope and K_rope.

A stage's `vjp` (vector-Jacobian product, attncli/stages/vjps.py) is its part of the backward pass
(attncli/compute/backward.py runs them in reverse order): given the block the stage was computed on, what
it read (`x`, the stage before it), its value `y` and the gradient `d` of a loss by `y`, it returns
the gradients of what it read, by name: PREVIOUS for x, a block input ("Q", "K", "V": for scores,
Q_rope's and K_rope's values stand in), a problem parameter ("sinks"), and any number it reports
("D"); a stage without one is refused by the backward pass. Its `vjp_title` (`vjp_latex` in LaTeX)
is what it adds to a gradient's title (grads.title):

    Q_normed d Q = the norm's vjp per row (attncli/problem/qk_norm.py); d q_norm.weight, d q_norm.bias
    K_normed d K the same, by k_norm
    Q_rope   d Q = d Q_rope rotated back (by −angle: a rotation's inverse is its transpose)
    K_rope   d K = d K_rope rotated back
    scores   d Q = d scores K,  d K = d scoresᵀ Q                (Q_rope, K_rope with rope)
    scaled   d x = scale · d scaled
    capped   d x = d capped ∘ (1 − tanh²) = d capped ∘ (1 − (capped / c)²)
    biased   d x = d biased
    masked   d x = d masked, 0 where masked is −∞ (the bias is not an input here)
    weights  d x = P ∘ (d P − D), D = rowsum(d P ∘ P); 0 on a row whose every key is masked;
             d sink = −Σ_rows (1 − Σ_j P_j) · D, per head
    output   d x = d output Vᵀ,  d V = xᵀ d output

Templates use `$name` fields (string.Template, filled by `fill`): `$scale` (the view formats it),
`$q`/`$k` ("Q" or "Q_rope"; `$qtex`/`$ktex` in LaTeX),
`$bias` (" + bias", " + ALiBi" for what the problem adds; `$bias_tex` the same in LaTeX), `$previous` (the stage this one reads:
the softmax reads `masked`, or `capped` or `scaled` when there is nothing to add or mask), and each
variant's (attncli/problem/variants.py: `$softcap`, the softcap c; `$sink` and `$sink_tex`, the
sink's part of the weights' title and formulas).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from string import Template
from typing import Callable

import numpy as np

from attncli.base.arrays import check_finite
from attncli.base.errors import AttnError
from attncli.base.softmax import softmax
from attncli.hand import norm_steps, relative_steps, rope_steps, softmax_steps, stage_steps
from attncli.problem import masks, qk_norm, recipes, variants
from attncli.problem.rope import length, rotate
from attncli.problem.trace import Problem
from attncli.stages import vjps

HQK = ("head", "query", "key")
EVERYTHING = slice(None)
PREVIOUS = vjps.PREVIOUS  # a vjp's key for the gradient of the stage before it


@dataclass(frozen=True, eq=False)
class Block:
    """What a stage is computed from: per-head Q (H, b, d_k), K (H, c, d_k), V (H, c, d_v) for query
    rows `rows` and keys `cols` of `problem`. `head` is the one head a marking block holds (None: all
    heads). `reuse`: a compute function may write its result into its input (the output-only path
    keeps no stage, so it saves the copies). `bounded`: Q Kᵀ · scale is known not to overflow.
    `found`: where a stage leaves what it finds on the way for the caller (None: nothing wanted):
    the weights stage's "lse" (ln Σ e^logits per row, from the softmax's own sums) and "dead".
    `out`: where the scores stage writes Q Kᵀ (the output-only path's scratch, made once per thread)."""

    problem: Problem
    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray
    scale: float
    rows: slice = field(default_factory=lambda: EVERYTHING)
    cols: slice = field(default_factory=lambda: EVERYTHING)
    head: int | None = None
    reuse: bool = False
    bounded: bool = False
    found: dict | None = None
    out: np.ndarray | None = None

    @property
    def offset(self) -> tuple[int, int, int]:
        """Where this block starts in the (H, Lq, Lk) stages, for overflow messages."""
        return (self.head or 0, self.rows.start or 0, self.cols.start or 0)

    def rule(self, array: np.ndarray | None) -> np.ndarray | None:
        """A mask's or bias's (1 or H, b, c) block, narrowed to this block's head."""
        if array is None or self.head is None or array.shape[0] == 1:
            return array
        return array[self.head:self.head + 1]

    def visible(self) -> np.ndarray | None:
        return self.rule(masks.visible(self.problem, self.rows, self.cols))  # (1 or H, b, c) bool

    def bias(self) -> np.ndarray | None:
        return self.rule(masks.bias(self.problem, self.rows, self.cols))  # (1 or H, b, c)

    def hidden(self) -> tuple[slice, np.ndarray] | None:
        """(part, visible there): the run of this block's columns where some key may be hidden
        from some query (for causal rules, the block's diagonal square), as a slice relative to
        the block, and the (1 or H, b, part) visibility on it; None when every key is visible."""
        start = self.cols.start or 0
        cols = slice(start, self.problem.lk if self.cols.stop is None else self.cols.stop)
        span = masks.partly_hidden(self.problem, self.rows, cols)
        if span is None:
            return None
        return slice(span.start - start, span.stop - start), self.rule(masks.visible(self.problem, self.rows, span))


@dataclass(frozen=True, eq=False)
class Stage:
    name: str
    title: str  # the table title, a template
    plain: str  # the formula in words (Markdown)
    latex: str
    compute: Callable[[Block, np.ndarray | None], np.ndarray]
    vjp: Callable[[Block, np.ndarray | None, np.ndarray, np.ndarray], dict[str, np.ndarray]] | None = None  # backward
    vjp_title: str | None = None  # what the vjp adds to a gradient's title (a template); None: " (through NAME)"
    vjp_latex: str | None = None  # the same in LaTeX; None: "\ (\text{through NAME})"
    temporaries: Callable[[Problem], int] = lambda problem: 0  # score-sized arrays compute needs beside its value
    applies: Callable[[Problem], bool] = lambda problem: True
    check: Callable[[Block, np.ndarray], None] | None = None  # raises NumericError on overflow
    columns: str = "keys"  # what the stage's columns are: "keys" or "value columns"
    sum_column: bool = False  # tables add each row's sum (weights: 1, or less with sinks)
    blocked: bool = False  # cells may be −∞ (blocked keys): answers may write −∞ or a large negative
    absent: str = "this problem does not have it"  # why `applies` is false, for a learner's answer
    rows: str = "queries"  # what the stage's rows are: "queries", or "keys" (K_rope)
    replaces: str | None = None  # the block input ("Q" or "K") this stage stands in for after it
    hand: stage_steps.HandStep | None = None  # what `--explain` writes for one row (stage_steps.py); None: refused


def _into(block: Block, x: np.ndarray) -> np.ndarray | None:
    return x if block.reuse else None


def _rope(problem: Problem) -> bool:
    return problem.rope is not None


def compute_q_rope(block: Block, x) -> np.ndarray:
    p = block.problem
    return rotate(block.Q, p.q_positions[block.rows], p.rope, length(p))  # (H, b, d_k)


def compute_k_rope(block: Block, x) -> np.ndarray:
    p = block.problem
    return rotate(block.K, p.k_positions[block.cols], p.rope, length(p))  # (H, c, d_k)


def compute_scores(block: Block, x) -> np.ndarray:
    return np.matmul(block.Q, block.K.transpose(0, 2, 1), out=block.out)  # (H, b, c)


def compute_scaled(block: Block, x: np.ndarray) -> np.ndarray:
    return np.multiply(x, x.dtype.type(block.scale), out=_into(block, x))  # (H, b, c)


def compute_capped(block: Block, x: np.ndarray) -> np.ndarray:
    """c · tanh(scaled / c): smooth, odd, within (−c, c), ≈ scaled for |scaled| ≪ c (Gemma 2)."""
    cap = x.dtype.type(block.problem.softcap)
    out = np.divide(x, cap, out=_into(block, x))  # (H, b, c)
    np.tanh(out, out=out)
    out *= cap
    return out


def compute_biased(block: Block, x: np.ndarray) -> np.ndarray:
    """x + T5's relative position bias of each query and key (their buckets' embedding, per head)."""
    p = block.problem
    bias = p.relative_bias.bias(p.q_positions[block.rows], p.k_positions[block.cols], x.dtype)  # (H, b, c)
    bias = bias if block.head is None else bias[block.head:block.head + 1]
    return np.add(x, bias, out=_into(block, x))  # (H, b, c)


def compute_masked(block: Block, x: np.ndarray) -> np.ndarray:
    out = mask_scores(x, None, block.bias(), out=_into(block, x))  # (H, b, c)
    hidden = block.hidden()  # rules are evaluated only on the columns where they may hide a key
    if hidden is not None:
        part, visible = hidden
        np.copyto(out[..., part], -np.inf, where=~visible)
    return out


def mask_scores(scaled: np.ndarray, mask: np.ndarray | None = None, bias: np.ndarray | None = None,
                out: np.ndarray | None = None) -> np.ndarray:
    """scaled + bias, then −∞ wherever the mask forbids (mask and bias broadcast over heads).
    With `out` (= scaled) the work is done in place."""
    if out is None:
        out = scaled.copy()
    if bias is not None:
        out += bias.astype(out.dtype, copy=False)
    if mask is not None:
        np.putmask(out, ~np.broadcast_to(mask, out.shape), -np.inf)
    return out


def sinks(block: Block, dtype) -> np.ndarray | None:
    """The block's sink logits as (H or 1, 1, 1) of `dtype`, narrowed to its head; None without."""
    values = block.problem.sinks
    if values is None:
        return None
    values = values if block.head is None else values[block.head:block.head + 1]
    return values.astype(dtype)[:, None, None]


def compute_weights(block: Block, x: np.ndarray) -> np.ndarray:
    lse = None if block.found is None else np.empty(x.shape[:-1], x.dtype)  # (H, b)
    weights, dead = softmax(x, block.problem.masked_rows, out=_into(block, x), sinks=sinks(block, x.dtype), lse=lse)
    if block.found is not None:
        block.found.update(lse=lse, dead=dead)
    return weights  # (H, b, c)


def compute_output(block: Block, x: np.ndarray) -> np.ndarray:
    return x @ block.V  # (H, b, d_v)


def _finite(what: str, axes=HQK):
    def check(block: Block, x: np.ndarray) -> None:
        check_finite(x, what, axes, offset=block.offset)
    return check


def _check_scaled(block: Block, x: np.ndarray) -> None:
    if abs(block.scale) > 1 and not block.bounded:  # |scale| ≤ 1 cannot overflow finite scores
        _finite("scaled = scores · scale")(block, x)


def _check_scores(block: Block, x: np.ndarray) -> None:
    if not block.bounded:
        _finite(fill("scores = $q $kᵀ", block.problem, "scores"))(block, x)


def _bias_arrays(problem: Problem) -> int:
    """The (H, Lq, Lk) arrays, in units of the problem's dtype, that `masks.bias` builds for the masked
    stage: ALiBi alone in the problem's dtype (one array); ALiBi beside a given bias in float64 (its
    term and the sum); and a float32 run's copy of a given bias (or that sum) in float32."""
    wide = 2 if problem.dtype == "float32" else 1  # a float64 array, in units of a float32 one
    alibi, biased = problem.alibi_slopes is not None, problem.bias is not None
    return (alibi and not biased) + 2 * wide * (alibi and biased) + (biased and problem.dtype == "float32")


def _check_masked(block: Block, x: np.ndarray) -> None:
    if block.problem.bias is None:
        # ALiBi alone cannot overflow: |slope| ≤ 1e6 and distances ≤ 2^54 keep its term below 2e22,
        # less than half a unit in the last place of any float32 or float64 beyond 1e31 (variants.MAX_SLOPE).
        return
    bias = block.bias()
    if bias is None:
        return
    mask = block.visible()
    blocked = np.isneginf(bias) if mask is None else np.isneginf(bias) | ~mask  # −∞ from a rule, not overflow
    check_finite(x, "scaled + bias", HQK, allow_neg_inf=blocked, offset=block.offset)


ROPE_ABSENT = "this problem has no rope (rotary positions)"
ROTATED_BACK = ", rotated back (RoPE⁻¹)"
ROTATED_BACK_TEX = r",\ \text{rotated back } (\operatorname{RoPE}^{-1})"
STAGES: tuple[Stage, ...] = (
    Stage("Q_normed", "Q_normed = $qnorm", "$qnorm", r"\operatorname{norm}(Q)", qk_norm.compute("Q"),
          applies=qk_norm.applies("Q"),
          vjp=vjps.normed("Q"), vjp_title=", back through q_norm", vjp_latex=r",\ \text{back through q\_norm}",
          check=_finite("Q_normed = q_norm(Q)", ("head", "query", "dim")), columns="dims",
          absent="this problem has no q_norm", replaces="Q", hand=norm_steps.Q_NORMED),
    Stage("K_normed", "K_normed = $knorm", "$knorm", r"\operatorname{norm}(K)", qk_norm.compute("K"),
          applies=qk_norm.applies("K"),
          vjp=vjps.normed("K"), vjp_title=", back through k_norm", vjp_latex=r",\ \text{back through k\_norm}",
          check=_finite("K_normed = k_norm(K)", ("head", "key", "dim")), columns="dims",
          absent="this problem has no k_norm", rows="keys", replaces="K", hand=norm_steps.K_NORMED),
    Stage("Q_rope", "Q_rope = $qin rotated by q_positions (RoPE)", "$qin rotated by q_positions (RoPE)",
          r"\operatorname{RoPE}($qintex, \text{q\_positions})", compute_q_rope, applies=_rope,
          vjp=vjps.q_rope, vjp_title=ROTATED_BACK, vjp_latex=ROTATED_BACK_TEX,
          check=_finite("Q_rope = Q rotated", ("head", "query", "dim")), columns="dims", absent=ROPE_ABSENT,
          replaces="Q",
          hand=rope_steps.Q_ROPE),
    Stage("K_rope", "K_rope = $kin rotated by k_positions (RoPE)", "$kin rotated by k_positions (RoPE)",
          r"\operatorname{RoPE}($kintex, \text{k\_positions})", compute_k_rope, applies=_rope,
          vjp=vjps.k_rope, vjp_title=ROTATED_BACK, vjp_latex=ROTATED_BACK_TEX,
          check=_finite("K_rope = K rotated", ("head", "key", "dim")), columns="dims", absent=ROPE_ABSENT,
          rows="keys", replaces="K",
          hand=rope_steps.K_ROPE),
    Stage("scores", "scores = $q $kᵀ", "$q $kᵀ", r"$qtex $ktex^\top", compute_scores, check=_check_scores,
          vjp=vjps.scores,
          hand=stage_steps.SCORES),
    Stage("scaled", "scaled = $previous · $scale", "$previous · scale", r"\text{$previous} \cdot \text{scale}",
          compute_scaled, check=_check_scaled,
          vjp=vjps.scaled,
          hand=stage_steps.SCALED),
    Stage("capped", "capped = $softcap · tanh($previous / $softcap)",
          "cap · tanh($previous / cap), cap = $softcap", r"$softcap \tanh(\text{$previous} / $softcap)", compute_capped,
          vjp=vjps.capped, vjp_title=" ∘ (1 − (capped / c)²)", vjp_latex=r" \circ (1 - (\text{capped} / c)^2)",
          applies=lambda problem: problem.softcap is not None, absent="this problem has no softcap",
          hand=stage_steps.CAPPED),
    Stage("biased", "biased = $previous + relative bias (T5: bucket of k_pos − q_pos)",
          "$previous + embedding[bucket(k_pos − q_pos)]", r"\text{$previous} + B_{\text{bucket}(j - i)}",
          compute_biased, vjp=vjps.biased, vjp_title="", vjp_latex="",
          temporaries=lambda problem: 1,  # the block's bias
          applies=lambda problem: problem.relative_bias is not None, absent="this problem has no relative_bias",
          check=_finite("biased = x + relative bias"), hand=relative_steps.BIASED),
    Stage("masked", "masked = $previous$bias, $fill where the mask blocks", "$previous$bias, $fill where masked",
          r"\text{$previous}$bias_tex, $fill_tex \text{ where masked}", compute_masked,
          vjp=vjps.masked, vjp_title="", vjp_latex="",  # its zeros are in the title already: "0 where masked"
          temporaries=_bias_arrays,
          applies=masks.has_logit_changes, check=_check_masked, blocked=True,
          absent="this problem has no mask, bias or ALiBi",
          hand=softmax_steps.MASKED),
    Stage("weights", "weights = softmax($previous) over keys$sink", "softmax($previous) over keys$sink",
          r"\operatorname{softmax}(\text{$previous}$sink_tex)", compute_weights, sum_column=True,
          vjp=vjps.weights,
          hand=softmax_steps.WEIGHTS),
    Stage("output", "output = $previous V", "$previous V", r"\text{$previous}\, V", compute_output,
          check=_finite("output = weights V", ("head", "query", "column")), columns="value columns",
          vjp=vjps.output,
          hand=stage_steps.OUTPUT),
)
SOFTMAX = "weights"  # the stage whose rows are all masked when every key is (Trace.fully_masked)
OUTPUT = "output"  # weights V: the output-only and tiled paths fuse it with the softmax


def names() -> tuple[str, ...]:
    """Every stage name in order, whether or not a problem has it."""
    return tuple(stage.name for stage in STAGES)


def get(name: str) -> Stage | None:
    """The stage of that name; None for a name that is not a stage."""
    return next((stage for stage in STAGES if stage.name == name), None)


def blocked(name: str) -> bool:
    """Whether answers for stage `name` (or a field ending in it, `heads[1].masked`) may hold −∞."""
    stage = get(name.rsplit(".", 1)[-1])
    return stage is not None and stage.blocked


def stand_in(problem: Problem, name: str) -> str:
    """The stage shown in place of stage `name`, which this problem does not have: the last one
    before it that it has (for Q_rope and K_rope, which come first, the first one after it)."""
    order = names()
    has = [s.name for s in present(problem)]
    before = [s for s in has if order.index(s) < order.index(name)]
    return before[-1] if before else has[0]


def present(problem: Problem) -> tuple[Stage, ...]:
    """The stages this problem has, in order."""
    return tuple(stage for stage in STAGES if stage.applies(problem))


def inputs(problem: Problem) -> tuple[Stage, ...]:
    """The present stages that stand in for Q or K (Q_rope, K_rope): the output-only path runs
    them once, up front."""
    return tuple(stage for stage in present(problem) if stage.replaces is not None)


def logits(problem: Problem) -> tuple[Stage, ...]:
    """The stages before the softmax: what the output-only path computes block by block."""
    stages = present(problem)
    return stages[:[s.name for s in stages].index(SOFTMAX)]


def refuse_unfused(problem: Problem) -> None:
    """Raise AttnError when the stages from the softmax on are not the softmax and then the output:
    the output-only and tiled paths compute those two fused (softmax.row_policy, then · V), and would skip
    a stage between them."""
    order = [stage.name for stage in present(problem)]
    extra = [name for name in order[order.index(SOFTMAX):] if name not in (SOFTMAX, OUTPUT)]
    if extra:
        raise AttnError(f"the stage {extra[0]} comes after the softmax, which the output-only and tiled paths "
                        f"fuse with {OUTPUT}: they cannot compute it")


def previous(problem: Problem, name: str) -> str | None:
    """The stage `name` reads: the one before it among the problem's stages."""
    order = [s.name for s in present(problem)]
    i = order.index(name)
    return order[i - 1] if i else None


def fields(problem: Problem, name: str, **extra) -> dict[str, str]:
    """A stage's template fields for this problem; `extra` adds view-formatted ones ($scale)."""
    rope = _rope(problem)
    bias = problem.bias is not None
    norms = qk_norm.fields(problem)  # $qnorm, $knorm, and $qin, $kin: what RoPE and the scores read
    words = variants.template_fields(problem)  # $softcap, $sink, $sink_tex, and the terms they add (+ ALiBi)
    return {**norms, **words, "bias": " + bias" * bias + words["terms"],
            "bias_tex": r" + \text{bias}" * bias + words["terms_tex"],
            "previous": previous(problem, name) or "",
            "q": "Q_rope" if rope else norms["qin"], "k": "K_rope" if rope else norms["kin"],
            "qtex": r"Q_{\text{rope}}" if rope else norms["qintex"],
            "ktex": r"K_{\text{rope}}" if rope else norms["kintex"],
            "fill": recipes.fill_used(problem), "fill_tex": recipes.fill_tex(problem), **extra}


def chain_part(stage: Stage, latex: bool = False) -> str:
    """What `stage`'s vjp adds to a gradient's title (grads.title), a template: its `vjp_title`
    (`vjp_latex`), or " (through NAME)" for a stage that says nothing."""
    if latex:
        return stage.vjp_latex if stage.vjp_latex is not None else \
            r"\ (\text{through " + stage.name.replace("_", r"\_") + "})"
    return stage.vjp_title if stage.vjp_title is not None else f" (through {stage.name})"


def fill(template: str, problem: Problem, name: str, **extra) -> str:
    return Template(template).safe_substitute(fields(problem, name, **extra))


def run(block: Block, start: str | None = None, x: np.ndarray | None = None, stop: str | None = None,
        after=None) -> dict[str, np.ndarray]:
    """The present stages of `block` after `start` (whose value is `x`; None: from Q and K) up to
    `stop` (None: to the end), each checked for overflow; `after(name)` is called as each finishes."""
    order = present(block.problem)
    first = [s.name for s in order].index(start) + 1 if start else 0
    values: dict[str, np.ndarray] = {}
    for stage in order[first:]:
        x = stage.compute(block, x)
        if stage.check is not None:
            stage.check(block, x)
        values[stage.name] = x
        if stage.replaces is not None:  # scores read Q_rope and K_rope in place of Q and K
            block = replace(block, **{stage.replaces: x})
        if after is not None:
            after(stage.name)
        if stage.name == stop:
            break
    return values
