"""The backward half of `--explain`: one query row's gradients, step by step, after its forward
half. Numbers come from `backward_steps.written_backward`, in the forward half's carry; each present
stage's backward hand step writes its own lines (attncli/hand/hand_backward.py), in reverse order, then
the row's d_q and its shares of the key-side inputs' gradients."""

from __future__ import annotations

from attncli.explain.backward_steps import WrittenBackward, written_backward
from attncli.explain.steps import Written
from attncli.hand.hand_backward import Share, Steps
from attncli.hand.handwriting import comparison, short, shown_keys, vector
from attncli.hand.stage_steps import Page
from attncli.problem.groups import group_text
from attncli.problem.trace import Trace
from attncli.render.text import labels
from attncli.stages.table import fields, present


def backward_lines(trace: Trace, w: Written) -> list[str]:
    p = trace.problem
    b = written_backward(trace, w)
    keys = labels(p.key_labels, p.lk)
    width = max(len(keys[j]) for j in shown_keys(p.lk) if j is not None) + 1
    page = Page(trace, b, keys, width, "", lambda name: fields(p, name))
    lines = ["Backward pass (the gradient of the loss by each number, from dO back):",
             f"  dO = {vector(b.dO, b.places, short)}  (this row of {b.seed})"] + b.preamble
    steps = Steps()
    for stage in reversed(present(p)):
        lines += stage.hand.backward.lines(page, b.stages[stage.name], steps)
    lines.append(f"  d_{b.query} = {vector(b.d_q, b.places)}")
    lines.append(comparison(b.d_q, b.exact_d_q, b.places))
    return lines + _share_lines(page, b, steps, group_text(p, w.head))


def _share_lines(page: Page, b: WrittenBackward, steps: Steps, group: str = "") -> list[str]:
    """This row's share of each key-side input's gradient, key by key."""
    whats = " and ".join(f"d_{s.name} ({s.what})" for s in b.shares)
    sums = " and ".join(f"d_{s.name.upper()}" for s in b.shares)
    notes = "".join(note for s in b.shares for note in s.notes)
    header = f"Step {steps.number()}: this row's share of {whats}; {sums} add up every query's share{group}{notes}"

    def share(s: Share, j: int) -> str:
        return (f"d_{s.name} += {page.n(s.factors[j])} × {page.vector(s.vector, short)}{s.by} = "
                f"{page.vector(s.results[j])}")

    def line(j: int, key: str) -> str:
        if all(s.results[j] is None for s in b.shares):
            return f"{key} masked, no share"
        notes = page.note(*[(f"d_{s.name}", j) for s in b.shares])
        return f"{key} " + "   ".join(share(s, j) for s in b.shares if s.results[j] is not None) + notes
    return [header] + page.each(line)
