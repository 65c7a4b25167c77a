"""Pooling of any window, stride, dilation and padding (asymmetric too), constant padding, one input
of a concatenation, a slice along one axis and a transpose (labkit/kernels/pool_pad.cu), on the
backend in use.

    pool = Pool2d("avg", (3, 3), stride=(2, 2), pads=(0, 0, 1, 1), ceil_mode=True, count_include_pad=False)
    y = pool(x)                                     # x float32 NCHW
    y = Pad4((0, 0, 1, 2), (0, 0, 1, 2), value=0.0)(x)   # leading and trailing pads of each dim
    ConcatCopy(axis=1)(x, y, offset)                # x into y at channel ``offset``
    SliceCopy(axis=1)(x, y, offset)                 # channels [offset, offset + y.shape[1]) of x into y
    y = Permute((0, 2, 1, 3, 4))(x)                 # numpy.transpose(x, perm), contiguous

``Pool2d``'s output size follows ONNX (and PyTorch): floor, or with ``ceil_mode`` ceil, of
(H + pad_top + pad_bottom - dilated window) / stride, plus one, less the last window when it would
start past the input and its leading padding.  The plain max-pooling of labkit.ops.pool_softmax
(square window, no padding) is faster where it applies.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..checks import array_type, check_array, fast_input, output
from ..loader import load
from .plans import cdiv, ints

__all__ = ["Pool2d", "Pad4", "ConcatCopy", "SliceCopy", "Permute", "batched_transpose", "channels_last_copy", "gather_axis", "pool_out_size",
           "MODES", "THREADS"]

THREADS = 256
MODES = ("max", "avg")
MAX_ELEMENTS = 2**31 - 1


def pool_out_size(n: int, k: int, s: int, d: int, before: int, after: int, ceil_mode: bool) -> int:
    """Windows along one axis of ``n`` (see the module docstring); ValueError if none fits."""
    span = d * (k - 1) + 1
    room = n + before + after - span
    if room < 0:
        raise ValueError(f"a window of {span} (kernel {k}, dilation {d}) does not fit {n} with padding "
                         f"({before}, {after})")
    out = (-(-room // s) if ceil_mode else room // s) + 1
    if ceil_mode and (out - 1) * s >= n + before:   # the last window would start in the trailing padding
        out -= 1
    return out


def _total(shape) -> int:
    total = int(np.prod(shape, dtype=np.int64))
    if total > MAX_ELEMENTS:
        raise ValueError(f"{tuple(shape)} holds {total} elements, over the kernels' 32-bit indices")
    return total


class _Layer:
    def __init__(self) -> None:
        self.backend = backends.current()
        self._kind = array_type(self.backend)
        self._plans: dict = {}

    def _in(self, x, ndim: int | None, layout: str):
        if not (fast_input(x, self._kind) and (ndim is None or x.ndim == ndim)):
            check_array(x, "x", layout, ndim if ndim is not None else x.ndim, self.backend)
        if not x.flags.c_contiguous:
            raise ValueError("x must be C-contiguous")


class Pool2d(_Layer):
    """Max or average pooling of NCHW x: ``kernel``, ``stride``, ``dilation`` (h, w) pairs, ``pads``
    (top, left, bottom, right); ``count_include_pad``: average over the padded window (see pool_pad.cu)."""

    def __init__(self, mode: str, kernel, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), *,
                 ceil_mode: bool = False, count_include_pad: bool = False):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode must be 'max' or 'avg', got {mode!r}")
        vals = [int(v) for v in (*kernel, *stride, *dilation)]
        if len(vals) != 6 or min(vals) < 1 or len(pads) != 4 or min(int(p) for p in pads) < 0:
            raise ValueError(f"kernel, stride and dilation must be pairs of ints >= 1 and pads 4 ints >= 0, got "
                             f"{kernel}, {stride}, {dilation}, {pads}")
        self.mode, self.kernel, self.stride = mode, tuple(vals[:2]), tuple(vals[2:4])
        self.dilation, self.pads = tuple(vals[4:]), tuple(int(p) for p in pads)
        self.ceil_mode, self.count_include_pad = bool(ceil_mode), bool(count_include_pad)

    def out_shape(self, shape: tuple) -> tuple:
        N, C, H, W = shape
        t, l, b, r = self.pads
        ho = pool_out_size(H, self.kernel[0], self.stride[0], self.dilation[0], t, b, self.ceil_mode)
        wo = pool_out_size(W, self.kernel[1], self.stride[1], self.dilation[1], l, r, self.ceil_mode)
        return (N, C, ho, wo)

    def __call__(self, x, out=None):
        self._in(x, 4, "NCHW")
        plan = self._plans.get(x.shape)
        if plan is None:
            shape = self.out_shape(tuple(int(v) for v in x.shape))
            N, C, H, W = x.shape
            total = _total(shape)
            _total(x.shape)
            plan = self._plans[x.shape] = (shape, load("pool_pad").get_function("pool_any").launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,),
                (None, None) + ints(N * C, H, W, shape[2], shape[3], *self.kernel, *self.stride, *self.dilation,
                                    *self.pads, MODES.index(self.mode), int(self.count_include_pad))))
        shape, launch = plan
        y = output(out, shape, "NCHW", (x,), backend=self.backend)
        launch(x, y)
        return y


class Pad4(_Layer):
    """Constant padding of a tensor of up to 4 dims: ``before`` and ``after`` one int per dim; a
    negative one crops that many from that end (ONNX's Pad; a transposed convolution's uneven crop)."""

    def __init__(self, before, after, value: float = 0.0):
        super().__init__()
        before, after = tuple(int(v) for v in before), tuple(int(v) for v in after)
        if len(before) != len(after) or not 1 <= len(before) <= 4:
            raise ValueError(f"before and after must be 1 to 4 ints each (one per dim), got {before}, {after}")
        if not np.isfinite(value) and not np.isinf(value):
            raise ValueError(f"value must be a number, got {value!r}")
        self.before, self.after, self.value = before, after, np.float32(value)

    def out_shape(self, shape: tuple) -> tuple:
        if len(shape) != len(self.before):
            raise ValueError(f"x has {len(shape)} dims, the pads {len(self.before)}")
        out = tuple(int(n) + b + a for n, b, a in zip(shape, self.before, self.after))
        if min(out) < 1:
            raise ValueError(f"pads {self.before}, {self.after} crop x of shape {tuple(shape)} to nothing ({out})")
        return out

    def __call__(self, x, out=None):
        self._in(x, len(self.before), "any layout")
        plan = self._plans.get(x.shape)
        if plan is None:
            shape = self.out_shape(tuple(x.shape))
            total = _total(shape)
            _total(x.shape)
            pad = 4 - len(shape)
            out4, x4, p4 = (1,) * pad + shape, (1,) * pad + tuple(x.shape), (0,) * pad + self.before
            plan = self._plans[x.shape] = (shape, load("pool_pad").get_function("pad4").launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,),
                (None, None) + ints(total, *out4[1:], *x4, *p4) + (self.value,)))
        shape, launch = plan
        y = output(out, shape, "any layout", (x,), backend=self.backend)
        launch(x, y)
        return y


class _AxisWindow(_Layer):
    """x and y equal on every axis but ``axis``, where one is a window of the other from index
    ``offset``: ``(x, y, offset)`` copies between them with KERNEL (pool_pad.cu: concat_copy writes x
    into y's window, slice_copy reads y out of x's)."""
    KERNEL = ""
    X_IS_WINDOW = True

    def __init__(self, axis: int):
        super().__init__()
        self.axis = int(axis)

    def _refusal(self, x, y, offset: int, a: int) -> str:
        raise NotImplementedError

    def __call__(self, x, y, offset: int = 0):
        self._in(x, None, "any layout")
        key = (x.shape, y.shape, offset)
        launch = self._plans.get(key)
        if launch is None:
            a = self.axis
            window, whole = (x, y) if self.X_IS_WINDOW else (y, x)
            if x.ndim != y.ndim or not 0 <= a < x.ndim or x.shape[:a] != y.shape[:a] or \
                    x.shape[a + 1:] != y.shape[a + 1:] or not 0 <= offset <= whole.shape[a] - window.shape[a]:
                raise ValueError(self._refusal(x, y, offset, a))
            rest = int(np.prod(x.shape[a + 1:], dtype=np.int64))
            total = _total(window.shape)
            _total(whole.shape)
            launch = self._plans[key] = load("pool_pad").get_function(self.KERNEL).launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,),
                (None, None) + ints(total, x.shape[a] * rest, y.shape[a] * rest, offset * rest))
        if not (fast_input(y, self._kind) and y.flags.c_contiguous):
            check_array(y, "y", "any layout", y.ndim, self.backend)
        launch(x, y)
        return y


class ConcatCopy(_AxisWindow):
    """One input of a concatenation on ``axis``: ``(x, y, offset)`` copies x into y from index
    ``offset`` of that axis (x and y equal on every other axis).  ``axis`` 0 with y of x's shape is a copy."""
    KERNEL, X_IS_WINDOW = "concat_copy", True

    def _refusal(self, x, y, offset, a):
        return f"cannot copy {tuple(x.shape)} into {tuple(y.shape)} at {offset} of axis {a}"


