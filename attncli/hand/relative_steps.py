"""The hand step of `biased` (T5's relative position bias, attncli/problem/relative.py) for one query
row: each key's number plus its head's embedding at the bucket of k_pos − q_pos, the distance and the
bucket written beside it. See attncli/hand/stage_steps.py for how a step is written and read.

No numpy at import: the buckets come from the problem's own record (`problem.relative_bias.bucket`).
"""

from __future__ import annotations

from collections import namedtuple
from decimal import Decimal

from attncli.hand.carry import given
from attncli.hand.hand_backward import elementwise_back
from attncli.hand.stage_steps import HandStep, Page, Row


class Biased(namedtuple("Biased", "name before distances buckets bias pairs")):
    # name: str
    # before: Pairs  # the stage it reads
    # distances: list[int]  # k_pos − q_pos per key
    # buckets: list[int]
    # bias: list[Decimal]  # the head's embedding at each key's bucket, as written (carry.given)
    # pairs: Pairs  # None where the key is already −∞
    __slots__ = ()


def _write(row: Row, name: str) -> Biased:
    p, exact = row.trace.problem, row.exact(name)
    q_pos = int(p.q_positions[row.row])
    distances = [int(k) - q_pos for k in p.k_positions.tolist()]
    buckets = [int(b) for b in p.relative_bias.bucket(p.k_positions - q_pos).tolist()]
    true = [float(p.relative_bias.embedding[b, row.head]) for b in buckets]
    bias = [given(b, row.places) for b in true]
    pairs = []
    for j, (t, d) in enumerate(row.x):
        if d is None:
            pairs.append((float(exact[j]), None))
            continue
        terms = [(t, d), (true[j], bias[j])]
        pairs.append((float(exact[j]), row.w.result((name, j), row.w.onward(d) + bias[j], exact[j], terms,
                                                    written=d + bias[j])))
    return Biased(name, row.x, distances, buckets, bias, pairs)


def _lines(page: Page, r: Biased, step: int) -> list[str]:
    rb = page.trace.problem.relative_bias
    side = "bidirectional" if rb.bidirectional else "causal"
    head = [f"Step {step}: add the relative position bias (T5), embedding[bucket(k_pos − q_pos)] of this head "
            f"({rb.buckets} {side} buckets, one per distance below {rb.exact}, log-spaced to {rb.max_distance})"]
    return head + page.each(
        lambda j, key: f"{key} masked → −∞" if r.before[j][1] is None else
        f"{key} {page.n(r.before[j][1])} {'−' if r.bias[j] < 0 else '+'} {page.short(abs(r.bias[j]))} = "
        f"{page.n(r.pairs[j][1])}{page.note((r.name, j))}"
        f"   (k_pos − q_pos = {r.distances[j]}: bucket {r.buckets[j]})")


BIASED = HandStep(_write, _lines, backward=elementwise_back("through biased, $d_previous = $d × 1 (the bias is a "
                                                            "constant)", lambda x, y: Decimal(1)))
