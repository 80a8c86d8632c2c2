"""The RoPE step of an explanation: the explained query's q and every key's k rotated, pair by
pair (angle = position × θ_i, cos, sin, the rotated pair), from `steps.Written.rotation`."""

from __future__ import annotations

from attncli.rope import LIBRARIES


def rotation_lines(trace, w, keys: list[str], width: int, step: int, number, given, vector, note, shown_keys
                   ) -> list[str]:
    """`number`, `given`, `vector`: explain.py's writers; `note(*line_keys)` its unrounded note;
    `shown_keys(n)` the key indices to list (None = the elided middle)."""
    rope, r = trace.problem.rope, w.rotation
    d_k = trace.d_k
    part = "" if rope.dims == d_k else f"; dims {rope.dims}–{d_k - 1} are not rotated (partial rotary)"
    base = f"{rope.base:g}" if rope.base < 1e16 else repr(rope.base)
    lines = [f"Step {step}: rotate q and every k by its position (RoPE {rope.style}, "
             f"{LIBRARIES[rope.style]}; θ_i = {base}^(−2i/{rope.dims}){part})",
             "  θ = " + vector(r.theta)]

    def pair_lines(turns, key, indent):
        out = []
        for i, t in enumerate(turns):  # pair i turns by θ_i
            (a, b), (xa, xb), (ra, rb) = t.dims, t.before, t.after
            c, s = number(t.cos), number(t.sin)
            out.append(f"{indent}dims {a}, {b}:   angle = {t.position} × {number(r.theta[i])}"
                       f" = {number(t.angle)}   cos = {c}   sin = {s}   "
                       f"({given(xa)})({c}) − ({given(xb)})({s}) = {number(ra)}   "
                       f"({given(xb)})({c}) + ({given(xa)})({s}) = {number(rb)}{note((key, a))}")
        return out

    lines.append(f"  q at position {r.q[0].position}:")
    lines += pair_lines(r.q, ("q_rope", 0), "    ")
    lines.append(f"    q_rope = {vector(r.q_rope)}")
    for j in shown_keys(len(keys)):
        if j is None:
            lines.append(f"  … {len(keys) - sum(k is not None for k in shown_keys(len(keys)))} more keys …")
            continue
        lines.append(f"  {keys[j] + ':':<{width}} k at position {r.keys[j][0].position}:")
        lines += pair_lines(r.keys[j], ("k_rope", j), "    ")
        lines.append(f"    k_rope = {vector(r.K_rope[j])}")
    return lines

