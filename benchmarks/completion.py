"""Start-up cost of Typer's shell completion options (`attn --install-completion`).

    python benchmarks/completion.py

Runs `attn --version` 20 times with completion offered (as shipped) and 20 times with Typer's
`add_completion=False`, alternating, and prints median wall and CPU (user + sys) times. CPU time
is the steadier figure on a shared machine.
"""

import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from time import perf_counter

ROOT = Path(__file__).resolve().parent.parent
RUN = "import sys; sys.argv[0] = 'attn'; from attncli.cli import main; main()"
WITHOUT = ("import functools, typer\n"
           "init = typer.Typer.__init__\n"
           "typer.Typer.__init__ = functools.wraps(init)(lambda self, *a, **k: init(self, *a, **{**k, 'add_completion': False}))\n"
           + RUN)


def main(runs: int = 20) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cases = {"with completion": RUN, "without": WITHOUT}
    wall = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for i in range(runs):
        for name, code in (list(cases.items()) if i % 2 == 0 else list(cases.items())[::-1]):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = perf_counter()
            subprocess.run([sys.executable, "-c", code, "--version"], env=env, stdout=subprocess.DEVNULL, check=True)
            wall[name].append(perf_counter() - start)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[name].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    for name in cases:
        print(f"{name:16} wall {statistics.median(wall[name]) * 1000:6.1f} ms   "
              f"cpu {statistics.median(cpu[name]) * 1000:6.1f} ms")
    print(f"with ÷ without: wall {statistics.median(wall['with completion']) / statistics.median(wall['without']):.3f}, "
          f"cpu {statistics.median(cpu['with completion']) / statistics.median(cpu['without']):.3f}")


if __name__ == "__main__":
    main()
