"""The backward half of `--explain`: one query row's gradients, step by step, after its forward
half. Numbers come from `backward_steps.written_backward` (each computed from the numbers printed
before it, so every line adds up at the printed decimals)."""

from __future__ import annotations

from attncli.backward_steps import written_backward
from attncli.carry import printed
from attncli.handwriting import MAX_KEYS, comparison, dot, given, number, shown_keys, vector
from attncli.render.text import labels
from attncli.steps import Written
from attncli.trace import Trace


def backward_lines(trace: Trace, w: Written) -> list[str]:
    p = trace.problem
    b = written_backward(trace, w)
    keys = labels(p.key_labels, p.lk)
    width = max(len(keys[j]) for j in shown_keys(p.lk) if j is not None) + 1
    places = w.places
    n = lambda x: number(x, places)  # noqa: E731
    o = lambda x: f"({n(x)})" if x < 0 else n(x)  # a negative operand after a minus sign  # noqa: E731
    scale = f"/ {n(b.divisor)}" if b.divisor is not None else f"× {n(b.scale)}"

    def each(line):
        return [f"  … {p.lk - MAX_KEYS + 1} more keys …" if j is None else "  " + line(j, f"{keys[j] + ':':<{width}}")
                for j in shown_keys(p.lk)]

    lines = ["Backward pass (the gradient of the loss by each number, from dO back):",
             f"  dO = {vector(b.dO, places, given)}  (this row of d_output)"]
    if b.dead:
        lines.append("  every key is masked: the weights do not depend on the scores, so d_scores, d_q "
                     "and this row's share of d_k are 0")
    lines.append("Step B1: d_weights = dO · v  (how the loss moves with each weight)")
    lines += each(lambda j, key: f"{key} masked, no gradient" if b.d_weights[j] is None else
                  f"{key} {dot(b.dO, w.V[j], places)} = {n(b.d_weights[j])}")
    lines.append("Step B2: D = dO · output  (= Σ_j weight_j × d_weights_j)")
    lines.append(f"  {dot(b.dO, b.output, places)} = {n(b.D)}")
    capped = b.cap_factor is not None
    first = b.d_capped if capped else b.d_scores  # by the softmax's input
    lines.append(f"Step B3: {'d_capped' if capped else 'd_scores'} = weight × (d_weights − D)  (the softmax's gradient)")
    lines += each(lambda j, key: f"{key} masked → 0" if not w.allowed[j] else
                  f"{key} 0 (the row is fully masked)" if b.dead else
                  f"{key} {n(b.weights[j])} × ({n(b.d_weights[j])} − {o(b.D)}) = {n(first[j])}")
    if capped:
        lines.append("Step B3′: through the softcap, d_scores = d_capped × (1 − tanh²(scaled / c))")
        lines += each(lambda j, key: f"{key} {n(b.d_capped[j])} × {n(b.cap_factor[j])} = {n(b.d_scores[j])}")
    K, name = (w.K, "d_q") if b.K_rope is None else (b.K_rope, "d_q_rope")
    lines.append(f"Step B4: {name} = Σ_j d_scores_j {'k' if b.K_rope is None else 'k_rope'}_j {scale}")
    live = [j for j in range(p.lk) if w.allowed[j] and not b.dead]
    for c in range(len(w.q)):
        terms = dot([b.d_scores[j] for j in live], [K[j][c] for j in live], places) if live else "0"
        result = b.d_q[c] if b.d_q_rope is None else b.d_q_rope[c]
        lines.append(f"  column {c}: ({terms}) {scale} = {n(b.sums[c])} {scale} = {n(result)}")
    if b.pairs is not None:
        lines.append(f"  d_q_rope = {vector(b.d_q_rope, places)}; rotated back by the query's angle, pair by pair:")
        for a, c, cos, sin in b.pairs:
            lines.append(f"  ({a}, {c}): {n(b.d_q_rope[a])} × {o(cos)} + {o(b.d_q_rope[c])} × {o(sin)} = {n(b.d_q[a])}"
                         f"   {n(b.d_q_rope[c])} × {o(cos)} − {o(b.d_q_rope[a])} × {o(sin)} = {n(b.d_q[c])}")
    lines.append(f"  d_q = {vector(b.d_q, places)}")
    lines.append(comparison(b.d_q, b.exact_d_q, places))
    qname = "q" if b.K_rope is None else "q_rope"
    lines.append(f"Step B5: this row's share of d_v (weight × dO) and d_k (d_scores × {qname} {scale}); "
                 "d_V and d_K add up every query's share"
                 + ("; with RoPE this d_k is by k_rope, and d_K rotates it back by each key's angle"
                    if b.K_rope is not None else ""))
    q = w.q if b.K_rope is None else [printed(x, places) for x in trace.stage("Q_rope")[w.head, w.row]]
    lines += each(lambda j, key: f"{key} masked, no share" if not (w.allowed[j] or b.dead) else f"{key} d_v += {n(b.weights[j])} × {vector(b.dO, places, given)} = "
                                 f"{vector(b.d_v[j], places)}   d_k += {n(b.d_scores[j])} × "
                                 f"{vector(q, places, given)} {scale} = {vector(b.d_k[j], places)}")
    return lines
