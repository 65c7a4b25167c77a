"""Element-wise layers (labkit/kernels/pointwise.cu): activations, a per-channel affine map, and
Add/Mul/Sub/Div with broadcasting, on the backend in use.

    act = Unary("hard_swish"); y = act(x)                    # any shape, float32
    bn = ChannelAffine(scale, shift, activation="relu")      # y = relu(x * s[c] + t[c]), x NCHW
    add = Binary("add", activation="relu"); y = add(p, q)    # NumPy's broadcasting, up to 4 dims

Each layer resolves its launch once per input shape(s) and checks only the new input on a call.
A convolution's bias, ReLU, ReLU6 and tanh belong in its epilogue, not here: these are the layers
no other kernel fuses.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..checks import array_module, array_type, check_array, fast_input, output
from ..loader import load
from .plans import cdiv, ints

__all__ = ["ACTIVATIONS", "Unary", "ChannelAffine", "Binary", "broadcast_shape", "THREADS", "MAX_ELEMENTS"]

THREADS = 256
MAX_ELEMENTS = 2**31 - 1     # the kernels index with int
# The kernels' activation codes (pointwise.cu), and the parameters each reads: (a, b).
ACTIVATIONS = {None: 0, "relu": 1, "clip": 2, "leaky_relu": 3, "sigmoid": 4, "tanh": 5, "hard_sigmoid": 6,
               "hard_swish": 7, "erf": 8, "gelu": 9, "gelu_tanh": 10}
OPS = {"add": 0, "mul": 1, "sub": 2, "div": 3}


def _act(activation, a, b) -> tuple:
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(map(repr, ACTIVATIONS))}, got {activation!r}")
    for name, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or np.isnan(v):
            raise ValueError(f"{name} must be a number, got {v!r}")
    return ACTIVATIONS[activation], np.float32(a), np.float32(b)


def _total(shape) -> int:
    total = int(np.prod(shape, dtype=np.int64))
    if total > MAX_ELEMENTS:
        raise ValueError(f"{tuple(shape)} holds {total} elements, over the kernels' 32-bit indices")
    return total


def broadcast_shape(p: tuple, q: tuple) -> tuple:
    """The shape NumPy and ONNX broadcast ``p`` and ``q`` to, or ValueError naming both."""
    n = max(len(p), len(q))
    a, b = (1,) * (n - len(p)) + tuple(p), (1,) * (n - len(q)) + tuple(q)
    out = []
    for u, v in zip(a, b):
        if u != v and 1 not in (u, v):
            raise ValueError(f"shapes {tuple(p)} and {tuple(q)} do not broadcast (dimension {u} against {v})")
        out.append(max(u, v) if 0 not in (u, v) else 0)
    return tuple(out)


def _strides4(shape: tuple, out4: tuple) -> tuple:
    """Element strides of a C-contiguous array of ``shape`` against the 4-dim output, 0 where it repeats."""
    s = (1,) * (4 - len(shape)) + tuple(shape)
    strides, step = [0] * 4, 1
    for i in range(3, -1, -1):
        strides[i] = step if s[i] != 1 or out4[i] == 1 else 0
        step *= s[i]
    return tuple(strides)


class _Layer:
    def __init__(self) -> None:
        self.backend = backends.current()
        self._kind = array_type(self.backend)
        self._plans: dict = {}

    def _in(self, x, name: str):
        if not fast_input(x, self._kind):
            check_array(x, name, "any layout", x.ndim if hasattr(x, "ndim") else 1, self.backend)
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous")
        return x


class Unary(_Layer):
    """y = act(x) element-wise, any shape: ``activation`` one of ACTIVATIONS ("clip" reads ``a`` and
    ``b`` as its bounds, "leaky_relu" ``a`` as its slope, "hard_sigmoid" a * x + b)."""

    def __init__(self, activation: str, a: float = 0.0, b: float = 0.0):
        super().__init__()
        self.activation = activation
        self._params = _act(activation, a, b)

    def __call__(self, x, out=None):
        self._in(x, "x")
        launch = self._plans.get(x.shape)
        if launch is None:
            total = _total(x.shape)
            launch = self._plans[x.shape] = load("pointwise").get_function("unary").launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,), (None, None) + ints(total) + ints(self._params[0]) +
                self._params[1:])
        y = output(out, x.shape, "any layout", (x,), backend=self.backend)
        launch(x, y)
        return y


class ChannelAffine(_Layer):
    """y = act(x * scale[c] + shift[c]) of NCHW (or (N, C)) x: batch normalization at inference, its
    statistics folded into ``scale`` and ``shift`` (float32 (C,) on the backend) once."""

    def __init__(self, scale, shift, activation: str | None = None, a: float = 0.0, b: float = 0.0):
        super().__init__()
        xp = array_module(self.backend)
        for name, v in (("scale", scale), ("shift", shift)):
            check_array(v, name, "(C,)", 1, self.backend, xp)
        if scale.shape != shift.shape:
            raise ValueError(f"scale and shift must have one shape (C,), got {scale.shape} and {shift.shape}")
        self.scale, self.shift, self.activation = scale, shift, activation
        self._params = _act(activation, a, b)

    def __call__(self, x, out=None):
        self._in(x, "x")
        launch = self._plans.get(x.shape)
        if launch is None:
            if x.ndim < 2 or x.shape[1] != self.scale.shape[0]:
                raise ValueError(f"x must be (N, {self.scale.shape[0]}, ...), got {tuple(x.shape)}")
            total = _total(x.shape)
            hw = int(np.prod(x.shape[2:], dtype=np.int64))
            launch = self._plans[x.shape] = load("pointwise").get_function("channel_affine").launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,),
                (None, None, None, None) + ints(total, x.shape[1], hw, self._params[0]) + self._params[1:])
        y = output(out, x.shape, "any layout", (x,), backend=self.backend)
        launch(x, self.scale, self.shift, y)
        return y


class Binary(_Layer):
    """y = act(p op q), op add, mul, sub or div, with NumPy's broadcasting, up to 4 dimensions."""

    def __init__(self, op: str, activation: str | None = None, a: float = 0.0, b: float = 0.0):
        super().__init__()
        if op not in OPS:
            raise ValueError(f"op must be one of {', '.join(map(repr, OPS))}, got {op!r}")
        self.op, self.activation = op, activation
        self._params = _act(activation, a, b)

    def out_shape(self, p_shape: tuple, q_shape: tuple) -> tuple:
        shape = broadcast_shape(p_shape, q_shape)
        if len(shape) > 4:
            raise ValueError(f"{self.op} of shapes {p_shape} and {q_shape}: the kernel broadcasts up to 4 "
                             "dimensions")
        return shape

    def __call__(self, p, q, out=None):
        self._in(p, "p")
        self._in(q, "q")
        key = (p.shape, q.shape)
        plan = self._plans.get(key)
        if plan is None:
            shape = self.out_shape(tuple(p.shape), tuple(q.shape))
            total = _total(shape)
            out4 = (1,) * (4 - len(shape)) + shape
            plan = self._plans[key] = (shape, load("pointwise").get_function("binary_bcast").launcher(
                (max(1, cdiv(total, THREADS)),), (THREADS,),
                (None, None, None) + ints(total, *out4[1:], *_strides4(p.shape, out4), *_strides4(q.shape, out4),
                                          OPS[self.op], self._params[0]) + self._params[1:]))
        shape, launch = plan
        y = output(out, shape, "any layout", (p, q), backend=self.backend)
        launch(p, q, y)
        return y
