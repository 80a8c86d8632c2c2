"""A GGUF file (llama.cpp's format: one file holding the config as metadata, the tokenizer and the
tensors, most of them quantized) checked before transformers reads it, as capture/directory.py checks
a model directory. The header is parsed here with every count and length bounded by the bytes
left in the file (a GGUF is someone else's file: a lying count must not make anything loop or
allocate), and every tensor's data must lie inside the file, so a truncated download is one error
naming the tensor and the bytes missing, not an error deep in the loading. A GGUF holds no code.

    magic "GGUF", version (2 or 3), tensor count, metadata count
    metadata: key (string), value type, value (scalars, strings, arrays of either)
    tensor infos: name, dims (1 to 4, fastest first), ggml type, offset in the data section
    data section, at the next multiple of general.alignment (32 unless it says)

What the capture needs from it: the architecture and `general.name`, the size of the dequantized
weights (for the memory guard, before anything is loaded), and each layer's attention tensors'
quantization types (the header says what the weights were dequantized from).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import mmap
import os
import stat
import struct
import sys
from dataclasses import dataclass

import gguf  # the ggml type table (GGML_QUANT_SIZES); transformers' GGUF loading reads files with it
import numpy as np

from attncli.base.errors import quote
from attncli.capture.families import CaptureError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 counted in 32 bits; llama.cpp has written 3 since 2023
SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_TEXT = 1 << 16  # a key, a tensor name or a kept string: more is not a model's metadata
KEPT_ARRAY = 4096  # numeric arrays up to this length are kept (per-layer head counts); longer ones counted
MAX_ELEMENTS = 1 << 48
# The attention tensors of a layer, by llama.cpp's names, as attncli's keys.
ATTENTION = {"attn_q": "W_Q", "attn_k": "W_K", "attn_v": "W_V", "attn_qkv": "W_QKV", "attn_output": "W_O"}
UNQUANTIZED = ("F32", "F16", "BF16", "F64")


@dataclass(frozen=True)
class Tensor:
    """One tensor's header: its ggml type's name (Q4_1), shape (torch's order) and elements."""

    kind: str
    shape: tuple[int, ...]
    elements: int


@dataclass(frozen=True)
class Gguf:
    """A checked GGUF file: its metadata (scalars and strings; arrays longer than KEPT_ARRAY, and
    arrays of strings, as their length) and its tensors by name."""

    path: str
    version: int
    metadata: dict
    tensors: dict[str, Tensor]

    @property
    def architecture(self) -> str:
        return self.metadata["general.architecture"]

    @property
    def name(self) -> str | None:
        """`general.name`, when the file gives one (the model's name, as its converter wrote it)."""
        value = self.metadata.get("general.name")
        return value.strip() if isinstance(value, str) and value.strip() else None

    @property
    def weights(self) -> int:
        """Every tensor's elements: the numbers transformers dequantizes."""
        return sum(t.elements for t in self.tensors.values())

    def quantization(self, layer: int) -> dict[str, str]:
        """The ggml types layer `layer`'s attention weights are stored in: {"W_Q": "Q4_1", …}."""
        found = {}
        for part, key in ATTENTION.items():
            tensor = self.tensors.get(f"blk.{layer}.{part}.weight")
            if tensor is not None:
                found[key] = tensor.kind
        return found


def dequantized(types: dict[str, str], which: bool = True) -> str:
    """The header's words for a layer's types: "dequantized from Q4_1", or each weight's when they
    differ ("dequantized from Q4_K (W_Q, W_K, W_O) and Q6_K (W_V)"); unquantized ones are "read from"."""
    kinds = list(dict.fromkeys(types.values()))
    if not kinds:
        return "read from GGUF"
    verb = "read from GGUF" if all(k in UNQUANTIZED for k in kinds) else "dequantized from GGUF"
    if len(kinds) == 1:
        return f"{verb} {kinds[0]}"
    parts = [f"{kind} ({', '.join(k for k, v in types.items() if v == kind)})" if which else kind for kind in kinds]
    return f"{verb} {', '.join(parts[:-1])} and {parts[-1]}"


def is_gguf(path: str) -> bool:
    """Whether `path` is a regular file starting with GGUF's magic bytes."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def read(path: str) -> Gguf:
    """The file's header, checked; raises CaptureError naming the file, and the key or tensor at fault."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # before opening: a FIFO would block
            raise CaptureError("is not a regular file; expected a .gguf file", path)
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 24:
                raise CaptureError(f"is {size} bytes; a GGUF file starts with a 24-byte header (GGUF, version, "
                                   "counts)", path)
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as blob:
                return _parse(blob, size, path)
    except OSError as error:
        raise CaptureError(f"cannot read: {error.strerror or error}", path) from None


class _Reader:
    """Reads the header's values in order, each read bounded by the bytes left."""

    def __init__(self, blob, size: int, path: str):
        self.blob, self.size, self.path, self.pos = blob, size, path, 0

    def need(self, count: int, what: str) -> None:
        if count > self.size - self.pos:
            raise CaptureError(f"is truncated or damaged: {what} needs {count:,} bytes at byte {self.pos:,}, and the "
                               f"file has {self.size - self.pos:,} left ({self.size:,} bytes in all)", self.path)

    def unpack(self, fmt: str, what: str):
        width = struct.calcsize(fmt)
        self.need(width, what)
        value = struct.unpack_from(fmt, self.blob, self.pos)[0]
        self.pos += width
        return value

    def count(self, what: str, least: int) -> int:
        """A u64 count of things of at least `least` bytes each: no more than the bytes left can hold."""
        found = self.unpack("<Q", what)
        if found > (self.size - self.pos) // max(least, 1):
            raise CaptureError(f"is truncated or damaged: {what} is {found:,}, more than the {self.size - self.pos:,} "
                               "bytes left can hold", self.path)
        return found

    def text(self, what: str, keep: bool = True) -> str | int:
        """A string (u64 length, UTF-8 bytes): the text, or its length when not kept (or too long)."""
        length = self.count(f"the length of {what}", 1)
        start, self.pos = self.pos, self.pos + length
        if not keep or length > MAX_TEXT:
            return length
        try:
            return bytes(self.blob[start:self.pos]).decode("utf-8")
        except UnicodeDecodeError:
            raise CaptureError(f"is damaged: {what} at byte {start:,} is not UTF-8 text", self.path) from None

    def value(self, kind: int, key: str, depth: int = 0):
        if kind in SCALARS:
            return self.unpack(SCALARS[kind], f"the value of {key}")
        if kind == STRING:
            return self.text(f"the value of {key}")
        if kind == ARRAY and depth == 0:
            inner = self.unpack("<I", f"the array type of {key}")
            if inner not in SCALARS and inner != STRING:
                raise CaptureError(f"is damaged: {key} is an array of value type {inner}; GGUF arrays hold numbers "
                                   "or strings", self.path)
            length = self.count(f"the length of {key}", struct.calcsize(SCALARS[inner]) if inner in SCALARS else 8)
            if inner in SCALARS and length <= KEPT_ARRAY:
                return [self.value(inner, key, 1) for _ in range(length)]
            if inner in SCALARS:
                self.pos += length * struct.calcsize(SCALARS[inner])
            else:
                for _ in range(length):  # a vocabulary: walked, not decoded
                    self.text(f"an entry of {key}", keep=False)
            return length
        raise CaptureError(f"is damaged: {key} has value type {kind}; GGUF knows types 0 to 12", self.path)


def _parse(blob, size: int, path: str) -> Gguf:
    r = _Reader(blob, size, path)
    if bytes(blob[:4]) != MAGIC:
        raise CaptureError(f"does not start with GGUF's magic bytes (it starts {bytes(blob[:4])!r}); expected a GGUF "
                           "file, as llama.cpp writes them", path)
    r.pos = 4
    version = r.unpack("<I", "the version")
    if version not in VERSIONS:
        raise CaptureError(f"is GGUF version {version}; attn capture reads versions {' and '.join(map(str, VERSIONS))}",
                           path)
    tensor_count = r.count("the tensor count", 24)
    metadata_count = r.count("the metadata count", 12)
    metadata = {}
    for _ in range(metadata_count):
        key = r.text("a metadata key")
        if not isinstance(key, str):
            raise CaptureError(f"is damaged: a metadata key at byte {r.pos:,} is {key:,} bytes long", path)
        if key in metadata:
            raise CaptureError(f"is damaged: metadata key {quote(key)} is given twice", path)
        metadata[key] = r.value(r.unpack("<I", f"the value type of {key}"), key)
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise CaptureError("has no general.architecture (a text, as \"llama\"): nothing says what model it holds", path)
    alignment = metadata.get("general.alignment", 32)
    if type(alignment) is not int or alignment < 1 or alignment & (alignment - 1) or alignment > 1 << 20:
        raise CaptureError(f"general.alignment is {alignment!r}; expected a power of two (32 by default)", path)
    infos = [_tensor_info(r) for _ in range(tensor_count)]
    start = -(-r.pos // alignment) * alignment
    tensors = {}
    for name, dims, kind, offset in infos:
        tensors[name] = _tensor(name, dims, kind, offset, start, alignment, r)
    return Gguf(path, version, metadata, tensors)


def _tensor_info(r: _Reader) -> tuple[str, tuple[int, ...], int, int]:
    name = r.text("a tensor name")
    if not isinstance(name, str):
        raise CaptureError(f"is damaged: a tensor name at byte {r.pos:,} is {name:,} bytes long", r.path)
    count = r.unpack("<I", f"the dimensions of tensor {name}")
    if not 1 <= count <= MAX_DIMS:
        raise CaptureError(f"is damaged: tensor {quote(name)} has {count} dimensions; ggml tensors have 1 to {MAX_DIMS}",
                           r.path)
    dims = tuple(r.unpack("<Q", f"a dimension of tensor {name}") for _ in range(count))
    kind = r.unpack("<I", f"the type of tensor {name}")
    return name, dims, kind, r.unpack("<Q", f"the offset of tensor {name}")


def _tensor(name: str, dims: tuple[int, ...], kind: int, offset: int, start: int, alignment: int, r: _Reader) -> Tensor:
    """A tensor's header checked: a known ggml type, whole blocks, aligned, and its bytes inside the file."""
    try:
        ggml = gguf.GGMLQuantizationType(kind)
        block, block_bytes = gguf.GGML_QUANT_SIZES[ggml]
    except (ValueError, KeyError):
        raise CaptureError(f"tensor {quote(name)} has ggml type {kind}, which the gguf package does not know (a "
                           "newer quantization, or a damaged file)", r.path) from None
    elements = math.prod(dims)
    if not 1 <= elements <= MAX_ELEMENTS or dims[0] % block:
        raise CaptureError(f"is damaged: tensor {quote(name)} has dimensions {list(dims)}; {ggml.name} stores rows of "
                           f"whole blocks of {block}", r.path)
    if offset % alignment:
        raise CaptureError(f"is damaged: tensor {quote(name)} starts at offset {offset:,}, not a multiple of the "
                           f"alignment {alignment}", r.path)
    end = start + offset + elements // block * block_bytes
    if end > r.size:
        raise CaptureError(f"is truncated: tensor {quote(name)} ends at byte {end:,}, and the file has {r.size:,} "
                           f"bytes ({end - r.size:,} missing); download it again", r.path)
    return Tensor(ggml.name, tuple(reversed(dims)), elements)


_faster = {"depth": 0, "readers": {}, "values": {}}


class _PlainReader(gguf.GGUFReader):
    """gguf's reader over a plain numpy view of its memory map: the same bytes and results, without
    numpy.memmap's bookkeeping on each of the hundreds of thousands of slices it takes (2.5 times
    faster on a 49,152-token vocabulary)."""

    @property
    def data(self):
        return self._plain

    @data.setter
    def data(self, value):
        self._plain = value.view(np.ndarray) if isinstance(value, np.memmap) else value


@contextlib.contextmanager
def faster():
    """While it lasts, transformers' GGUF loading without its repeated work and, off a terminal,
    without its progress bar; the same results. Its legacy path (Llama and most architectures,
    transformers 5.x) parses the whole file with gguf.GGUFReader once for the config, once for the
    tokenizer's config and once for the model (a few seconds each: a reader makes one numpy view
    per vocabulary entry), then turns every value of it into Python (the vocabulary too) each time,
    and builds gguf's tensor-name map once per module of the model (a third of its loading time).
    Here a file's reader (by path, size and modification time) is made once, each of its values
    turned into Python once (by the identity of the reader's part, which the reader keeps alive),
    and gguf's name map is cached: each a pure function of its arguments. The names are looked up
    on their modules when transformers calls them: a transformers that imports them otherwise is
    only slower. Its dequantizing loop draws a tqdm bar of its own, which transformers'
    disable_progress_bar does not reach: it is shown on a terminal only."""
    if _faster["depth"] == 0:
        # Imported here, for start-up: transformers' legacy GGUF module loads every tokenizer
        # converter (a second and a half), which only a GGUF's loading needs.
        legacy = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
        saved = (gguf.GGUFReader, gguf.get_tensor_name_map, getattr(legacy, "tqdm", None),
                 getattr(legacy, "_gguf_parse_value", None))
        _, names, bar, parse = saved

        def cached_reader(path, mode="r"):
            status = os.stat(path)
            key = (os.path.realpath(path), status.st_size, status.st_mtime_ns, status.st_ino, mode)
            if key not in _faster["readers"]:
                _faster["readers"].clear()  # one file at a time: a reader holds its whole vocabulary
                _faster["values"].clear()
                _faster["readers"][key] = _PlainReader(path, mode)
            return _faster["readers"][key]

        def cached_value(value, types):
            key = (id(value), tuple(types) if isinstance(types, list) else types)
            if key not in _faster["values"]:
                _faster["values"][key] = (value, parse(value, types))  # the part kept: its id stays its own
            return _faster["values"][key][1]

        _faster["restore"] = (legacy, saved)
        gguf.GGUFReader, gguf.get_tensor_name_map = cached_reader, functools.lru_cache(maxsize=8)(names)
        if bar is not None:
            legacy.tqdm = functools.partial(bar, disable=not sys.stderr.isatty())
        if parse is not None:
            legacy._gguf_parse_value = cached_value
    _faster["depth"] += 1
    try:
        yield
    finally:
        _faster["depth"] -= 1
        if _faster["depth"] == 0:
            legacy, (gguf.GGUFReader, gguf.get_tensor_name_map, bar, parse) = _faster.pop("restore")
            if bar is not None:
                legacy.tqdm = bar
            if parse is not None:
                legacy._gguf_parse_value = parse
            _faster["readers"].clear()
            _faster["values"].clear()
