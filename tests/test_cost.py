"""attn compute --cost: the kernels' counts against the FlashAttention papers' closed forms, the
masks' savings, the view, the JSON read back, and the errors."""

import io
import json

import numpy as np
import pytest
from rich.console import Console

from attncli.compute import cost
from attncli.document.reading import build_problem
from attncli.render.cost import CostView, markdown
from tests.conftest import assert_error


def problem(n: int, d: int, dtype: str = "float32", heads: int = 1, kv_heads: int | None = None, **keys):
    """Q (heads × n × d) of zeros (the counts read shapes only), K and V with kv_heads."""
    kv = heads if kv_heads is None else kv_heads
    doc = {"Q": np.zeros((heads, n, d)), "K": np.zeros((kv, n, d)), "V": np.zeros((kv, n, d)), "dtype": dtype}
    return build_problem(doc | keys)


@pytest.mark.parametrize("n, d, heads", [(256, 64, 1), (1024, 64, 2), (512, 128, 4), (300, 32, 1)])
def test_the_products_are_flashattention_2s_forward_count(n, d, heads):
    """FlashAttention-2 (Dao 2023) counts the forward pass as 4·N²·d per head: the two products."""
    found = cost.cost(problem(n, d, heads=heads))
    assert found.matmul_flops == heads * 4 * n * n * d
    for algorithm in ("naive", "tiled"):  # without a mask both compute every cell of both products
        assert getattr(found, algorithm)["scores"].flops == heads * 2 * n * n * d
    assert found.naive["output"].flops == heads * 2 * n * n * d
    # tiled: P V, and O = alpha·O_old + P V per row and tile, and O / ℓ once
    t = found.tiling
    assert found.tiled["output"].flops == heads * (2 * n * n * d + 2 * t.row_steps * d + n * d)


@pytest.mark.parametrize("n, d, dtype, sram", [(1024, 64, "float32", 16 << 10), (2048, 64, "float32", 8 << 10),
                                                (512, 32, "float64", 16 << 10), (4096, 128, "float32", 64 << 10)])
def test_tiled_accesses_are_theorem_2s(n, d, dtype, sram):
    """Dao et al. 2022, Theorem 2: Θ(N²d²/M) accesses. With M ≤ 4d² numbers B_r = B_c = M/4d, and
    FlashAttention-2 reads Q once, K and V once per query block, writes O and lse once: exactly
    N·d + 8·N²·d²/M + N·d + N numbers."""
    found = cost.cost(problem(n, d, dtype), sram)
    itemsize = 4 if dtype == "float32" else 8
    numbers = sram // itemsize
    assert found.tiling.block_rows == found.tiling.block_cols == numbers // (4 * d)
    total = found.total("tiled")
    assert total.read // itemsize == n * d + 8 * n * n * d * d // numbers
    assert total.written // itemsize == n * d + n
    assert found.bounds()["tiled"] == n * n * d * d / numbers


@pytest.mark.parametrize("n, d", [(256, 64), (1000, 32)])
def test_naive_accesses_are_n_d_plus_n_squared(n, d):
    """Algorithm 0 with scores, scaled, weights materialised, each written once and read once:
    Q, K, V, O (4·N·d) and 6·N² numbers (Θ(N·d + N²))."""
    found = cost.cost(problem(n, d, "float64"))
    assert found.total("naive").bytes == 8 * (4 * n * d + 6 * n * n)
    assert found.bounds()["naive"] == 2 * n * d + n * n


def test_default_tiles_and_the_kv_cache():
    """192 KiB, d = 64, float32: B_c = ⌈196608 / (4·64·4)⌉ = 192, B_r = min(192, 64) = 64. GQA: 8 query
    heads on 2 kv heads cache 2·(64 + 64)·4 bytes a token; a decoded token does 2·(H/H_kv)/itemsize
    FLOPs per byte of cache."""
    found = cost.cost(problem(1024, 64, heads=8, kv_heads=2))
    assert (found.tiling.block_rows, found.tiling.block_cols) == (64, 192)
    assert found.kv_bytes_per_token == 2 * 128 * 4
    assert found.decode_intensity == 2 * 4 / 4
    assert cost.cost(problem(64, 64, "float64", heads=4, kv_heads=4)).decode_intensity == 2 / 8


