"""How the 30 answer files of tests/classes/causal/ were made (run once; the files are kept as
written). Each learner works the homework in problem.json by hand, with their own slip, and
writes it down as learners do: fixed decimals, strings, CSV, aliases, −∞ spelled their way.
The numbers are computed here with numpy alone, never with attncli.

    python tests/classes/make_causal.py
"""

import json
import math
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent / "causal"
Q = np.array([[1, 0], [0, 2], [1, 1]], float)
K = np.array([[2, 0], [1, 1], [0, 1]], float)
V = np.array([[1, 0], [0, 1], [2, -1]], float)
SEES = np.tril(np.ones((3, 3), bool))
PROBLEM = {"title": "Homework 3, problem 1: causal attention over three words",
           "Q": Q.tolist(), "K": K.tolist(), "V": V.tolist(), "mask": "causal",
           "query_labels": ["the", "cat", "sat"], "key_labels": ["the", "cat", "sat"],
           "ask": ["scores", "scaled", "masked", "weights", "output"], "decimals": 2}


def softmax(x, axis=-1):
    top = np.where(np.isfinite(x), x, -np.inf).max(axis=axis, keepdims=True)
    e = np.where(np.isfinite(x), np.exp(x - np.where(np.isfinite(top), top, 0)), 0.0)
    total = e.sum(axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def work(scale=1 / math.sqrt(2), rounding=None, **slips):
    """Every stage as one learner computes it; `rounding`: the decimals each stage is rounded to
    before the next step (the textbook's method); `slips`: a stage → its value from the stages so far."""
    r = (lambda x: np.round(x, rounding)) if rounding is not None else (lambda x: x)
    out = {}
    out["scores"] = r(slips["scores"](out) if "scores" in slips else Q @ K.T)
    out["scaled"] = r(slips["scaled"](out) if "scaled" in slips else out["scores"] * scale)
    out["masked"] = r(slips["masked"](out) if "masked" in slips else np.where(SEES, out["scaled"], -np.inf))
    out["weights"] = r(slips["weights"](out) if "weights" in slips else softmax(out["masked"]))
    out["output"] = r(slips["output"](out) if "output" in slips else out["weights"] @ V)
    return out


def cells(x, decimals=4, minus_infinity="-inf", strings=False):
    """A matrix as written: numbers with fixed decimals (JSON text, so 0.80 stays 0.80), −∞ spelled."""
    def one(v):
        if np.isneginf(v):
            return minus_infinity
        text = f"{v:.{decimals}f}"
        return f'"{text}"' if strings else text
    return "[" + ", ".join("[" + ", ".join(one(v) for v in row) + "]" for row in np.atleast_2d(x)) + "]"


def document(stages, decimals=4, names=None, extra=None, minus_infinity='"-inf"', strings=False, indent="  "):
    """JSON text as a learner types it, one key per line."""
    names = names or {}
    lines = [f'{indent}"{key}": "{value}"' for key, value in (extra or {}).items()]
    for stage, values in stages.items():
        places = decimals[stage] if isinstance(decimals, dict) else decimals
        lines.append(f'{indent}"{names.get(stage, stage)}": {cells(values, places, minus_infinity, strings)}')
    return "{\n" + ",\n".join(lines) + "\n}\n"


def csv_sheet(stages):
    """The worksheet's grids copied into a spreadsheet: a line naming the stage, a header of keys,
    rows labelled by query; a blocked cell left empty."""
    words = PROBLEM["key_labels"]
    out = []
    for stage, values in stages.items():
        out.append(stage)
        columns = words if values.shape[1] == 3 else ["0", "1"]
        out.append("," + ",".join(columns))
        for word, row in zip(PROBLEM["query_labels"], values):
            out.append(word + "," + ",".join("" if np.isneginf(v) else f"{v:.4f}" for v in row))
    return "\n".join(out) + "\n"


def main():
    HERE.mkdir(exist_ok=True)
    (HERE / "problem.json").write_text(json.dumps(PROBLEM, indent=1) + "\n")
    exact = work()
    files = {
        "01_ada.json": document(exact),
        "02_ben.json": document(exact, 2),
        "03_cai.json": document(work(rounding=4)),
        "04_dee.json": document(work(scale=1.0)),  # forgot √d_k
        "05_eve.json": document(work(masked=lambda s: s["scaled"])),  # no mask
        "06_fay.json": document(work(masked=lambda s: np.where(SEES, s["scaled"], 0.0))),  # 0 for −∞
        "07_gus.json": document(exact | {"weights": exact["weights"] * 100}, {"scores": 0, "scaled": 4, "masked": 4,
                                                                            "weights": 2, "output": 4}),
        "08_hal.json": document(exact | {"weights": exact["weights"].T}),
        "09_ivy.json": document(work(), 1),  # every stage to one decimal, from a calculator's numbers
        "10_jon.json": document(work(scale=0.71)),  # 1/√2 rounded to 0.71 before multiplying
        "11_kim.json": document(work(weights=lambda s: np.where(np.isfinite(s["masked"]), np.exp(s["masked"]), 0))),
        "12_lea.json": document(work(output=lambda s: SEES.astype(float) @ V)),  # Σ V of the keys seen
        "13_max.json": document(work(output=lambda s: s["weights"] @ K)),  # K for V
        "14_ned.json": document(exact | {"masked": exact["masked"] - exact["masked"].max(axis=1, keepdims=True)}),
        "15_oli.json": document(exact, names={"scaled": "scaled_scores", "weights": "attention_weights",
                                              "output": "context"}),
        "16_pam.csv": csv_sheet(exact),
        "17_quinn.json": document({k: exact[k] for k in ("weights", "output")}),
        "18_rae.json": "",
        "19_sam.json": document(exact).replace("]]\n}", "]],\n}"),  # a trailing comma
        "20_tia.json": document(work(scale=0.5)),  # divided by d_k
        "21_uma.json": document(work(scores=lambda s: Q @ K.T + np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1]]))),
        "22_vic.json": document(work(weights=lambda s: softmax(s["masked"], axis=0))),  # columns
        "23_wes.json": document(exact, 2, minus_infinity="-1e9"),
        "24_xia.json": document(exact | {"weights": np.array([[1, 0, 0], [0, 1, 0], [0.5, 0.5, 0]]),
                                         "output": np.array([[1, 0], [0, 1], [0.5, 0.5]])},
                                {"scores": 4, "scaled": 4, "masked": 4, "weights": 1, "output": 4}),
        "25_yan.json": document(exact | {"output": exact["output"].T}),
        "26_zoe.json": document(work(weights=lambda s: np.round(softmax(s["masked"]), 1)),
                                {"scores": 4, "scaled": 4, "masked": 4, "weights": 1, "output": 4}),
        "27_abe.json": document(exact | {"weights": softmax(np.round(exact["masked"], 1)),
                                         "output": softmax(np.round(exact["masked"], 1)) @ V}),
        "28_bea.json": document(exact, extra={"name": "Bea Quist", "workings": "see the back of page 2"}),
        "29_cy.json": '{"heads": [\n' + document(exact, 2, strings=True, indent="    ").rstrip() + "\n]}\n",
        "30_dot.json": document(work(masked=lambda s: np.where(~SEES, s["scaled"], -np.inf))),  # mask inverted
    }
    for name, text in files.items():
        (HERE / name).write_text(text)


if __name__ == "__main__":
    main()
