"""Argument checks of the NumPy references (labkit.reference.layers and cpu_conv): each refuses a bad
argument with a message that says how to fix it, before any arithmetic."""
from __future__ import annotations

from typing import Any

import numpy as np

IntPair = int | tuple[int, int]

ALLOWED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def check_dtype(dtype: Any) -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is float32 or float64, else raise TypeError."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(
            f"dtype must be np.float32 or np.float64, got {dtype!r}"
        ) from exc
    if dt not in ALLOWED_DTYPES:
        raise TypeError(
            f"dtype must be np.float32 or np.float64, got {dt}; "
            "pass dtype=np.float32 or dtype=np.float64"
        )
    return dt


def as_real_array(a: Any, name: str) -> np.ndarray:
    """Convert ``a`` to an ndarray of a real numeric dtype, else raise TypeError."""
    if a is None:
        raise TypeError(f"{name} must be an array, got None")
    try:
        arr = np.asarray(a)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(
            f"{name} could not be converted to a NumPy array ({exc}); "
            "pass a numpy.ndarray"
        ) from exc
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(
            f"{name} must hold real numbers (an integer or floating dtype), "
            f"got dtype {arr.dtype}; convert it with np.asarray({name}, dtype=np.float32)"
        )
    return arr


def real_array(a: Any, name: str, dtype: np.dtype, ndim: int | None = None,
           what: str = "") -> np.ndarray:
    """Validated array of ``dtype``; checks ``ndim`` when given."""
    arr = as_real_array(a, name)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(
            f"{name} must be {ndim}-D{' ' + what if what else ''}, got shape {arr.shape}"
        )
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    return np.asarray(arr, dtype=dtype)


def nchw(x: Any, dtype: np.dtype) -> np.ndarray:
    """Validate an NCHW activation tensor."""
    arr = as_real_array(x, "x")
    if arr.ndim != 4:
        hint = ""
        if arr.ndim == 3:
            hint = "; add a batch axis with x[None] (a single image is (1, C, H, W))"
        raise ValueError(f"x must be 4-D NCHW, got shape {arr.shape}{hint}")
    if arr.size == 0:
        raise ValueError(f"x must not be empty, got shape {arr.shape}")
    return np.asarray(arr, dtype=dtype)


def pair(v: Any, name: str, minimum: int) -> tuple[int, int]:
    """Normalize an int or (h, w) pair of ints, each >= ``minimum``."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int or a (h, w) pair of ints, got {v!r}")
    if isinstance(v, (int, np.integer)):
        pair = (int(v), int(v))
    elif isinstance(v, (tuple, list)) and len(v) == 2 and all(
        isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_))
        for e in v
    ):
        pair = (int(v[0]), int(v[1]))
    else:
        raise TypeError(f"{name} must be an int or a (h, w) pair of ints, got {v!r}")
    if pair[0] < minimum or pair[1] < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v!r}")
    return pair


def bias_vector(b: Any, m: int, dtype: np.dtype, what: str) -> np.ndarray | None:
    if b is None:
        return None
    arr = as_real_array(b, "b")
    if arr.shape != (m,):
        raise ValueError(
            f"b must have shape ({m},) (one value per {what}), got shape {arr.shape}"
        )
    return np.asarray(arr, dtype=dtype)


def window_count(size: int, k: int, s: int, p: int, axis: str, what: str, d: int = 1) -> int:
    """Output length of a VALID window sweep over ``size + 2p`` with kernel k, stride s and
    dilation d (a window spans d*(k-1)+1 inputs)."""
    padded, span = size + 2 * p, d * (k - 1) + 1
    if padded < span:
        raise ValueError(
            f"{what} {axis} ({k}{f', dilation {d}: {span} inputs' if d > 1 else ''}) is larger than the padded input {axis} "
            f"({size} + 2*{p} = {padded}); use a smaller kernel or more padding"
        )
    return (padded - span) // s + 1


def conv_checks(x: Any, w: Any, b: Any, stride: Any, pad: Any, groups: Any,
                 dtype: np.dtype, dilation: Any = 1):
    """Shared validation of conv2d arguments; returns normalized values."""
    x = nchw(x, dtype)
    wa = as_real_array(w, "w")
    if wa.ndim != 4:
        raise ValueError(
            f"w must be 4-D (M, C/groups, KH, KW), got shape {wa.shape}"
        )
    if wa.size == 0:
        raise ValueError(f"w must not be empty, got shape {wa.shape}")
    w = np.asarray(wa, dtype=dtype)
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"groups must be an int, got {groups!r}")
    groups = int(groups)
    if groups < 1:
        raise ValueError(f"groups must be >= 1, got {groups}")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if c != groups * cg:
        raise ValueError(
            f"channels of x ({c}) must equal groups*C/groups of w "
            f"({groups}*{cg} = {groups * cg}); w must be shaped (M, C/groups, KH, KW) "
            "-- check the layout (MCKK, not KKCM) and the groups argument"
        )
    if m % groups != 0:
        raise ValueError(
            f"output channels M of w ({m}) must be divisible by groups ({groups})"
        )
    b = bias_vector(b, m, dtype, "output channel M")
    sh, sw = pair(stride, "stride", 1)
    ph, pw = pair(pad, "pad", 0)
    dh, dw = pair(dilation, "dilation", 1)
    ho = window_count(h, kh, sh, ph, "height", "kernel", dh)
    wo = window_count(wd, kw, sw, pw, "width", "kernel", dw)
    return x, w, b, (sh, sw), (ph, pw), groups, (ho, wo)


# --------------------------------------------------------------------------
