"""Three CPU convolutions, from the most readable to the fastest (notebook 01).

All three compute the same thing as :func:`labkit.reference.conv2d` with
``groups=1``:

* :func:`conv2d_loops` -- seven nested Python loops, one multiply-add at a
  time.  Written to be read, not run: use it on tiny inputs only.
* :func:`conv2d_vectorized` -- one loop over the ``KH*KW`` filter taps; each
  tap is a whole-tensor contraction over the input channels.
* :func:`conv2d_im2col` -- unroll every input window into a column
  (:func:`im2col`), then a single matrix multiply (GEMM) does the whole
  convolution.

Layouts: input NCHW ``(N, C, H, W)``, weights MCKK ``(M, C, KH, KW)``, bias
``(M,)`` or None, output NCHW ``(N, M, Ho, Wo)``.  ``stride`` and ``pad``
(zero padding) may be an int or an ``(h, w)`` pair.

dtype: ``dtype=None`` (the default) computes in float32 when ``x`` and ``w``
are both float32 and in float64 otherwise; pass ``dtype=np.float32`` or
``np.float64`` to choose explicitly.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .arguments import IntPair, as_real_array, check_dtype, conv_checks, nchw, pair

__all__ = ["conv2d_loops", "conv2d_vectorized", "conv2d_im2col", "im2col"]


def _compute_dtype(x: Any, w: Any, dtype: Any) -> np.dtype:
    if dtype is not None:
        return check_dtype(dtype)
    xa = as_real_array(x, "x")
    wa = as_real_array(w, "w")
    if xa.dtype == np.float32 and wa.dtype == np.float32:
        return np.dtype(np.float32)
    return np.dtype(np.float64)


def _n_threads(threads: Any) -> int:
    if threads is None:
        return os.cpu_count() or 1
    if isinstance(threads, (bool, np.bool_)) or not isinstance(threads, (int, np.integer)):
        raise TypeError(f"threads must be a positive int or None, got {threads!r}")
    if threads < 1:
        raise ValueError(f"threads must be >= 1 (or None for one per CPU core), got {threads}")
    return int(threads)


def _prepare(x, w, b, stride, pad, dtype):
    dt = _compute_dtype(x, w, dtype)
    x, w, b, s, p, _, out = conv_checks(x, w, b, stride, pad, 1, dt)
    if p[0] or p[1]:
        x = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    return dt, x, w, b, s, out


def conv2d_loops(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                 stride: IntPair = 1, pad: IntPair = 0,
                 dtype: Any = None) -> np.ndarray:
    """Convolution as seven nested loops (n, m, h, w, c, p, q) -- tiny inputs only.

    ``x`` NCHW ``(N, C, H, W)``, ``w`` ``(M, C, KH, KW)``, ``b`` ``(M,)`` or
    None; returns ``(N, M, Ho, Wo)``.  CPython manages a few million
    multiply-adds per second here: one image of the course's layer 2
    (16*18*18*150 = 0.8 million) takes a fraction of a second, a batch of
    1,000 several minutes.
    """
    dt, x, w, b, (sh, sw), (h_out, w_out) = _prepare(x, w, b, stride, pad, dtype)
    n_batch, n_chan = x.shape[:2]
    m_out, _, k_h, k_w = w.shape
    y = np.zeros((n_batch, m_out, h_out, w_out), dtype=dt)
    for n in range(n_batch):                     # every image in the batch
        for m in range(m_out):                   # every output feature map
            for h in range(h_out):               # every output row
                for wo in range(w_out):          # every output column
                    acc = dt.type(0) if b is None else b[m]
                    for c in range(n_chan):      # sum over input channels
                        for p in range(k_h):     # ... and the KH x KW window
                            for q in range(k_w):
                                acc += x[n, c, h * sh + p, wo * sw + q] * w[m, c, p, q]
                    y[n, m, h, wo] = acc
    return y


def conv2d_vectorized(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                      stride: IntPair = 1, pad: IntPair = 0,
                      dtype: Any = None) -> np.ndarray:
    """Convolution with one Python loop over the ``KH*KW`` filter taps.

    For tap ``(p, q)`` the shifted input slice ``x[:, :, p::sh, q::sw]``
    (``(N, C, Ho, Wo)``) is contracted over channels with ``w[:, :, p, q]``
    (``(M, C)``) and accumulated.  Same contract as :func:`conv2d_loops`.
    """
    dt, x, w, b, (sh, sw), (h_out, w_out) = _prepare(x, w, b, stride, pad, dtype)
    n_batch = x.shape[0]
    m_out, _, k_h, k_w = w.shape
    acc = np.zeros((m_out, n_batch, h_out, w_out), dtype=dt)
    for p in range(k_h):
        for q in range(k_w):
            xs = x[:, :, p:p + sh * (h_out - 1) + 1:sh, q:q + sw * (w_out - 1) + 1:sw]
            # (M, C) . (N, C, Ho, Wo) over C -> (M, N, Ho, Wo)
            acc += np.tensordot(w[:, :, p, q], xs, axes=([1], [1]))
    y = np.ascontiguousarray(acc.transpose(1, 0, 2, 3))
    if b is not None:
        y += b[None, :, None, None]
    return y


def im2col(x: np.ndarray, k: IntPair, *, stride: IntPair = 1, pad: IntPair = 0,
           dtype: Any = None) -> np.ndarray:
    """Unroll every ``KH x KW`` window of ``x`` into a column.

    Args:
        x: NCHW ``(N, C, H, W)``.
        k: kernel size, int or ``(KH, KW)``.
        stride, pad: as in :func:`conv2d_im2col`.
        dtype: None keeps float32 input as float32 (anything else becomes
            float64), or np.float32 / np.float64.

    Returns:
        ``cols`` of shape ``(N, C*KH*KW, Ho*Wo)``: ``cols[n, :, j]`` is the
        window of image ``n`` under output pixel ``j`` (row-major over
        ``(Ho, Wo)``), flattened in ``(c, p, q)`` order -- the same order as
        ``w.reshape(M, -1)``.  So ``w.reshape(M, -1) @ cols`` is the
        convolution, already in ``(N, M, Ho*Wo)`` i.e. NCHW order.
    """
    if dtype is None:
        xa = as_real_array(x, "x")
        dt = np.dtype(np.float32) if xa.dtype == np.float32 else np.dtype(np.float64)
    else:
        dt = check_dtype(dtype)
    kh, kw = pair(k, "k", 1)
    x = nchw(x, dt)
    dummy_w = np.zeros((1, x.shape[1], kh, kw), dtype=dt)
    x, _, _, (sh, sw), (ph, pw), _, (h_out, w_out) = conv_checks(
        x, dummy_w, None, stride, pad, 1, dt)
    if ph or pw:
        x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    return _im2col_padded(x, kh, kw, sh, sw, h_out, w_out)


def _im2col_padded(x: np.ndarray, kh: int, kw: int, sh: int, sw: int,
                   h_out: int, w_out: int) -> np.ndarray:
    n, c = x.shape[:2]
    # (N, C, H', W', KH, KW) view without copying; keep every stride-th window
    win = sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
    win = win[:, :, :h_out, :w_out]
    # (N, C, KH, KW, Ho, Wo): the copy made by reshape reads rows of the image
    return win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * kh * kw, h_out * w_out)


def conv2d_im2col(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
                  stride: IntPair = 1, pad: IntPair = 0, dtype: Any = None,
                  chunk: int | None = 32, threads: int | None = None) -> np.ndarray:
    """Convolution as im2col followed by one matrix multiply (GEMM).

    ``y = w.reshape(M, C*KH*KW) @ im2col(x)``, reshaped to ``(N, M, Ho, Wo)``.
    Same contract as :func:`conv2d_loops`.

    ``chunk``: the batch is processed ``chunk`` images at a time (im2col plus
    one matmul per block), so that each block's column matrix stays in the CPU
    cache; the result is identical.  ``chunk=None`` unrolls the whole batch at
    once (the textbook form, but the column matrix is ``KH*KW`` times larger
    than ``x``, and slower for large batches).

    ``threads``: blocks are independent, so they are spread over this many
    threads (NumPy releases the GIL while copying and multiplying).  None
    means one per CPU core; 1 runs them one after the other.
    """
    dt, x, w, b, (sh, sw), (h_out, w_out) = _prepare(x, w, b, stride, pad, dtype)
    if chunk is not None:
        if isinstance(chunk, (bool, np.bool_)) or not isinstance(chunk, (int, np.integer)):
            raise TypeError(f"chunk must be a positive int or None, got {chunk!r}")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1 (or None for the whole batch), got {chunk}")
    n_threads = _n_threads(threads)
    n_batch = x.shape[0]
    m_out, _, kh, kw = w.shape
    w_mat = w.reshape(m_out, -1)                   # (M, C*KH*KW), (c, p, q) order
    y = np.empty((n_batch, m_out, h_out * w_out), dtype=dt)
    step = n_batch if chunk is None else int(chunk)
    starts = range(0, n_batch, step)

    def block(i: int) -> None:
        cols = _im2col_padded(x[i:i + step], kh, kw, sh, sw, h_out, w_out)
        np.matmul(w_mat, cols, out=y[i:i + step])  # (M, CKK) @ (n, CKK, HoWo)

    workers = min(n_threads, len(starts))
    if workers > 1:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(block, starts))
    else:
        for i in starts:
            block(i)
    y = y.reshape(n_batch, m_out, h_out, w_out)
    if b is not None:
        y += b[None, :, None, None]
    return y