@pytest.mark.parametrize("n", [4096, 8192])
def test_causal_tiles_do_about_half_the_work(n):
    full, causal = cost.cost(problem(n, 64)), cost.cost(problem(n, 64, mask="causal"))
    ratio = causal.total("tiled").flops / full.total("tiled").flops
    assert 0.5 < ratio < 0.56
    assert causal.tiling.visible_tiles < full.tiling.visible_tiles == full.tiling.tiles
    # the naive pass computes every cell, and the masked stage selects on each (reading a byte a cell)
    assert causal.total("naive").flops == full.total("naive").flops + n * n
    assert causal.naive["masked"] == cost.Count(n * n, 4 * n * n + n * n, 4 * n * n)
    assert causal.total("tiled").read < 0.56 * full.total("tiled").read


def test_a_window_skips_almost_everything():
    full, window = cost.cost(problem(4096, 64)), cost.cost(problem(4096, 64, window=[511, 0]))
    assert window.total("tiled").flops < 0.2 * full.total("tiled").flops
    assert window.tiled["masked"].flops > 0  # the band's edges are masked, tile by tile


def test_the_mask_is_evaluated_only_on_the_diagonal_tiles():
    """Causal, B_r = B_c = 16: each query block masks only its diagonal tile (16 × 16 cells), and
    computes the tiles up to it: N/16 · (N/16 + 1) / 2 of them."""
    found = cost.cost(problem(4096, 64, mask="causal"), 16 << 10)
    assert found.tiled["masked"].flops == 4096 * 16
    assert found.tiling.visible_tiles == 256 * 257 // 2


@pytest.mark.parametrize("text, size", [("192KiB", 196608), ("192 KiB", 196608), ("64KB", 64000),
                                        ("1.5MiB", 3 << 19), ("1000", 1000), ("12B", 12), ("1mb", 10**6)])
def test_sizes(text, size):
    assert cost.parse_size(text) == size


def test_every_stage_has_a_count(monkeypatch):
    """A stage the counts do not know is refused by name, never skipped."""
    monkeypatch.delitem(cost.COUNTS, "scaled")
    with pytest.raises(cost.AttnError, match="scaled"):
        cost.cost(problem(8, 4))


def test_the_table(run, tmp_path):
    np.savez(tmp_path / "p.npz", Q=np.zeros((4096, 64), np.float32), K=np.zeros((4096, 64), np.float32),
             V=np.zeros((4096, 64), np.float32), mask=np.array("causal"), dtype=np.array("float32"))
    result = run("compute", tmp_path / "p.npz", "--cost", "--format", "table")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "on-chip memory M = 192 KiB (196,608 bytes): tiles of B_r = 64 queries × B_c = 192 keys; 715 of 1,408" in out
    assert "B_c = ⌈M / (4·d·itemsize)⌉, B_r = min(B_c, d)" in out
    for row in ("scores", "scaled", "masked", "weights", "output", "total", "decode 1 token"):
        assert f"\n  {row} " in out
    assert "KV cache: 512 bytes per token per layer" in out
    assert "softmax" not in out and "weights V" in out  # no stage's table, only the counts


def test_json_reads_back_exactly(run, problem_file, tmp_path):
    path = problem_file({"Q": [[1, 0], [0, 1], [1, 1]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]],
                         "mask": "causal_lower_right"})
    doc = run.json("compute", path, "--cost", "--sram", "128B")
    found = doc["cost"]
    assert found["sram"] == 128 and (found["block_rows"], found["block_cols"]) == (2, 2)
    assert found["naive"]["stages"]["scores"] == {"flops": 2 * 3 * 2 * 2, "read": (3 + 2) * 2 * 8,
                                                  "written": 3 * 2 * 8, "intensity": 24 / 128}
    assert found["tiled"]["stages"]["scaled"]["intensity"] is None
    written = tmp_path / "cost.json"
    written.write_text(json.dumps(doc))
    assert run("compute", written, "--cost", "-f", "json").exit_code == 0  # read back without attention
    assert run("compute", written, "-f", "json").exit_code == 0  # and beside the stages
    doc["cost"]["tiled"]["total"]["flops"] += 1
    written.write_text(json.dumps(doc))
    assert_error(run("compute", written, "--cost", "-f", "json"), "cost.tiled.total.flops is",
                 "but recomputing gives")
    doc["cost"]["sram"] = "big"
    written.write_text(json.dumps(doc))
    assert_error(run("compute", written, "--cost"), "cost.sram is")


def test_markdown_and_rich_views():
    p = problem(64, 8, title="a | title")
    found = cost.cost(p, 1024)
    text = markdown(p, found)
    assert "| scores |" in text and "a \\| title" in text
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(CostView(p, found))
    assert "tiles of B_r = 8 queries × B_c = 8 keys" in console.file.getvalue()


