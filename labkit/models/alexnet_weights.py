"""AlexNet's weights: a safe reader of the ``bvlc_alexnet.npy`` format, the re-layout for labkit, and
deterministic synthetic weights of the same shapes.

    raw = read_bvlc_npy(path)          # {layer: (W, b)} as in the file: conv W (kh, kw, cin/g, cout), fc (in, out)
    w = to_labkit(raw)                 # conv W (M, C/g, K, K) MCKK; fc6's rows in NCHW (c, h, w) order
    raw = synthetic_weights()          # the file's structure, seeded: when there is no weight file

The file (see ../shared/data/README.md) is a NumPy ``.npy`` of a 0-d object array: its body is a
Python 2 pickle of a dict ``layer -> [W, b]``.  The usual ``np.load(..., allow_pickle=True)`` runs
whatever the pickle says; this reader unpickles with an allow-list that can build only what the
format needs (NumPy arrays and dtypes: dicts, lists and strings need no class at all), and then
checks every key, shape and dtype.  A pickle that names anything else (``os.system``, ``eval``, a
class of any module) is refused before it is built, and a truncated file gets a clear error.
"""
from __future__ import annotations

import ast
import io
import os
import pickle
import struct
from pathlib import Path

import numpy as np

from ..errors import WeightFileError

__all__ = ["FILE_SHAPES", "FILE_SIZE", "WEIGHTS_ENV", "read_bvlc_npy", "check_raw", "to_labkit",
           "synthetic_weights", "fc6_rows_hwc_to_chw", "WeightFileError", "ArraysOnly", "PendingArray"]

WEIGHTS_ENV = "LABKIT_ALEXNET_WEIGHTS"   # where a real bvlc_alexnet.npy is, if anywhere
FILE_SIZE = 243_861_814                  # bytes of the real file

# The file's layers: W as stored (conv: kh, kw, cin per group, cout; fc: in, out) and b.
FILE_SHAPES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "conv1": ((11, 11, 3, 96), (96,)),
    "conv2": ((5, 5, 48, 256), (256,)),
    "conv3": ((3, 3, 256, 384), (384,)),
    "conv4": ((3, 3, 192, 384), (384,)),
    "conv5": ((3, 3, 192, 256), (256,)),
    "fc6": ((9216, 4096), (4096,)),
    "fc7": ((4096, 4096), (4096,)),
    "fc8": ((4096, 1000), (1000,)),
}


MAX_OBJECTS = 64   # elements of an object array: the format has one, the 0-d wrapper of its dict


class PendingArray:
    """What the pickle's array reconstruction builds here instead of an array.  ``__setstate__`` (the
    pickle's BUILD) receives the array's shape, dtype and data, and makes the array only if they
    agree: a numeric array must hold exactly the bytes its shape declares (so it is no larger than
    the file), an object array at most MAX_OBJECTS elements.  A few bytes that declare 5e8 objects
    are refused before anything is allocated."""

    __slots__ = ("array",)

    def __setstate__(self, state) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise WeightFileError("an array's state in the pickle is malformed")
        shape, dtype, fortran, data = state[-4:]
        if not isinstance(shape, tuple) or len(shape) > 8 or \
                not all(isinstance(d, int) and 0 <= d < 2**40 for d in shape) or not isinstance(dtype, np.dtype):
            raise WeightFileError(f"an array in the pickle declares shape {shape!r} of {dtype!r}: malformed")
        n = 1
        for d in shape:
            n *= d
        if dtype.hasobject:
            if dtype != np.dtype(object) or n > MAX_OBJECTS or not isinstance(data, list) or len(data) != n:
                raise WeightFileError(f"an object array in the pickle declares {n:,} elements (shape {shape}); "
                                      f"the format holds one of at most {MAX_OBJECTS}: refused before allocating it")
            a = np.empty(n, dtype=object)
            for i, v in enumerate(data):
                a[i] = v
            self.array = a.reshape(shape)
            return
        if dtype.kind not in "fiub" or not isinstance(data, bytes) or len(data) != n * dtype.itemsize:
            held = f"{len(data):,} bytes" if isinstance(data, bytes) else type(data).__name__
            raise WeightFileError(f"an array in the pickle declares {shape} {dtype} ({n * dtype.itemsize:,} bytes) "
                                  f"but holds {held}: corrupt")
        self.array = np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C").copy()