class SliceCopy(_AxisWindow):
    """The inverse of ConcatCopy: ``(x, y, offset)`` copies indices [offset, offset + y.shape[axis]) of
    x's ``axis`` into y (x and y equal on every other axis): a Slice with step 1, an output of a Split."""
    KERNEL, X_IS_WINDOW = "slice_copy", False

    def _refusal(self, x, y, offset, a):
        return f"cannot slice {tuple(y.shape)} out of {tuple(x.shape)} at {offset} of axis {a}"


def gather_axis(shape: tuple, axis: int, positions, xp):
    """``launch(x, y)``: y = take(x, positions, axis) for an x of ``shape`` (C-contiguous float32), y of
    shape[:axis] + positions.shape + shape[axis+1:]; ``positions`` ints in 0 .. shape[axis]-1 (the
    caller checks them: the kernel reads where they say), copied to the device once, here."""
    positions = np.asarray(positions, dtype=np.int64)
    n = int(shape[axis])
    if positions.size and not (0 <= positions.min() and positions.max() < n):
        raise ValueError(f"positions must lie in 0 .. {n - 1}, got {positions.min()} .. {positions.max()}")
    inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
    count = int(positions.size)
    total = int(np.prod(shape[:axis], dtype=np.int64)) * count * inner
    idx = xp.asarray(positions.reshape(-1))
    fn = load("pool_pad").get_function("gather_axis").launcher(
        (max(1, cdiv(total, THREADS)),), (THREADS,), (None, idx, None, np.int64(total)) + ints(count, n, inner))
    return fn


