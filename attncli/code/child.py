"""What runs in the child process of one case: the learner's function, called once.

The child is a fork (of `zygote.py`'s server, or of an API user's process); `run` never returns:
it limits the child's memory, points stdin at /dev/null and stdout and stderr at a file, arms a
watchdog (faulthandler) that writes the stack to a file at the time limit and on a crash, loads
the learner's function, calls it with the case's arguments, and writes what it returned (arrays
as `.npy` members of an `.npz`, the rest as JSON) to the case's folder, then `os._exit`s.

THIS IS NOT A SANDBOX. The learner's code runs with the user's permissions, as pytest and nbgrader
run it: it can read and write the user's files. The limits here stop accidents (a loop, a huge
allocation, a crash), not an attacker.

Only numpy here (and torch or jax on that path, imported by the caller); the parent reads the
folder back (`runner.py`), and never unpickles anything the child wrote.
"""

from __future__ import annotations

import ast
import builtins
import faulthandler
import importlib
import importlib.util
import json
import math
import os
import sys
import sysconfig
import traceback

import numpy as np

try:
    import resource  # POSIX only
except ImportError:  # pragma: no cover
    resource = None

RESULT = "result.json"  # what happened, and the returned value's structure
ARRAYS = "result.npz"  # the returned arrays, by the structure's references
LOADED = "loaded"  # written once the function is loaded: a failure after it is the call's
PRINTED = "printed.txt"  # the learner's stdout and stderr
FAULTS = "faults.txt"  # faulthandler's stack at a crash or at the time limit
INPUTS = "inputs.npz"  # the arguments' arrays (written by the parent)
CALL = "call.json"  # the arguments in order (written by the parent)
SUBMISSION = "_attn_submission"  # the module name a FILE.py is loaded as
MAX_ITEMS = 10_000  # a returned structure with more items than this is not read
MAX_DEPTH = 6
MIB = 1 << 20


def run(request: dict, function=None) -> None:
    """Run one case in this (child) process and `os._exit`. `request`: folder, spec (FILE.py:NAME
    or module:NAME; unused when `function` is given), timeout (s), memory (MiB, None: no limit),
    array (numpy, torch, jax) and forbid (module names)."""
    folder = request["folder"]
    status = {"stage": "load"}
    try:
        os.setsid()  # its own process group: the supervisor kills whatever it starts
    except OSError:
        pass
    try:
        _redirect(folder)
        faults = open(os.path.join(folder, FAULTS), "w", encoding="utf-8")  # noqa: SIM115 (kept open for faulthandler)
        faulthandler.enable(file=faults)
        faulthandler.dump_traceback_later(request["timeout"], exit=True, file=faults)
        _limit(request.get("memory"))
        forbidden: list[str] = []
        status["forbidden"] = forbidden
        names = tuple(request.get("forbid") or ())
        if function is None:
            function = load(request["spec"], names, forbidden)
        else:
            _guard(names, forbidden, _file_of(function))
        status["file"] = _file_of(function)
        status["stage"] = "call"
        open(os.path.join(folder, LOADED), "w").close()
        arguments = _arguments(folder, request.get("array", "numpy"))
        returned = function(*arguments)
        status["stage"] = "return"
        arrays: dict[str, np.ndarray] = {}
        status["value"] = _plain(returned, arrays, 0)
        np.savez(os.path.join(folder, ARRAYS), **arrays)
        status["stage"] = "done"
    except BaseException as error:  # noqa: BLE001 (SystemExit and KeyboardInterrupt too: each is a mark)
        status["error"] = _error(error, status.get("file") or _spec_file(request.get("spec")))
    try:
        with open(os.path.join(folder, RESULT), "w", encoding="utf-8") as out:
            json.dump(status, out, allow_nan=False, default=str)
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(0)


