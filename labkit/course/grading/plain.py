"""Plain data across the sandbox's boundary: numbers, strings, booleans, None, NumPy arrays and scalars
of plain dtypes, and lists, tuples and dicts (string keys) of them; and labkit's own ConvLayer (a
convolution's geometry, which checks hand to the student's functions), as its integer fields, rebuilt
as a ConvLayer on the other side.  Nothing else crosses: a value whose ``__eq__`` lies, a callable, an
object of the student's class (a subclass of ConvLayer included).

    send(fd, {"ok": True, "value": np.zeros(3)})     # one message: its length, a JSON header, raw arrays
    msg = receive(fd, max_bytes=64 << 20)            # PlainDataError if it is larger, or not plain data

A message is read up to ``max_bytes`` and rebuilt from its header, every array's dtype and shape
checked against the bytes that came with it before anything is allocated; nothing in it runs.
"""
from __future__ import annotations

import json
import math
import os
import struct

import numpy as np

from ...errors import PlainDataError
from ...shapes import ConvLayer
from ..sandbox import write_all

__all__ = ["PlainDataError", "encode", "decode", "send", "receive", "MAX_DEPTH"]

MAX_DEPTH = 32
_PLAIN_KINDS = "biufc"           # bool, signed and unsigned integers, floats, complex
_LENGTH = struct.Struct("<Q")


def _tree(v, arrays: list, depth: int, where: str):
    if depth > MAX_DEPTH:
        raise PlainDataError(f"{where}: nested more than {MAX_DEPTH} deep")
    if v is None or type(v) in (bool, int, str):
        return v
    if type(v) is float:
        return {"float": repr(v)}                # JSON has no NaN or inf; repr round-trips every float
    if type(v) is complex:
        return {"complex": [repr(v.real), repr(v.imag)]}
    if isinstance(v, np.generic) and v.dtype.kind in _PLAIN_KINDS:
        v = np.asarray(v)
        arrays.append(v)
        return {"scalar": len(arrays) - 1}
    if type(v) is np.ndarray or type(v).__module__.startswith("cupy"):
        a = np.asarray(v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else v)
        if a.dtype.kind not in _PLAIN_KINDS:
            raise PlainDataError(f"{where}: an array of dtype {a.dtype} (only numbers and booleans cross)")
        arrays.append(np.ascontiguousarray(a))
        return {"array": len(arrays) - 1}
    if type(v) is ConvLayer:                     # exactly labkit's class: its fields, ints or None
        fields = list(v)
        if not all(f is None or type(f) is int for f in fields):
            raise PlainDataError(f"{where}: a ConvLayer whose fields are not all ints")
        return {"conv_layer": fields}
    if type(v) in (list, tuple):
        return {"list" if type(v) is list else "tuple": [_tree(x, arrays, depth + 1, f"{where}[{i}]")
                                                         for i, x in enumerate(v)]}
    if type(v) is dict:
        if not all(type(k) is str for k in v):
            raise PlainDataError(f"{where}: a dict whose keys are not all strings")
        return {"dict": {k: _tree(x, arrays, depth + 1, f"{where}[{k!r}]") for k, x in v.items()}}
    raise PlainDataError(f"{where}: a value of type {type(v).__name__} (only numbers, strings, booleans, None, "
                         "NumPy arrays, and lists, tuples and dicts of them cross)")


def encode(value, where: str = "the value") -> bytes:
    """``value`` as one message's bytes (PlainDataError if it is not plain data)."""
    arrays: list = []
    tree = _tree(value, arrays, 0, where)
    header = json.dumps({"tree": tree, "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]}).encode()
    return b"".join([_LENGTH.pack(len(header)), header] + [a.tobytes() for a in arrays])


def _build(node, arrays: list):
    if node is None or type(node) in (bool, int, str):
        return node
    if type(node) is not dict or len(node) != 1:
        raise PlainDataError("a message that is not plain data")
    (kind, body), = node.items()
    if kind == "float":
        return float(body)
    if kind == "complex":
        return complex(float(body[0]), float(body[1]))
    if kind in ("array", "scalar"):
        a = arrays[int(body)]
        return a if kind == "array" else a[()]
    if kind in ("list", "tuple"):
        items = [_build(x, arrays) for x in body]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {str(k): _build(x, arrays) for k, x in body.items()}
    if kind == "conv_layer":
        if (type(body) is not list or len(body) != len(ConvLayer._fields)
                or not all(f is None or type(f) is int for f in body)):
            raise PlainDataError(f"a ConvLayer that is not {len(ConvLayer._fields)} ints (or None)")
        return ConvLayer(*body)
    raise PlainDataError(f"a message with an unknown kind {kind!r}")


def decode(data: bytes):
    """The value of one message's bytes, every array checked against the bytes that carry it."""
    if len(data) < _LENGTH.size:
        raise PlainDataError("a message shorter than its length field")
    (n,) = _LENGTH.unpack_from(data)
    if n > len(data) - _LENGTH.size:
        raise PlainDataError("a message whose header is cut short")
    try:
        header = json.loads(data[_LENGTH.size:_LENGTH.size + n].decode())
        specs = header["arrays"]
        tree = header["tree"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise PlainDataError(f"a message whose header cannot be read ({type(exc).__name__})") from None
    pos, arrays = _LENGTH.size + n, []
    for spec in specs:
        try:
            dtype, shape = np.dtype(str(spec[0])), tuple(int(d) for d in spec[1])
        except (TypeError, ValueError, IndexError) as exc:
            raise PlainDataError(f"an array whose dtype or shape cannot be read ({exc})") from None
        if dtype.kind not in _PLAIN_KINDS or any(d < 0 for d in shape):
            raise PlainDataError(f"an array of dtype {dtype} or shape {shape} (only numbers and booleans cross)")
        count = math.prod(shape)
        nbytes = count * dtype.itemsize
        if nbytes > len(data) - pos:
            raise PlainDataError(f"an array that declares {nbytes:,} bytes where {len(data) - pos:,} are left")
        arrays.append(np.frombuffer(data, dtype=dtype, count=count, offset=pos).reshape(shape).copy())
        pos += nbytes
    if pos != len(data):
        raise PlainDataError("a message with bytes after its arrays")
    return _build(tree, arrays)


def send(fd: int, value, where: str = "the value") -> None:
    """Write one message: its total length, then its bytes."""
    data = encode(value, where)
    write_all(fd, _LENGTH.pack(len(data)) + data)


def _read_exactly(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("the other side ended before its message did")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def receive(fd: int, *, max_bytes: int):
    """Read one message (EOFError where the other side has ended; PlainDataError where the message is
    larger than ``max_bytes`` or not plain data: then nothing more of it is read)."""
    (n,) = _LENGTH.unpack(_read_exactly(fd, _LENGTH.size))
    if n > max_bytes:
        raise PlainDataError(f"a message of {n:,} bytes, over the {max_bytes:,} a value may take")
    return decode(_read_exactly(fd, n))