def channels_last_copy(N: int, C: int, HW: int):
    """``launch(x, y)``: x (N, C, HW) float32 into y (N, HW, C4) channels last, C4 = C rounded up to a
    multiple of 4 with the extra channels zero (channels_last, or channels_last_narrow for C4 <= 8).
    The copy conv_implicit_tf32.cu's NHWC tiles gather from."""
    c4 = cdiv(C, 4) * 4
    if not 1 <= N <= 65535:
        raise ValueError(f"the channels-last copy runs one grid layer per image: 1 .. 65535 images, got {N}")
    mod = load("pool_pad")
    if c4 <= 8:
        return mod.get_function("channels_last_narrow").launcher(
            (cdiv(HW, THREADS), N), (THREADS,), (None, None) + ints(C, HW, c4))
    return mod.get_function("channels_last").launcher(
        (cdiv(HW, 32), cdiv(c4, 32), N), (32, 8), (None, None) + ints(C, HW, c4))


def batched_transpose(shape: tuple, perm: tuple) -> tuple[int, int, int] | None:
    """(batch, rows, cols) where ``numpy.transpose(x, perm)`` of an x of ``shape`` is a batch of 2-D
    transposes of x viewed as (batch, rows, cols): perm keeps its first k axes and swaps the two runs
    after them (NCHW -> NHWC is (0, 2, 3, 1): batch N, rows C, cols H*W); else None (the identity too)."""
    n, k = len(perm), 0
    while k < n and perm[k] == k:
        k += 1
    if k == n:
        return None
    j = perm[k]
    if tuple(perm[k:]) != tuple(range(j, n)) + tuple(range(k, j)):
        return None
    size = lambda axes: int(np.prod(axes, dtype=np.int64))   # noqa: E731
    return size(shape[:k]), size(shape[k:j]), size(shape[j:])