class _NdarrayName:
    """``numpy.ndarray`` as the pickle names it: the class argument _reconstruct expects.  Calling it,
    as a pickle may (``numpy.ndarray((n,), 'O')`` through REDUCE), would allocate whatever it declares
    before anything could check it: refused, with nothing allocated."""

    def __call__(self, *args, **kwargs):
        raise WeightFileError("the pickle calls numpy.ndarray(...) itself, which would allocate what it "
                              "declares; a weight file rebuilds its arrays through numpy's _reconstruct: "
                              "refused before allocating anything")

    def __repr__(self) -> str:
        return "numpy.ndarray"


NDARRAY = _NdarrayName()


def _reconstruct(cls, shape, typecode):
    """NumPy's array reconstruction, as the pickle calls it, returning a PendingArray."""
    if cls is not NDARRAY:
        raise WeightFileError(f"the pickle reconstructs {cls!r}, not a NumPy array: refused")
    return PendingArray()


def resolve_arrays(obj, depth: int = 0):
    """The unpickled structure with every PendingArray replaced by its array (recursively)."""
    if depth > 16:
        raise WeightFileError("the pickle nests deeper than a weight file does")
    if isinstance(obj, PendingArray):
        if not hasattr(obj, "array"):
            raise WeightFileError("an array in the pickle was never given its data: truncated or corrupt")
        a = obj.array
        if a.dtype == object:
            flat = a.reshape(-1)
            for i in range(flat.size):
                flat[i] = resolve_arrays(flat[i], depth + 1)
        return a
    if isinstance(obj, dict):
        return {k: resolve_arrays(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(resolve_arrays(v, depth + 1) for v in obj)
    return obj


class ArraysOnly(pickle.Unpickler):
    """An unpickler that can build NumPy arrays and dtypes, and nothing else.

    Dicts, lists, tuples, strings and numbers have their own opcodes and need no class; every other
    object a pickle builds goes through ``find_class``, which refuses all but these names.  (The
    array reconstruction builds a PendingArray, which makes the array from plain tuples and bytes
    only when they agree with its declared shape; ``numpy.ndarray`` itself is a stand-in that the
    reconstruction takes as its class and that refuses to be called, so a pickle cannot allocate an
    array of the size it declares.  A protocol-2 pickle written by Python 3 spells
    bytes as ``_codecs.encode(text, "latin1")``: allowed for that one encoding only.)
    """
    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise WeightFileError(f"the pickle asks for {module}.{name}, which a weight file never needs: "
                                  "refused (nothing from the file was run)")
        if name == "_reconstruct":
            return _reconstruct
        if name == "encode":
            return _latin1_bytes
        if name == "ndarray":
            return NDARRAY
        return np.dtype


def _latin1_bytes(text, encoding="utf-8"):
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise WeightFileError(f"the pickle encodes with {encoding!r}: only latin1 byte strings are expected")
    return text.encode("latin1")


def _read_header(f, path: str) -> None:
    magic = f.read(6)
    if magic != b"\x93NUMPY":
        raise WeightFileError(f"{path}: not a .npy file (it starts with {magic[:6]!r})")
    version = f.read(2)
    if len(version) < 2 or version[0] not in (1, 2, 3):
        raise WeightFileError(f"{path}: unknown .npy version {tuple(version)}")
    nlen = 2 if version[0] == 1 else 4
    raw_len = f.read(nlen)
    if len(raw_len) < nlen:
        raise WeightFileError(f"{path}: truncated .npy header")
    hlen = int.from_bytes(raw_len, "little")
    header = f.read(hlen)
    if len(header) < hlen:
        raise WeightFileError(f"{path}: truncated .npy header")
    try:
        meta = ast.literal_eval(header.decode("latin1"))   # a literal dict: nothing is evaluated
    except (ValueError, SyntaxError) as exc:
        raise WeightFileError(f"{path}: unreadable .npy header ({exc})") from None
    if not isinstance(meta, dict) or meta.get("descr") != "|O" or meta.get("shape") != ():
        raise WeightFileError(f"{path}: expected a 0-d object array (header {{'descr': '|O', 'shape': ()}}), "
                              f"got {meta!r}: not a bvlc_alexnet.npy")


def read_bvlc_npy(path: str | os.PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The layers of a ``bvlc_alexnet.npy``, as stored: ``{name: (W, b)}``, checked by ``check_raw``.

    Raises WeightFileError (a ValueError) for a missing, truncated, corrupt or hostile file, or one
    with other keys, shapes or dtypes; the message names the file and the problem.
    """
    p = Path(path)
    if not p.is_file():
        raise WeightFileError(f"{p}: no such file (point {WEIGHTS_ENV} or the weights argument at a "
                              "bvlc_alexnet.npy, or leave both unset for synthetic weights)")
    with open(p, "rb") as f:
        _read_header(f, str(p))
        body = f.read()
    try:
        obj = ArraysOnly(io.BytesIO(body), encoding="latin1").load()
    except WeightFileError as exc:
        raise WeightFileError(f"{p}: {exc}") from None
    except (EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError, IndexError,
            KeyError, struct.error) as exc:
        size = p.stat().st_size
        hint = (f"; the file has {size:,} bytes, the real one {FILE_SIZE:,}: it is truncated"
                if size < FILE_SIZE else "")
        raise WeightFileError(f"{p}: the pickle inside is incomplete or corrupt "
                              f"({type(exc).__name__}: {exc}){hint}") from None
    try:
        obj = resolve_arrays(obj)
    except WeightFileError as exc:
        raise WeightFileError(f"{p}: {exc}") from None
    if isinstance(obj, np.ndarray) and obj.dtype == object and obj.shape == ():
        obj = obj.item()
    raw = check_raw(obj, str(p))
    return raw


def check_raw(obj, source: str = "weights") -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """``obj`` as ``{name: (W, b)}`` if it has exactly the file's layers, shapes and float32 dtype."""
    if not isinstance(obj, dict):
        raise WeightFileError(f"{source}: expected a dict of layers, got {type(obj).__name__}")
    if set(obj) != set(FILE_SHAPES):
        raise WeightFileError(f"{source}: layers {sorted(map(str, obj))}, expected {sorted(FILE_SHAPES)}")
    out = {}
    for name, (ws, bs) in FILE_SHAPES.items():
        pair = obj[name]
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise WeightFileError(f"{source}: {name} must be [W, b], got {type(pair).__name__}")
        for arr, shape, what in ((pair[0], ws, "W"), (pair[1], bs, "b")):
            if not isinstance(arr, np.ndarray) or arr.dtype != np.float32:
                raise WeightFileError(f"{source}: {name} {what} must be a float32 array, got "
                                      f"{getattr(arr, 'dtype', type(arr).__name__)}")
            if arr.shape != shape:
                raise WeightFileError(f"{source}: {name} {what} has shape {arr.shape}, expected {shape}")
            if not np.isfinite(arr).all():
                raise WeightFileError(f"{source}: {name} {what} holds non-finite values")
        out[name] = (pair[0], pair[1])
    return out


def fc6_rows_hwc_to_chw(w: np.ndarray, c: int = 256, h: int = 6, wd: int = 6) -> np.ndarray:
    """fc6's rows from the file's (h, w, c) order to (c, h, w).

    The weights come from a framework whose activations are NHWC: flattening pool5 there lists the
    256 channels of pixel (0, 0), then of (0, 1), and so on.  labkit's activations are NCHW, whose
    flatten lists all 36 pixels of channel 0 first.  Row ``(h*6 + w)*256 + c`` of the file must
    therefore become row ``c*36 + h*6 + w`` (the seed's "rearrangement of the fc6 weights")."""
    return np.ascontiguousarray(w.reshape(h, wd, c, -1).transpose(2, 0, 1, 3).reshape(c * h * wd, -1))


def to_labkit(raw: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, np.ndarray]:
    """labkit's layouts: ``{name_w, name_b}``, conv W (M, C/g, K, K) from (K, K, C/g, M), fc W (in, out)
    with fc6's rows in NCHW flatten order; all float32 C-contiguous."""
    out = {}
    for name, (w, b) in raw.items():
        if name.startswith("conv"):
            w = w.transpose(3, 2, 0, 1)
        elif name == "fc6":
            w = fc6_rows_hwc_to_chw(w)
        out[f"{name}_w"] = np.ascontiguousarray(w, dtype=np.float32)
        out[f"{name}_b"] = np.ascontiguousarray(b, dtype=np.float32)
    return out


def synthetic_weights(seed: int = 2012) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Deterministic random weights in the file's structure and layouts (He-scaled, so activations
    keep their size through the ReLUs): the network runs and is checked without the 244 MB file.
    They classify nothing; the notebook says so."""
    rng = np.random.default_rng(seed)
    raw = {}
    for name, (ws, bs) in FILE_SHAPES.items():
        fan_in = int(np.prod(ws[:-1]))
        w = rng.standard_normal(ws, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))
        b = rng.standard_normal(bs, dtype=np.float32) * np.float32(0.01)
        raw[name] = (w, b)
    return raw
