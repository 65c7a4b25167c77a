"""Layer normalization over the trailing dimensions (labkit/kernels/layer_norm.cu), on the backend in
use: ONNX's LayerNormalization, PyTorch's F.layer_norm (ConvNeXt's, on channels-last pixels).

    ln = LayerNorm(gamma, beta, eps=1e-6)       # gamma, beta float32 on the backend, shape (D,) or (..., D)
    y = ln(x)                                  # x (..., *gamma.shape): each row of gamma.size values

The rows are the leading dimensions of x flattened, the row's values the trailing ones (gamma's
shape); one warp per row.  A shape's launch is prepared once; a call checks x and launches.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..checks import array_module, array_type, check_array, fast_input, output
from ..loader import load
from .plans import cdiv

__all__ = ["LayerNorm", "THREADS"]

THREADS = 256


class LayerNorm:
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the trailing ``gamma.shape`` of x (the
    biased variance, as PyTorch and ONNX compute it)."""

    def __init__(self, gamma, beta, eps: float = 1e-5):
        self.backend = backends.current()
        xp = array_module(self.backend)
        for name, v in (("gamma", gamma), ("beta", beta)):
            check_array(v, name, "the normalized dimensions", getattr(v, "ndim", 1), self.backend, xp)
        if gamma.shape != beta.shape or gamma.size < 1:
            raise ValueError(f"gamma and beta must have one non-empty shape, got {gamma.shape} and {beta.shape}")
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not np.isfinite(eps) or eps < 0:
            raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
        self.gamma, self.beta, self.eps = gamma.reshape(-1), beta.reshape(-1), np.float32(eps)
        self.norm_shape = tuple(int(v) for v in gamma.shape)
        self._kind = array_type(self.backend)
        self._plans: dict[tuple, object] = {}

    def __call__(self, x, out=None):
        if not (fast_input(x, self._kind) and x.shape in self._plans):
            check_array(x, "x", "any layout", x.ndim if hasattr(x, "ndim") else 1, self.backend)
            k = len(self.norm_shape)
            if x.ndim < k or tuple(x.shape[x.ndim - k:]) != self.norm_shape:
                raise ValueError(f"x must end in the normalized shape {self.norm_shape}, got {tuple(x.shape)}")
        launch = self._plans.get(x.shape)
        if launch is None:
            D = int(np.prod(self.norm_shape, dtype=np.int64))
            R = int(np.prod(x.shape, dtype=np.int64)) // D
            if D > 2**31 - 1:
                raise ValueError(f"rows of {D} values: over the kernel's 32-bit index")
            launch = self._plans[x.shape] = load("layer_norm").get_function("layer_norm_rows").launcher(
                (max(1, cdiv(R, THREADS // 32)),), (THREADS,),
                (None, self.gamma, self.beta, None, np.int64(R), np.int32(D), self.eps))
        y = output(out, x.shape, "any layout", (x, self.gamma, self.beta), backend=self.backend)
        launch(x, y)
        return y