class Permute(_Layer):
    """``numpy.transpose(x, perm)`` as a contiguous copy, for tensors of up to 6 axes: a batch of
    tiled 2-D transposes (transpose_tiles) where the permutation is one, else an element a thread.
    ``add=True``: each call passes ``addend=`` an array of y's shape, added in the copy
    (y = transpose(x) + addend: a skip connection after a channels-last block, ConvNeXt's)."""

    MAX_RANK = 6

    def __init__(self, perm, add: bool = False):
        super().__init__()
        self.perm = tuple(int(p) for p in perm)
        if sorted(self.perm) != list(range(len(self.perm))) or not 1 <= len(self.perm) <= self.MAX_RANK:
            raise ValueError(f"perm must order the axes 0 .. n-1 (n <= {self.MAX_RANK}), got {perm}")
        if not isinstance(add, (bool, np.bool_)):
            raise TypeError(f"add must be True or False, got {add!r}")
        self.add = bool(add)

    def kernel(self, shape: tuple) -> str:
        """The kernel a call on an x of ``shape`` runs."""
        return ("transpose_tiles" if self._fits_tiles(shape) else "permute") + (" + add" if self.add else "")

    def out_shape(self, shape: tuple) -> tuple:
        if len(shape) != len(self.perm):
            raise ValueError(f"perm {self.perm} for a tensor of shape {tuple(shape)}")
        return tuple(shape[p] for p in self.perm)

    def __call__(self, x, out=None, *, addend=None):
        self._in(x, len(self.perm), "any layout")
        shape = self.out_shape(x.shape)
        if self.add:
            if addend is None:
                raise ValueError(f"this Permute adds: pass addend= a float32 array of shape {shape}")
            if not (fast_input(addend, self._kind) and addend.ndim == len(shape)):
                check_array(addend, "addend", "any layout", len(shape), self.backend)
            if tuple(addend.shape) != shape:
                raise ValueError(f"addend must have the output's shape {shape}, got {tuple(addend.shape)}")
        elif addend is not None:
            raise ValueError("this Permute was made without add=True: it adds nothing")
        y = output(out, shape, "any layout", (x,) + ((addend,) if self.add else ()), backend=self.backend)
        launch = self._plans.get(x.shape)
        if launch is None:
            launch = self._plans[x.shape] = self._launch(x.shape)
        launch(x, addend if self.add else x, y)     # without add the kernels read no addend (x stands in)
        return y

    def _fits_tiles(self, shape: tuple) -> bool:
        """Is the permutation of an x of ``shape`` a batch of 2-D transposes that transpose_tiles' grid
        holds (at most 65535 of them, of at most 65535 tiles' rows)?"""
        bt = batched_transpose(shape, self.perm)
        return bt is not None and bt[0] <= 65535 and cdiv(bt[1], 32) <= 65535 and min(bt) > 0

    def _launch(self, shape: tuple):
        """launch(x, addend, y) of an x of ``shape``: transpose_tiles where it fits, else permute."""
        if self._fits_tiles(shape):
            batch, rows, cols = batched_transpose(shape, self.perm)
            return load("pool_pad").get_function("transpose_tiles").launcher(
                (cdiv(cols, 32), cdiv(rows, 32), batch), (32, 8), (None, None, None) + ints(rows, cols, self.add))
        total = _total(shape)
        strides = [int(np.prod(shape[k + 1:], dtype=np.int64)) for k in range(len(shape))]
        pad = self.MAX_RANK - len(shape)          # leading axes of size 1 (their stride is never used)
        dims = (1,) * pad + self.out_shape(shape)
        src = (0,) * pad + tuple(strides[p] for p in self.perm)
        return load("pool_pad").get_function("permute").launcher(
            (max(1, cdiv(total, THREADS)),), (THREADS,), (None, None, None) + ints(total, *dims, *src, self.add))