def _redirect(folder: str) -> None:
    """stdin from /dev/null (input() gets EOF, never waits); stdout and stderr to PRINTED."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    printed = os.open(os.path.join(folder, PRINTED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(printed, 1)
    os.dup2(printed, 2)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.stderr = sys.stdout


def _limit(memory: int | None) -> None:
    """At most `memory` MiB more address space than the child has now (numpy, torch already
    mapped); no core file."""
    if resource is None:  # pragma: no cover - Windows has no fork either
        return
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if memory is None:
        return
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            used = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # not Linux: RLIMIT_AS may not be enforced there; the limit is best effort
        used = 0
    limit = used + memory * MIB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _spec_file(spec: str | None) -> str | None:
    if not spec:
        return None
    path, _, _ = spec.rpartition(":")
    return os.path.abspath(path) if path.endswith(".py") else None


def _file_of(function) -> str | None:
    code = getattr(function, "__code__", None) or getattr(type(function).__call__, "__code__", None)
    return os.path.abspath(code.co_filename) if code is not None else None


def load(spec: str, forbid: tuple[str, ...] = (), forbidden: list | None = None):
    """The function named by `FILE.py:NAME` (the file loaded as a module of its own, its folder
    first on sys.path so that it can import its neighbours) or `module:NAME`."""
    where, _, name = spec.rpartition(":")
    if where.endswith(".py"):
        path = os.path.abspath(where)
        folder = os.path.dirname(path)
        sys.path.insert(0, folder)
        _guard(forbid, forbidden if forbidden is not None else [], path)
        found = importlib.util.spec_from_file_location(SUBMISSION, path)
        module = importlib.util.module_from_spec(found)
        sys.modules[SUBMISSION] = module
        found.loader.exec_module(module)
    else:
        _guard(forbid, forbidden if forbidden is not None else [], None)
        module = importlib.import_module(where)
    target = module
    for part in name.split("."):
        if not hasattr(target, part):
            defined = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                             and getattr(v, "__module__", None) == module.__name__)
            raise LookupError(f"no function {name!r} in {os.path.basename(where) if where.endswith('.py') else where}"
                              + (f" (it defines {', '.join(defined[:8])})" if defined else ""))
        target = getattr(target, part)
    if isinstance(target, type):  # a class (Raschka's SelfAttention): called on the arguments as an instance's forward
        raise TypeError(f"{name} is a class; give a function (a def) that calls it")
    if not callable(target):
        raise TypeError(f"{name} is not a function but {type(target).__name__}")
    return target


def _matches(name: str, forbid: tuple[str, ...]) -> str | None:
    return next((f for f in forbid if name == f or name.startswith(f + ".")), None)


def _guard(forbid: tuple[str, ...], forbidden: list, path: str | None) -> None:
    """An import hook: an import of a forbidden module (or from it) by the learner's code (the
    folder of `path`, or any code outside Python's and the site's libraries when `path` is None)
    is recorded in `forbidden` and fails with ImportError. Also `importlib.import_module`."""
    if not forbid:
        return
    for name in list(sys.modules):  # a cached module is imported by a lookup that no hook sees
        if _matches(name, forbid) and not name.startswith("attncli.code"):
            sys.modules.pop(name, None)
    folder = os.path.dirname(path) if path else None
    paths = sysconfig.get_paths()
    libraries = tuple({paths["stdlib"], paths["purelib"], paths["platlib"]})
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # attncli itself

    def learners(globals_) -> bool:
        file = (globals_ or {}).get("__file__") or ""
        if file and os.path.abspath(file).startswith(ours + os.sep):
            return False
        if not file:  # a C module's import, or code without a file: the learner's only as their module or __main__
            return (globals_ or {}).get("__name__") in (SUBMISSION, "__main__")
        if folder is not None:
            return os.path.abspath(file).startswith(folder + os.sep)
        return not file.startswith(libraries)

    def check(name: str, fromlist, globals_) -> None:
        if not learners(globals_):
            return
        for full in [name] + [f"{name}.{item}" for item in fromlist or () if isinstance(item, str)]:
            hit = _matches(full, forbid)
            if hit:
                forbidden.append(full)
                raise ImportError(f"import of {full} is forbidden here (the teacher forbids {hit})")

    original_import, original_module = builtins.__import__, importlib.import_module

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0:
            check(name, fromlist, globals)
        return original_import(name, globals, locals, fromlist, level)

    def guarded_module(name, package=None):
        if not name.startswith("."):
            check(name, (), sys._getframe(1).f_globals)
        return original_module(name, package)

    builtins.__import__ = guarded_import
    importlib.import_module = guarded_module


def forbidden_names(path: str, forbid: tuple[str, ...]) -> list[str]:
    """The forbidden dotted names a source file mentions: imports, and attribute chains read
    through an imported name (`F.scaled_dot_product_attention` after `import torch.nn.functional
    as F`, `torch.nn.functional.softmax` after `import torch`), whether run or not."""
    try:
        with open(path, "rb") as source:
            tree = ast.parse(source.read(1 << 22))
    except (OSError, SyntaxError, ValueError):
        return []
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                aliases[alias.asname or alias.name.partition(".")[0]] = alias.name if alias.asname else \
                    alias.name.partition(".")[0]
                found.append(alias.name)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                found.append(f"{node.module}.{alias.name}")
    nested = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in nested:  # each chain once, whole
            parts, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in aliases:
                found.append(".".join([aliases[inner.id]] + parts[::-1]))
    hits = []
    for name in found:
        if _matches(name, forbid) and name not in hits:
            hits.append(name)
    return hits


def _arguments(folder: str, array: str) -> list:
    """The case's arguments in order: arrays (as numpy, torch or jax arrays), flags and numbers."""
    with open(os.path.join(folder, CALL), encoding="utf-8") as call:
        listed = json.load(call)
    path = os.path.join(folder, INPUTS)
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    convert = _converter(array)
    return [convert(arrays[item["array"]]) if "array" in item else item["value"] for item in listed]


