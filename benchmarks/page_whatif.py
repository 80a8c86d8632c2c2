"""What the page's what-if costs: the page's size, and its time to interactive in headless Chromium,
with the what-if and without it (the same page with its data replaced by the one line saying why),
as ratios measured in one run, the two pages opened alternately; then, with it, the time of its first
use (its data read and the original stages computed) and of one edit, inside the page.

    python benchmarks/page_whatif.py                                  # the bundled samples
    python benchmarks/page_whatif.py CAPTURE.npz --layer 4 --repeat 7 # a captured layer too

Needs playwright and /usr/bin/chromium (as tests/test_page_browser.py). The machine's load is
printed: a shared machine's times are noisy, the ratios less so."""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from typer.testing import CliRunner

from attncli.cli import app
from attncli.render import page_whatif

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = [ROOT / "samples" / name for name in ("scooter.json", "multihead.json", "sinks.json", "rope.json")]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]


def write(source: Path, extra: list[str], folder: Path, with_whatif: bool) -> Path:
    """The page of `source`, with the what-if or with its refusal line in its place."""
    path = folder / f"{source.stem}-{'with' if with_whatif else 'without'}.html"
    real = page_whatif.refusal
    if not with_whatif:
        page_whatif.refusal = lambda trace, tiled=None: "measured without it"
    try:
        result = CliRunner().invoke(app, ["compute", str(source), *extra, "-o", str(path)])
    finally:
        page_whatif.refusal = real
    if result.exit_code != 0:
        sys.exit(result.stderr)
    return path


def opened(browser, path: Path) -> float:
    tab = browser.new_page()
    start = time.monotonic()
    tab.goto(path.resolve().as_uri())
    tab.wait_for_function("document.body.classList.contains('js')")
    took = time.monotonic() - start
    tab.close()
    return took


def in_page(browser, path: Path) -> tuple[float, float]:
    """(first use, one edit) in seconds, timed by the page's own clock."""
    tab = browser.new_page()
    tab.goto(path.resolve().as_uri())
    tab.wait_for_function("document.body.classList.contains('js')")
    first = tab.evaluate("(() => { const s = performance.now(); window.attnWhatIf.now(); return performance.now() - s; })()")
    tab.fill("#wi-value", "1.5")
    edit = tab.evaluate("""(() => { const s = performance.now();
        document.getElementById("wi-form").requestSubmit(); return performance.now() - s; })()""")
    assert tab.inner_text("#wi-status").startswith("recomputed"), tab.inner_text("#wi-status")
    tab.close()
    return first / 1000, edit / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("capture", nargs="?", help="a captured layer's file (attn capture … -o FILE.npz)")
    parser.add_argument("--layer", default="0")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; medians of {args.repeat} opens")
    sources = [(path, []) for path in SAMPLES] + ([(Path(args.capture), ["--layer", args.layer])] if args.capture else [])
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
        print(f"{'page':<16} {'size without':>12} {'with':>10} {'ratio':>6} {'open without':>13} {'with':>7} "
              f"{'ratio':>6} {'first use':>10} {'an edit':>8}")
        for source, extra in sources:
            pages = {w: write(source, extra, Path(folder), w) for w in (False, True)}
            times = {False: [], True: []}
            for n in range(args.repeat):
                for w in ((False, True) if n % 2 else (True, False)):
                    times[w].append(opened(browser, pages[w]))
            size = {w: pages[w].stat().st_size for w in pages}
            took = {w: statistics.median(times[w]) for w in times}
            first, edit = in_page(browser, pages[True])
            print(f"{source.stem:<16} {size[False] / 1e6:>10.2f}MB {size[True] / 1e6:>8.2f}MB {size[True] / size[False]:>6.2f} "
                  f"{took[False]:>12.3f}s {took[True]:>6.3f}s {took[True] / took[False]:>6.2f} {first:>9.3f}s {edit:>7.3f}s")
        browser.close()


if __name__ == "__main__":
    main()