@pytest.mark.parametrize("args, fragments", [
    (("--sram", "12XB"), ("--sram", "is not a size")),
    (("--sram", "0"), ("--sram", "from 1 to 1 TiB")),
    (("--sram", "0.5B"), ("--sram", "whole number of bytes")),
    (("--stages", "weights"), ("--cost", "--stages would be ignored")),
    (("--tiles", "2,2"), ("--cost", "--tiles would be ignored")),
    (("--explain",), ("--cost", "--explain would be ignored")),
    (("--format", "latex"), ("--cost", "--format latex holds", "use --format table, json or markdown")),
    (("--format", "html"), ("--cost", "--format html holds", "use --format table, json or markdown")),
])
def test_errors(run, problem_file, args, fragments):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0]], "V": [[1, 2]]})
    assert_error(run("compute", path, "--cost", *args), *fragments)


def test_sram_needs_cost(run, problem_file):
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0]], "V": [[1, 2]]})
    assert_error(run("compute", path, "--sram", "1KiB"), "--sram", "add --cost")


def test_an_added_stage_is_refused_by_name_until_it_has_a_count(monkeypatch, run, problem_file):
    """The stage table's throwaway stage (tests/test_stages.py): --cost refuses it by name (a stage
    needs its line in cost.COUNTS), and counts it once it has one."""
    from attncli.stages import table as stages
    from tests.test_stages import DOUBLED, insert

    insert(monkeypatch, DOUBLED)
    path = problem_file({"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]]})
    assert_error(run("compute", path, "--cost"), "doubled", "no cost count")
    monkeypatch.setitem(cost.COUNTS, "doubled", cost.COUNTS["scaled"])
    doc = run.json("compute", path, "--cost")
    rows = list(doc["cost"]["naive"]["stages"])  # one row per stage the problem has, in the table's order
    assert "doubled" in rows and rows == [s.name for s in stages.present(build_problem(json.loads(path.read_text())))]


def test_the_core_names_no_option():
    with pytest.raises(cost.InputError) as raised:
        cost.parse_size("big")
    assert "--" not in str(raised.value) and raised.value.field == "sram"


def test_the_softmax_counts_by_hand():
    """N = 256, d = 64, float32, M = 16 KiB: B_r = B_c = 16, 16 × 16 tiles. Naive: max, − max, exp,
    Σ, ÷ on every cell (5·N²) plus scaled (N²). Tiled, per cell rowmax, − m, exp, rowsum (4·N²); per
    row and tile m, alpha (2), ℓ (2) (5·N·16); per row lse = m + ln ℓ (2·N), written."""
    n = 256
    found = cost.cost(problem(n, 64), 16 << 10)
    assert found.tiling.row_steps == n * 16 and found.tiling.cells == n * n
    assert found.naive["weights"] == cost.Count(5 * n * n, 4 * n * n, 4 * n * n)
    assert found.tiled["weights"] == cost.Count(4 * n * n + 5 * n * 16 + 2 * n, 0, 4 * n)
    assert found.total("naive").flops == 4 * n * n * 64 + n * n + 5 * n * n


def test_a_bias_and_a_mask_matrix_are_read_for_the_tiles_computed():
    """A bias is one number a cell and a given mask one byte, read by the naive pass for every cell
    and by the tiled one for the tiles it computes (here all: the matrix hides no whole block)."""
    n = 64
    found = cost.cost(problem(n, 8, "float64", bias=np.zeros((n, n)), mask=np.ones((n, n), bool)), 1 << 10)
    assert found.naive["masked"].read == n * n * (8 + 8 + 1)
    assert found.tiled["masked"].read == n * n * (8 + 1)
    alibi = cost.cost(problem(n, 8, "float64", heads=2, alibi=True), 1 << 10)
    assert alibi.tiled["masked"] == cost.Count(2 * 4 * n * n)  # −slope·|q − k| + on chip, nothing read


def test_the_key_tile_is_the_ceiling_of_sram_over_4_d_itemsize():
    """Mutation: B_c = M // (4·d·itemsize), the floor: 196609 bytes over 4·64·4 is 192.001, so 193."""
    problem = build_problem({"Q": np.zeros((1024, 64)), "K": np.zeros((1024, 64)), "V": np.zeros((1024, 64)),
                             "dtype": "float32"})
    assert cost.cost(problem, 196609).tiling.block_cols == 193
    assert cost.cost(problem, 196608).tiling.block_cols == 192