def _converter(array: str):
    if array == "torch":
        # Imported here, for start-up: torch takes 1.5 s to load, and only the torch arrays' path needs it.
        import torch

        return lambda a: torch.from_numpy(np.ascontiguousarray(a))
    if array == "jax":
        # Imported here, for start-up: jax is loaded only on the jax arrays' path.
        import jax.numpy as jnp

        return jnp.asarray
    return lambda a: a


def _as_numpy(value) -> np.ndarray | None:
    """A torch tensor, a jax array or a numpy array as numpy; None for anything else."""
    if isinstance(value, np.ndarray):
        return value
    module = type(value).__module__ or ""
    if module.startswith("torch") and hasattr(value, "detach"):
        tensor = value.detach().cpu()
        if str(tensor.dtype) in ("torch.bfloat16", "torch.float16"):
            tensor = tensor.float()
        return tensor.numpy()
    if module.startswith(("jax", "jaxlib")) and hasattr(value, "__array__"):
        return np.asarray(value)
    return None


def _plain(value, arrays: dict, depth: int):
    """The returned value as JSON, its arrays in `arrays` by reference."""
    if depth > MAX_DEPTH:
        return {"kind": "other", "type": "a structure nested too deep"}
    array = _as_numpy(value)
    if array is not None:
        if array.dtype == object or array.dtype.kind not in "biuf":
            return {"kind": "other", "type": f"an array of {array.dtype}"}
        ref = f"a{len(arrays)}"
        arrays[ref] = np.ascontiguousarray(array)
        return {"kind": "array", "ref": ref, "module": type(value).__module__.partition(".")[0]}
    if isinstance(value, (bool, np.bool_)):
        return {"kind": "number", "value": bool(value)}
    if isinstance(value, (int, float, np.number)):
        number = float(value)
        return {"kind": "number", "value": number if math.isfinite(number) else repr(number)}
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_ITEMS:
            return {"kind": "other", "type": f"a {type(value).__name__} of {len(value)} items"}
        return {"kind": type(value).__name__ if type(value) in (list, tuple) else "tuple",
                "items": [_plain(item, arrays, depth + 1) for item in value]}
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS or not all(isinstance(key, str) for key in value):
            return {"kind": "other", "type": "a dict whose keys are not names"}
        return {"kind": "dict", "items": {key: _plain(item, arrays, depth + 1) for key, item in value.items()}}
    return {"kind": "other", "type": type(value).__name__}


def _error(error: BaseException, path: str | None) -> dict:
    """An exception as JSON: its type, message and the frames of the traceback (file, line,
    function), the last in the learner's file marked."""
    frames = traceback.extract_tb(error.__traceback__)
    listed = [{"file": f.filename, "line": f.lineno, "function": f.name} for f in frames]
    if isinstance(error, SyntaxError) and error.filename:  # the error's own place: the learner's line
        listed.append({"file": error.filename, "line": error.lineno or 0, "function": "<module>"})
    try:
        message = str(error)
    except Exception:  # noqa: BLE001 (a learner's exception whose __str__ fails)
        message = "(its message could not be read)"
    return {"type": type(error).__name__, "message": message[:2000], "frames": listed[-50:],
            "memory": isinstance(error, MemoryError)}
