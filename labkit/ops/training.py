"""The small kernels of a training step (labkit/kernels/train.cu), on the backend in use.

    dx = relu_backward(y, dy)                     # y: the ReLU's output
    s = add(a, b)                                 # a residual block's two gradient paths
    dx = gap_backward(dy, (N, C, H, W))           # global average pooling's backward
    dx = gap_relu_backward(y, dg)                 # both backwards of y = relu(.) -> mean over H, W
    y = dense_forward(x, w, b)                    # x @ w + b, w read as it is now
    dx, dw, db = dense_backward(x, w, dy)         # y = x @ w + b, w (in, out)
    loss, dz = softmax_cross_entropy(z, labels)   # the batch's mean loss (shape (1,)), its gradient
    sgd_momentum(p, g, v, lr=0.1, momentum=0.9, weight_decay=5e-4)   # in place, one launch
    opt = SGD(p, g, v); opt.set(lr=0.1); opt.step()                  # the same, prepared once

Every array is float32 and C-contiguous on the backend (labels int32); an ``out`` given is checked
and never overlaps an input.  A label outside [0, D) gives a NaN loss and NaN gradients for its row
(the kernel checks it, rather than read outside the row).
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..checks import array_module, check_array, check_no_alias, check_shape, output
from ..loader import load
from .plans import PlanCache, cdiv, ints

__all__ = ["relu_backward", "add", "gap_backward", "gap_relu_backward", "dense_forward", "dense_backward", "softmax_cross_entropy", "sgd_momentum",
           "SGD", "THREADS"]

THREADS = 256
_PLANS = PlanCache()


def _fn(name: str, key: tuple, grid, block, args: tuple):
    return _PLANS.get_or_make(key, lambda: load("train").get_function(name).launcher(grid, block, args))


def _same_shape(a, b, names: str, backend: str) -> None:
    check_array(a, names[0], "any", getattr(a, "ndim", 1), backend)
    check_array(b, names[1], "any", a.ndim, backend)
    check_shape(b, names[1], tuple(a.shape), f"the shape of {names[0]}")


def _elementwise(name: str, a, b, names: tuple, out):
    backend = backends.current()
    _same_shape(a, b, names, backend)
    y = output(out, tuple(a.shape), "any", (a, b), backend=backend)
    n = int(a.size)
    _fn(name, (backend, name, n), (max(1, cdiv(n, THREADS)),), (THREADS,), (None, None, None, np.int64(n)))(a, b, y)
    return y


def relu_backward(y, dy, *, out=None):
    """dL/dx of y = relu(x): 0 where y <= 0, else dy (a NaN in y passes dy, as in PyTorch)."""
    return _elementwise("relu_backward", y, dy, ("y", "dy"), out)


def add(a, b, *, out=None):
    """a + b, elementwise."""
    return _elementwise("add", a, b, ("a", "b"), out)


def gap_backward(dy, shape: tuple, *, out=None):
    """dL/dx of y = mean over H, W of x (N, C, H, W), given dy (N, C)."""
    backend = backends.current()
    N, C, H, W = (int(v) for v in shape)
    check_array(dy, "dy", "(N, C)", 2, backend)
    check_shape(dy, "dy", (N, C), "(N, C)")
    dx = output(out, (N, C, H, W), "NCHW", (dy,), backend=backend)
    NC, HW = N * C, H * W
    _fn("gap_backward", (backend, "gap", NC, HW), (cdiv(NC * HW, THREADS),), (THREADS,),
        (None, None) + ints(NC, HW))(dy, dx)
    return dx


def _aligned16(a) -> bool:
    data = a.data
    return (data.ptr if hasattr(data, "ptr") else a.ctypes.data) % 16 == 0


def gap_relu_backward(y, dg, *, out=None):
    """dL/dx where y = relu(x) (N, C, H, W) is pooled to its plane means, given dg = dL/d(mean) (N, C):
    ``relu_backward(y, gap_backward(dg, y.shape))`` in one pass (the same values), reading y only."""
    backend = backends.current()
    check_array(y, "y", "NCHW", 4, backend)
    N, C, H, W = (int(v) for v in y.shape)
    check_array(dg, "dg", "(N, C)", 2, backend)
    check_shape(dg, "dg", (N, C), "(N, C) of y's N and C")
    dx = output(out, (N, C, H, W), "NCHW", (y, dg), backend=backend)
    NC, HW = N * C, H * W
    if HW % 4 == 0 and NC * HW // 4 < 2**31 and _aligned16(y) and _aligned16(dx):
        n4 = NC * HW // 4
        _fn("gap_relu_backward4", (backend, "gap_relu4", NC, HW), (cdiv(n4, 4 * THREADS),), (THREADS,),
            (None, None, None, np.uint32(n4), np.uint32(HW // 4)))(y, dg, dx)
        return dx
    threads = min(THREADS, cdiv(HW, 32) * 32)
    gy = min(NC, 65535)
    _fn("gap_relu_backward", (backend, "gap_relu", NC, HW), (cdiv(HW, threads), gy, cdiv(NC, gy)), (threads,),
        (None, None, None, np.int64(NC), np.int32(HW)))(y, dg, dx)
    return dx


def dense_forward(x, w, b, *, out=None):
    """x @ w + b: x (N, I), w (I, O), b (O,), read as they are at each call."""
    backend = backends.current()
    for a, name, nd in ((x, "x", 2), (w, "w", 2), (b, "b", 1)):
        check_array(a, name, f"{nd}-D", nd, backend)
    N, I = (int(v) for v in x.shape)
    O = int(w.shape[1])
    check_shape(w, "w", (I, O), "(in, out)")
    check_shape(b, "b", (O,), "(out,)")
    y = output(out, (N, O), "(N, out)", (x, w, b), backend=backend)
    _fn("dense_forward", (backend, "dense_fwd", N, I, O), (cdiv(N * O, THREADS),), (THREADS,),
        (None, None, None, None) + ints(N, I, O))(x, w, b, y)
    return y


def dense_backward(x, w, dy, *, out=None):
    """(dx, dw, db) of y = x @ w + b: x (N, I), w (I, O), dy (N, O).  ``out``: three arrays, or None."""
    backend = backends.current()
    for a, name in ((x, "x"), (w, "w"), (dy, "dy")):
        check_array(a, name, "2-D", 2, backend)
    N, I = (int(v) for v in x.shape)
    O = int(w.shape[1])
    check_shape(w, "w", (I, O), "(in, out)")
    check_shape(dy, "dy", (N, O), "(N, out)")
    dx, dw, db = out if out is not None else (None, None, None)
    dx = output(dx, (N, I), "(N, in)", (x, w, dy), backend=backend)
    dw = output(dw, (I, O), "(in, out)", (x, w, dy, dx), backend=backend)
    db = output(db, (O,), "(out,)", (x, w, dy, dx, dw), backend=backend)
    _fn("dense_backward_data", (backend, "dense_data", N, I, O), (cdiv(N * I, THREADS),), (THREADS,),
        (None, None, None) + ints(N, I, O))(dy, w, dx)
    _fn("dense_backward_weight", (backend, "dense_weight", N, I, O), (cdiv(I * O + O, THREADS),), (THREADS,),
        (None, None, None, None) + ints(N, I, O))(x, dy, dw, db)
    return dx, dw, db


def softmax_cross_entropy(z, labels, *, out=None):
    """(loss, dz): the mean over the batch of -log softmax(z)[label], shape (1,), and its gradient
    (softmax(z) - one_hot(labels)) / N.  z float32 (N, D), labels int32 (N,).  ``out``: (loss, dz,
    row_loss) arrays ((1,), (N, D), (N,)) or None."""
    backend = backends.current()
    xp = array_module(backend)
    check_array(z, "z", "(N, D)", 2, backend)
    N, D = (int(v) for v in z.shape)
    if type(labels) is not xp.ndarray or labels.dtype != np.int32 or labels.shape != (N,) \
            or not labels.flags.c_contiguous:
        raise TypeError(f"labels must be a contiguous int32 {xp.__name__} array of shape ({N},), got "
                        f"{type(labels).__name__} {getattr(labels, 'dtype', '')} {getattr(labels, 'shape', '')}")
    loss, dz, rows = out if out is not None else (None, None, None)
    dz = output(dz, (N, D), "(N, D)", (z,), backend=backend)
    rows = output(rows, (N,), "(N,)", (z, dz), backend=backend)
    loss = output(loss, (1,), "(1,)", (z, dz, rows), backend=backend)
    check_no_alias(labels, (dz, rows, loss), "labels")
    warps = THREADS // 32
    _fn("softmax_xent", (backend, "xent", N, D), (cdiv(N, warps),), (THREADS,),
        (None, None, None, None) + ints(N, D))(z, labels, rows, dz)
    _fn("mean", (backend, "mean", N), (1,), (THREADS,), (None, None) + ints(N))(rows, loss)
    return loss, dz


class SGD:
    """SGD with momentum and weight decay over flat buffers, as PyTorch's: v = momentum v + g +
    weight_decay p; p -= lr v, in place, one launch.  The launch is prepared once; the three
    hyperparameters live in a small device array the kernel reads at each launch, so a CUDA graph
    that captured ``step()`` follows ``set()`` calls made between its replays (a schedule).
    ``set`` writes the array only when a value changes (a copy in stream order)."""

    def __init__(self, p, g, v):
        backend = backends.current()
        _same_shape(p, g, ("p", "g"), backend)
        _same_shape(p, v, ("p", "v"), backend)
        check_no_alias(p, (g, v), "p")
        check_no_alias(v, (g,), "v")
        self.xp = array_module(backend)
        self.hyper = self.xp.zeros(3, dtype=np.float32)
        self.values: tuple | None = None
        n = int(p.size)
        self._launch = _fn("sgd_momentum", (backend, "sgd", n), (max(1, cdiv(n, THREADS)),), (THREADS,),
                           (None, None, None, np.int64(n), None))
        self._arrays = (p, g, v, self.hyper)

    def set(self, *, lr: float, momentum: float = 0.9, weight_decay: float = 0.0) -> None:
        for name, val in (("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)):
            if not (isinstance(val, (int, float)) and np.isfinite(val) and val >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
        values = (float(lr), float(momentum), float(weight_decay))
        if values != self.values:
            host = np.array(values, dtype=np.float32)
            if self.xp is np:
                self.hyper[...] = host
            else:
                self.hyper.set(host)           # one host-to-device copy on the current stream
            self.values = values

    def step(self) -> None:
        if self.values is None:
            raise RuntimeError("set(lr=...) before the first step")
        self._launch(*self._arrays)


def sgd_momentum(p, g, v, *, lr: float, momentum: float = 0.9, weight_decay: float = 0.0):
    """One SGD step in place, as PyTorch's SGD: v = momentum v + g + weight_decay p; p -= lr v.
    p, g, v: float32 arrays of one shape (all of a network's parameters in one flat buffer: one launch).
    A loop prepares an ``SGD`` once instead."""
    opt = SGD(p, g, v)
    opt.set(lr=lr, momentum=momentum, weight_decay=weight_decay)
    opt.step()
    return p
