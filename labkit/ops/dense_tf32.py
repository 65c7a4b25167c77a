"""A dense layer on the tensor cores, in TF32 (GPU only): y = act(x @ w + b) as a 1x1 convolution of
one-pixel images on conv_implicit_tf32.cu.

    fc = DenseTF32(w, b, activation="relu")   # w float32 (in, out), b (out,) or None, as for Dense
    y = fc(x)                                  # x float32 (rows, in) -> (rows, out)

A row of x is an image of ``in`` channels and a single pixel, so its NCHW and NHWC layouts are the
same memory: the channels-last gather reads x in place (implicit.py skips the copy).  Tiles and split-K
for each number of rows are the TF32 convolution's: the autotuner's on a GPU.  A network in TF32
uses it where the product is large enough to be bound by arithmetic; with a few rows a dense layer
is bound by reading its weights, which TF32 does not make fewer (labkit.models.alexnet).
"""
from __future__ import annotations

from .. import backends
from ..checks import array_module, check_array, check_bias, fast_input
from ..shapes import ConvLayer
from .implicit import ImplicitConv2d

__all__ = ["DenseTF32"]


class DenseTF32:
    """``Dense``'s interface (``plan(rows)``, ``workspace_shape(rows)``, ``fc(x, out, workspace)``) on
    the TF32 implicit GEMM: the weights packed for the tensor cores once, here."""

    def __init__(self, w, b=None, *, activation: str | None = None):
        self.backend = backends.current()
        xp = array_module(self.backend)
        check_array(w, "w", "(in, out)", 2, self.backend, xp)
        K, N = (int(v) for v in w.shape)
        check_bias(b, N, backend=self.backend, xp=xp)
        self.in_features, self.out_features, self.activation = K, N, activation
        self.conv = ImplicitConv2d(xp.ascontiguousarray(w.T).reshape(N, K, 1, 1), b, ConvLayer(K, 1, 1, N, 1),
                                   activation=activation, precision="tf32")
        self._kind = xp.ndarray

    def plan(self, rows: int):
        return self.conv.plan(rows)

    def workspace_shape(self, rows: int) -> tuple | None:
        return self.conv.workspace_shape(rows)

    def __call__(self, x, out=None, workspace=None):
        """act(x @ w + b) of float32 x (rows, in); ``out``: (rows, out) to write (not overlapping x)."""
        if not (fast_input(x, self._kind) and x.ndim == 2 and x.shape[1] == self.in_features):
            check_array(x, "x", "(rows, in)", 2, self.backend)
            if x.shape[1] != self.in_features:
                raise ValueError(f"x must have {self.in_features} columns (the layer's inputs), got shape "
                                 f"{tuple(x.shape)}")
        rows = x.shape[0]
        if out is not None and tuple(getattr(out, "shape", ())) != (rows, self.out_features):
            check_array(out, "out", "(rows, out)", 2, self.backend)
            raise ValueError(f"out must have shape {(rows, self.out_features)}, got {tuple(out.shape)}")
        y = self.conv(x.reshape(rows, self.in_features, 1, 1),
                      None if out is None else out.reshape(rows, self.out_features, 1, 1), workspace=workspace)
        return y.reshape(rows, self.out_features)
