"""Which keys a query sees, and why the others are hidden (attncli/problem/visibility.py): each
rule's reason read from its own bounds and each head's own mask plane."""

from attncli.document.reading import build_problem


def test_why_a_key_is_hidden_reads_each_heads_own_mask_plane():
    """Mutation: `Matrix.why` reads head 0's plane for every head. With a per-head mask, head 1's
    reasons must be where head 1's plane is false (--explain --head 1 names them per masked key)."""
    from attncli.problem import visibility

    mask = [[[True, True, False], [True, True, True]],   # head 0
            [[False, True, True], [True, False, True]]]  # head 1
    problem = build_problem({"Q": [[1.0, 0.0, 0.5, 1.0], [0.0, 1.0, 1.0, 0.0]],
                             "K": [[1.0, 2.0, 0.0, 1.0], [0.5, 0.0, 1.0, 1.0], [2.0, 1.0, 1.0, 0.5]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "heads": 2, "mask": mask})
    for head in (0, 1):
        for row in (0, 1):
            why = visibility.hidden_because(problem, head, row)
            assert [w is not None for w in why] == [not seen for seen in mask[head][row]], (head, row, why)


def test_a_query_is_never_told_the_key_at_its_own_position_is_hidden_by_the_causal_rule():
    """Mutation: `Causal.why` says k_pos ≥ q_pos hides a key (the rule is k_pos > q_pos). Seen only
    where another rule hides that key: with a key_mask hiding key 1, query 1's line for it must
    give the key_mask as the reason, and the causal rule only for the keys after it."""
    from attncli.problem import visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0]],
                             "V": [[1.0, 0.0], [0.0, 1.0], [3.0, 2.0]], "mask": "causal",
                             "key_mask": [True, False, True]})
    assert visibility.hidden_because(problem, 0, 1) == [None, "key_mask false: padding", "causal: k_pos 2 > q_pos 1"]
    assert visibility.hidden_because(problem, 0, 2) == [None, "key_mask false: padding", None]


def test_the_window_names_only_the_keys_beyond_its_inclusive_bounds():
    """Mutation: `Window.why` says k_pos ≥ q_pos + right hides a key (the bound is inclusive: only
    k_pos > q_pos + right is hidden). Seen where another rule hides the key at the bound: with a
    key_mask hiding key 2, query 1 under window [1, 1] is told key 2 is padding, nothing more."""
    from attncli.problem import visibility

    problem = build_problem({"Q": [[1.0, 0.0], [0.0, 1.0]], "K": [[1.0, 2.0], [0.5, 0.0], [2.0, 1.0], [1.0, 1.0]],
                             "V": [[1.0], [0.0], [3.0], [2.0]], "window": [1, 1], "key_mask": [True, True, False, True]})
    assert visibility.hidden_because(problem, 0, 1) == [None, None, "key_mask false: padding",
                                                        "window [1, 1]: k_pos 3 > 1 + 1"]
