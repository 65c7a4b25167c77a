"""Float64 NumPy references of the backward pass (the gradients every backward kernel is tested
against), the training step's loss and optimizer, and a central-difference gradient check that tests
the references themselves.

    dx, dw, db = conv2d_backward(x, w, dy, stride=1, pad=1)
    loss, dlogits = softmax_cross_entropy(logits, labels)       # the mean over the batch
    err = gradient_check(lambda x: loss_of(x), x, analytic_dx)  # relative error, float64

Conventions are labkit.reference.layers': NCHW activations, (M, C, K, K) weights, dense ``x @ w + b``
with w (in, out).  Every function computes in float64.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .layers import conv2d

__all__ = ["conv2d_backward", "relu_backward", "global_avg_pool_backward", "dense_backward",
           "softmax_cross_entropy", "sgd_momentum", "gradient_check", "numeric_gradient"]


def _f64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def conv2d_backward(x, w, dy, *, stride: int = 1, pad: int = 0):
    """Gradients of y = conv2d(x, w, b, stride, pad) given dy = dL/dy: (dx, dw, db).

    dx[n, c, h, w'] = sum over m, kh, kw with h = oh*S - P + kh, w' = ow*S - P + kw of
    dy[n, m, oh, ow] * w[m, c, kh, kw];  dw[m, c, kh, kw] = sum over n, oh, ow of
    dy[n, m, oh, ow] * x_padded[n, c, oh*S + kh, ow*S + kw];  db[m] = sum of dy[:, m]."""
    x, w, dy = _f64(x), _f64(w), _f64(dy)
    N, C, H, W = x.shape
    M, C2, K, K2 = w.shape
    if C2 != C or K != K2:
        raise ValueError(f"w {w.shape} does not fit x {x.shape} (square kernels, groups 1)")
    HO, WO = (H + 2 * pad - K) // stride + 1, (W + 2 * pad - K) // stride + 1
    if dy.shape != (N, M, HO, WO):
        raise ValueError(f"dy must be {(N, M, HO, WO)}, got {dy.shape}")
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    dxp = np.zeros_like(xp)
    dw = np.zeros_like(w)
    for kh in range(K):
        for kw in range(K):
            win = xp[:, :, kh:kh + stride * HO:stride, kw:kw + stride * WO:stride]   # (N, C, HO, WO)
            dw[:, :, kh, kw] = np.einsum("nmhw,nchw->mc", dy, win)
            dxp[:, :, kh:kh + stride * HO:stride, kw:kw + stride * WO:stride] += np.einsum("nmhw,mc->nchw", dy,
                                                                                          w[:, :, kh, kw])
    dx = dxp[:, :, pad:pad + H, pad:pad + W]
    return dx, dw, dy.sum(axis=(0, 2, 3))


def relu_backward(y, dy) -> np.ndarray:
    """dL/dx of y = relu(x), from the output y (x > 0 exactly where y > 0): 0 where y <= 0, else dy.
    PyTorch's rule (threshold_backward), NaN included: where y is NaN the comparison fails and dy
    passes, so a NaN in the forward pass is not hidden from the gradient."""
    return np.where(_f64(y) <= 0, 0.0, _f64(dy))


def global_avg_pool_backward(dy, shape) -> np.ndarray:
    """dL/dx of y = mean over H, W of x (N, C, H, W): each input gets dy / (H * W)."""
    N, C, H, W = shape
    return np.broadcast_to(_f64(dy).reshape(N, C, 1, 1) / (H * W), shape).copy()


def dense_backward(x, w, dy):
    """Gradients of y = x @ w + b, x (N, in), w (in, out): (dx, dw, db)."""
    x, w, dy = _f64(x), _f64(w), _f64(dy)
    return dy @ w.T, x.T @ dy, dy.sum(axis=0)


def softmax_cross_entropy(logits, labels):
    """The mean cross-entropy of softmax(logits) against integer labels, and its gradient
    (softmax - one_hot) / N: (loss, dlogits).  Stable: the row max is subtracted first."""
    z = _f64(logits)
    labels = np.asarray(labels)
    N = z.shape[0]
    if labels.shape != (N,) or labels.dtype.kind not in "iu" or labels.min() < 0 or labels.max() >= z.shape[1]:
        raise ValueError(f"labels must be {N} integers in [0, {z.shape[1]})")
    shifted = z - z.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[np.arange(N), labels].mean()
    d = np.exp(log_p)
    d[np.arange(N), labels] -= 1.0
    return loss, d / N


def sgd_momentum(p, g, v, *, lr: float, momentum: float, weight_decay: float):
    """One step of SGD with momentum and weight decay, as PyTorch's SGD does it (no dampening, not
    Nesterov): g' = g + wd * p; v = momentum * v + g'; p = p - lr * v.  Returns (p, v)."""
    p, g, v = _f64(p), _f64(g), _f64(v)
    v = momentum * v + g + weight_decay * p
    return p - lr * v, v


def numeric_gradient(f: Callable[[np.ndarray], float], x, *, eps: float = 1e-6, at=None) -> np.ndarray:
    """Central differences (f(x + eps e_i) - f(x - eps e_i)) / 2 eps of scalar ``f``, float64, at
    every index of x (or at the flat indices ``at``: the others are left 0)."""
    x = _f64(x).copy()
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for i in (range(x.size) if at is None else at):
        old = flat[i]
        flat[i] = old + eps
        up = f(x)
        flat[i] = old - eps
        down = f(x)
        flat[i] = old
        gflat[i] = (up - down) / (2 * eps)
    return grad


def gradient_check(f: Callable[[np.ndarray], float], x, analytic, *, eps: float = 1e-6, samples: int | None = None,
                   rng=None) -> float:
    """The relative error max |numeric - analytic| / max(|numeric|, |analytic|, 1e-12) of ``analytic``
    against central differences of scalar ``f`` at ``x`` (all entries, or ``samples`` random ones)."""
    analytic = _f64(analytic)
    at = None
    if samples is not None and samples < analytic.size:
        at = (rng or np.random.default_rng()).choice(analytic.size, samples, replace=False)
    num = numeric_gradient(f, x, eps=eps, at=at)
    a, n = analytic.reshape(-1), num.reshape(-1)
    if at is not None:
        a, n = a[at], n[at]
    scale = max(np.abs(n).max(initial=0.0), np.abs(a).max(initial=0.0), 1e-12)
    return float(np.abs(n - a).max(initial=0.0) / scale)


def conv2d_loss(x, w, b, dy, *, stride: int = 1, pad: int = 0) -> float:
    """sum(conv2d(x, w, b) * dy): a scalar whose gradient with respect to conv2d's output is dy (what a
    gradient check of conv2d_backward differentiates)."""
    return float((conv2d(x, w, b, stride=stride, pad=pad) * _f64(dy)).sum())
