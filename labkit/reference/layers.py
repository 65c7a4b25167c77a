"""NumPy reference implementations of the CNN inference layers.

These are the ground truth every kernel of the course is checked against.
They favour clarity and correctness over speed, but ``conv2d`` is vectorized
(a strided window view and one tensor contraction per group) so that it stays
usable as a reference at realistic sizes.

Conventions (shared by every function here)
-------------------------------------------
* Activations are **NCHW**: ``(batch N, channels C, height H, width W)``.
* Convolution weights are **MCKK**: ``(M, C/groups, KH, KW)``; bias is ``(M,)``
  or ``None``.
* Dense weights are ``(in, out)``; bias is ``(out,)`` or ``None``.
* Computation is done in ``dtype`` (``np.float64`` by default, ``np.float32``
  allowed) and the result has that dtype.  Inputs of any real numeric dtype are
  converted first.
* Invalid input raises ``ValueError`` (wrong shape or value) or ``TypeError``
  (wrong kind of object) immediately, with a message that says how to fix it.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .arguments import (IntPair, as_real_array, bias_vector, check_dtype, conv_checks,
                        nchw, pair, real_array, window_count)

__all__ = [
    "conv2d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "global_avg_pool",
    "relu",
    "relu6",
    "tanh",
    "lrn",
    "dense",
    "softmax",
]

# convolution
# --------------------------------------------------------------------------
def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
           stride: IntPair = 1, pad: IntPair = 0, groups: int = 1,
           dtype: Any = np.float64, dilation: IntPair = 1) -> np.ndarray:
    """2-D convolution (cross-correlation, as in every DL framework).

    Args:
        x: input, NCHW ``(N, C, H, W)``.
        w: weights, ``(M, C/groups, KH, KW)`` (MCKK).
        b: bias ``(M,)`` or None.
        stride: int or ``(sh, sw)``, each >= 1.
        pad: int or ``(ph, pw)``, each >= 0: zeros added on both sides of each
            spatial axis (``pad=0`` is TensorFlow's ``'VALID'``).
        groups: channel groups; input channel group ``g`` feeds output channels
            ``g*M/groups .. (g+1)*M/groups - 1``.
        dtype: compute and result dtype (float64 default, or float32).
        dilation: int or ``(dh, dw)``, each >= 1: the window's taps are dh rows
            and dw columns apart.

    Returns:
        ``(N, M, Ho, Wo)`` with ``Ho = (H + 2*ph - dh*(KH-1) - 1) // sh + 1``
        (same for W), PyTorch's output size.
    """
    dt = check_dtype(dtype)
    x, w, b, (sh, sw), (ph, pw), groups, (ho, wo) = conv_checks(
        x, w, b, stride, pad, groups, dt, dilation)
    dh, dw = pair(dilation, "dilation", 1)
    n, c, _, _ = x.shape
    m, cg, kh, kw = w.shape
    mg = m // groups
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    # (N, C, H', W', span_h, span_w) view of the dilated windows, its taps every dh-th row and
    # dw-th column, then every stride-th window position
    win = sliding_window_view(x, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw][:, :, :ho, :wo]
    y = np.empty((n, m, ho, wo), dtype=dt)
    for g in range(groups):
        xg = win[:, g * cg:(g + 1) * cg]              # (N, Cg, Ho, Wo, KH, KW)
        wg = w[g * mg:(g + 1) * mg]                   # (Mg, Cg, KH, KW)
        yg = np.tensordot(xg, wg, axes=([1, 4, 5], [1, 2, 3]))  # (N, Ho, Wo, Mg)
        y[:, g * mg:(g + 1) * mg] = yg.transpose(0, 3, 1, 2)
    if b is not None:
        y += b[None, :, None, None]
    return y


def conv_transpose2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                     stride: IntPair = 1, pad: IntPair = 0, output_padding: IntPair = 0,
                     groups: int = 1, dilation: IntPair = 1, dtype: Any = np.float64) -> np.ndarray:
    """2-D transposed convolution (PyTorch's conv_transpose2d): the adjoint of ``conv2d``.

    Args:
        x: input ``(N, C_in, H, W)``.
        w: weights ``(C_in, C_out/groups, KH, KW)`` (PyTorch's ConvTranspose2d layout).
        b: bias ``(C_out,)`` or None.
        stride, pad, dilation: as the forward convolution whose adjoint this is.
        output_padding: int or ``(oph, opw)``, each smaller than the stride or the
            dilation: rows and columns added at the bottom and right of the output.

    Returns:
        ``(N, C_out, Ho, Wo)``, ``Ho = (H-1)*sh - 2*ph + dh*(KH-1) + oph + 1`` (same for W).
        Each input pixel scatters its window: y[n, o, i*sh - ph + kh*dh, j*sw - pw + kw*dw]
        += x[n, c, i, j] * w[c, o, kh, kw], for o in c's group.
    """
    dt = check_dtype(dtype)
    x = nchw(x, dt)
    w = real_array(w, "w", dt, 4)
    n, c, h, wd = x.shape
    ci, og, kh, kw = w.shape
    if isinstance(groups, (bool, np.bool_)) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if ci != c or c % groups:
        raise ValueError(f"w must be (C_in={c}, C_out/groups, KH, KW) with groups={groups} dividing C_in, "
                         f"got {w.shape}")
    (sh, sw), (ph, pw), (dh, dw) = (pair(stride, "stride", 1), pair(pad, "pad", 0),
                                    pair(dilation, "dilation", 1))
    oph, opw = pair(output_padding, "output_padding", 0)
    if not (oph < max(sh, dh) and opw < max(sw, dw)):
        raise ValueError(f"output_padding {output_padding!r} must be smaller than the stride or the dilation")
    ho, wo = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1, (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"the output would be {ho}x{wo}: less padding")
    m = og * groups
    b = bias_vector(b, m, dt, "output channel")
    cg = c // groups
    # The full scatter on a canvas with the padding's border, cropped afterwards.
    full = np.zeros((n, m, (h - 1) * sh + dh * (kh - 1) + 1 + oph, (wd - 1) * sw + dw * (kw - 1) + 1 + opw), dt)
    for g in range(groups):
        xg, wg = x[:, g * cg:(g + 1) * cg], w[g * cg:(g + 1) * cg]
        contrib = np.tensordot(xg, wg, axes=([1], [0]))          # (N, H, W, Og, KH, KW)
        for i in range(kh):
            for j in range(kw):
                full[:, g * og:(g + 1) * og, i * dh:i * dh + (h - 1) * sh + 1:sh,
                     j * dw:j * dw + (wd - 1) * sw + 1:sw] += contrib[..., i, j].transpose(0, 3, 1, 2)
    y = full[:, :, ph:ph + ho, pw:pw + wo]
    if y.shape[2:] != (ho, wo):   # the padding's crop reaches past the canvas: the rest are zeros
        y = np.pad(y, ((0, 0), (0, 0), (0, ho - y.shape[2]), (0, wo - y.shape[3])))
    y = np.ascontiguousarray(y)
    if b is not None:
        y += b[None, :, None, None]
    return y


# --------------------------------------------------------------------------
# pooling
# --------------------------------------------------------------------------
def _pool_windows(x: np.ndarray, k: tuple[int, int], s: tuple[int, int],
                  p: tuple[int, int], fill: float) -> np.ndarray:
    """(N, C, Ho, Wo, KH, KW) window view of x padded with ``fill``."""
    n, c, h, wd = x.shape
    ho = window_count(h, k[0], s[0], p[0], "height", "pooling window")
    wo = window_count(wd, k[1], s[1], p[1], "width", "pooling window")
    if p[0] or p[1]:
        x = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])),
                   constant_values=fill)
    win = sliding_window_view(x, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return win[:, :, :ho, :wo]


def _pool_args(k: Any, stride: Any, pad: Any):
    kk = pair(k, "k", 1)
    ss = kk if stride is None else pair(stride, "stride", 1)
    pp = pair(pad, "pad", 0)
    if pp[0] >= kk[0] or pp[1] >= kk[1]:
        raise ValueError(
            f"pad {pp} must be smaller than the pooling window {kk} "
            "(otherwise some windows would hold only padding)"
        )
    return kk, ss, pp


def max_pool2d(x: np.ndarray, k: IntPair, stride: IntPair | None = None,
               pad: IntPair = 0, *, dtype: Any = np.float64) -> np.ndarray:
    """Max pooling over ``k x k`` windows (NCHW in, NCHW out).

    ``stride`` defaults to ``k``.  With ``pad=0`` this is TensorFlow's
    ``'VALID'`` pooling: only windows that lie fully inside the input, so
    ``Ho = (H - KH) // sh + 1``.  With ``pad > 0`` the padding never wins the
    max (it is treated as -inf); ``pad`` must be smaller than ``k``.
    """
    dt = check_dtype(dtype)
    x = nchw(x, dt)
    kk, ss, pp = _pool_args(k, stride, pad)
    return _pool_windows(x, kk, ss, pp, -np.inf).max(axis=(4, 5))


def avg_pool2d(x: np.ndarray, k: IntPair, stride: IntPair | None = None,
               pad: IntPair = 0, *, dtype: Any = np.float64) -> np.ndarray:
    """Average pooling over ``k x k`` windows (NCHW in, NCHW out).

    ``stride`` defaults to ``k``.  With ``pad=0`` this is TensorFlow's
    ``'VALID'`` pooling (windows fully inside the input, each averaged over
    ``KH*KW`` values).  With ``pad > 0`` each window is averaged over its
    in-bounds elements only (padding is not counted), which is what
    TensorFlow's ``'SAME'`` average pooling does at the borders.
    """
    dt = check_dtype(dtype)
    x = nchw(x, dt)
    kk, ss, pp = _pool_args(k, stride, pad)
    total = _pool_windows(x, kk, ss, pp, 0.0).sum(axis=(4, 5))
    if pp == (0, 0):
        return total / dt.type(kk[0] * kk[1])
    ones = np.ones((1, 1) + x.shape[2:], dtype=dt)
    count = _pool_windows(ones, kk, ss, pp, 0.0).sum(axis=(4, 5))
    return total / count


def global_avg_pool(x: np.ndarray, *, dtype: Any = np.float64) -> np.ndarray:
    """Mean over the spatial axes: NCHW ``(N, C, H, W)`` -> ``(N, C)``."""
    dt = check_dtype(dtype)
    x = nchw(x, dt)
    return x.mean(axis=(2, 3))


# --------------------------------------------------------------------------
# element-wise activations (any shape)
# --------------------------------------------------------------------------
def relu(x: np.ndarray, *, dtype: Any = np.float64) -> np.ndarray:
    """``max(x, 0)`` element-wise, NaN kept (as PyTorch's relu); any shape, returns ``dtype``."""
    dt = check_dtype(dtype)
    x = np.asarray(as_real_array(x, "x"), dtype=dt)
    return np.maximum(x, dt.type(0))


def relu6(x: np.ndarray, *, dtype: Any = np.float64) -> np.ndarray:
    """``min(max(x, 0), 6)`` element-wise, NaN kept (as PyTorch's relu6); any shape, returns ``dtype``."""
    dt = check_dtype(dtype)
    x = np.asarray(as_real_array(x, "x"), dtype=dt)
    return np.clip(x, dt.type(0), dt.type(6))


def tanh(x: np.ndarray, *, dtype: Any = np.float64) -> np.ndarray:
    """Hyperbolic tangent element-wise; any shape, returns ``dtype``."""
    dt = check_dtype(dtype)
    x = np.asarray(as_real_array(x, "x"), dtype=dt)
    return np.tanh(x)


# --------------------------------------------------------------------------
# local response normalization
# --------------------------------------------------------------------------
def lrn(x: np.ndarray, depth_radius: int = 2, bias: float = 1.0,
        alpha: float = 2e-5, beta: float = 0.75, *,
        dtype: Any = np.float64) -> np.ndarray:
    """Local response normalization across channels, as ``tf.nn.local_response_normalization``.

    On NCHW input (channel axis 1), for channel ``d``::

        sqr_sum[n, d, h, w] = sum(x[n, d-r : d+r+1, h, w] ** 2)   # clipped at 0 and C-1
        y = x / (bias + alpha * sqr_sum) ** beta

    with ``r = depth_radius``.  Note that TensorFlow's ``alpha`` multiplies the
    plain sum (Caffe's ``alpha`` is divided by the window size ``2r+1``).
    """
    dt = check_dtype(dtype)
    x = nchw(x, dt)
    if isinstance(depth_radius, (bool, np.bool_)) or not isinstance(
            depth_radius, (int, np.integer)):
        raise TypeError(f"depth_radius must be an int, got {depth_radius!r}")
    r = int(depth_radius)
    if r < 0:
        raise ValueError(f"depth_radius must be >= 0, got {r}")
    for name, v in (("bias", bias), ("alpha", alpha), ("beta", beta)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(
                v, (int, float, np.integer, np.floating)):
            raise TypeError(f"{name} must be a real number, got {v!r}")
        if not np.isfinite(v):
            raise ValueError(f"{name} must be finite, got {v!r}")
    c = x.shape[1]
    # The window's 2r+1 shifted planes added (zeros past either end), not differences of prefix
    # sums: a NaN or an infinity then reaches the 2r+1 windows that hold it and no later channel.
    sq = np.pad(np.square(x).astype(np.float64), ((0, 0), (r, r), (0, 0), (0, 0)))
    sqr_sum = np.zeros(x.shape, dtype=np.float64)
    for o in range(2 * r + 1):
        sqr_sum += sq[:, o:o + c]
    denom = (dt.type(bias) + dt.type(alpha) * sqr_sum.astype(dt)) ** dt.type(beta)
    return (x / denom).astype(dt, copy=False)


# --------------------------------------------------------------------------
# dense layer and softmax
# --------------------------------------------------------------------------
def dense(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
          dtype: Any = np.float64) -> np.ndarray:
    """Fully connected layer ``x @ w + b``.

    Args:
        x: ``(N, in)`` (or a single vector ``(in,)``, giving ``(out,)``).
        w: ``(in, out)``.
        b: ``(out,)`` or None.
    """
    dt = check_dtype(dtype)
    xa = as_real_array(x, "x")
    if xa.ndim not in (1, 2):
        hint = ""
        if xa.ndim == 4:
            hint = "; flatten the activations first with x.reshape(len(x), -1)"
        raise ValueError(f"x must be 2-D (N, in) or 1-D (in,), got shape {xa.shape}{hint}")
    xa = np.asarray(xa, dtype=dt)
    w = real_array(w, "w", dt, 2, "(in, out)")
    if xa.shape[-1] != w.shape[0]:
        raise ValueError(
            f"features of x ({xa.shape[-1]}) must equal the rows of w ({w.shape[0]}); "
            "w must be shaped (in, out) -- transpose it if it is (out, in)"
        )
    b = bias_vector(b, w.shape[1], dt, "output feature")
    y = xa @ w
    if b is not None:
        y = y + b
    return y


def softmax(x: np.ndarray, axis: int = -1, *, dtype: Any = np.float64) -> np.ndarray:
    """Numerically stable softmax along ``axis`` (the max is subtracted first)."""
    dt = check_dtype(dtype)
    x = np.asarray(as_real_array(x, "x"), dtype=dt)
    if x.ndim == 0:
        raise ValueError("x must have at least one axis, got a scalar")
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, (bool, np.bool_)):
        raise TypeError(f"axis must be an int, got {axis!r}")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis} is out of range for x with shape {x.shape}")
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5, *,
               dtype: Any = np.float64) -> np.ndarray:
    """Layer normalization over the trailing ``gamma.shape`` of x: (x - mean) / sqrt(var + eps) *
    gamma + beta, the variance biased (divided by the count), as PyTorch's F.layer_norm and ONNX's
    LayerNormalization."""
    dt = check_dtype(dtype)
    x = np.asarray(as_real_array(x, "x"), dtype=dt)
    g = np.asarray(as_real_array(gamma, "gamma"), dtype=dt)
    b = np.asarray(as_real_array(beta, "beta"), dtype=dt)
    if g.shape != b.shape or x.shape[x.ndim - g.ndim:] != g.shape:
        raise ValueError(f"x {x.shape} must end in gamma's and beta's shape, got {g.shape} and {b.shape}")
    axes = tuple(range(x.ndim - g.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b
