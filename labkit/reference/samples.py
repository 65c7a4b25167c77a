"""Float64 references at a few output positions, on the arrays' own backend (CuPy or NumPy).

    ref, terms = conv_samples(xp, x, w, b, layer, idx, act)   # y.ravel()[idx] should be ref
    ok = abs(y.ravel()[idx] - ref) <= tol * terms

The autotuner checks each candidate's whole output for NaN (a value never written) and a few
hundred positions against these sums: a full float64 reference of AlexNet's conv1 at batch 1,024 would
cost more than the search.  ``terms`` is the same sum over absolute values: float32 rounding is
bounded by it, not by the sum itself (which may cancel).

The index arithmetic and the float64 sums run on the host with NumPy; the device only gathers the
values they need (one flat ``take`` of each operand).  On a GPU every CuPy operation is a kernel that
NVRTC compiles the first time a process meets it, a second or more each on a busy host: a search's
first check used to compile a dozen.  Where the gathered values would be many (over HOST_GATHER_MAX:
a huge receptive field at 512 positions), the sums stay on the GPU.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["conv_samples", "conv_transpose_samples", "gemm_samples", "activate", "sample_positions",
           "to_host"]

# The most values one gather brings (per operand).  Beyond it the sums stay on a GPU; either way the
# samples go in parts of at most this many, so that the host's index arrays and their temporaries
# stay within some hundred MB.
HOST_GATHER_MAX = 1 << 24


_ERF = np.vectorize(math.erf, otypes=[np.float64])


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array (a copy from the GPU where it lives there)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _take(x, flat: np.ndarray, m):
    """x's elements at the flat positions ``flat`` (a host int64 array of any shape), as float64 on
    module ``m`` (NumPy: on the host): one gather on x's backend."""
    flat_x = x.reshape(-1)
    if isinstance(flat_x, np.ndarray):
        return flat_x[flat].astype(np.float64)
    import cupy        # x lives on a GPU
    got = flat_x[cupy.asarray(flat.reshape(-1))].reshape(flat.shape)
    return got.get().astype(np.float64) if m is np else got.astype(cupy.float64)


def sample_positions(xp, size: int, count: int = 512, seed: int = 0):
    """``count`` flat positions of an output of ``size`` elements (all of them if fewer), always
    with the first and the last; int64, on ``xp``'s backend (drawn on the host)."""
    if size <= count:
        idx = np.arange(size, dtype=np.int64)
    else:
        rng = np.random.RandomState(seed)
        idx = np.concatenate([np.asarray([0, size - 1], dtype=np.int64),
                              rng.randint(0, size, count - 2).astype(np.int64)])
    return xp.asarray(idx)


def activate(xp, v, act: str | None):
    """The kernels' epilogues in float64: None, "relu", "relu6", "tanh", "gelu", "gelu_tanh"; each
    keeps a NaN, as PyTorch's do (``maximum`` and ``minimum`` propagate it, where ``fmax`` would drop
    it)."""
    if act is None:
        return v
    if act == "relu":
        return xp.maximum(v, 0.0)
    if act == "relu6":
        return xp.minimum(xp.maximum(v, 0.0), 6.0)
    if act == "tanh":
        return xp.tanh(v)
    if act == "gelu":            # v/2 (1 + erf(v / sqrt 2)); erf on the host (the samples are few)
        h = to_host(v)
        return xp.asarray(0.5 * h * (1.0 + _ERF(h / math.sqrt(2.0))))
    if act == "gelu_tanh":
        return 0.5 * v * (1.0 + xp.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3)))
    raise ValueError(f"activation must be None, 'relu', 'relu6', 'tanh', 'gelu' or 'gelu_tanh', got {act!r}")


def _sums_module(xp, values: int):
    """Where the sums run: the host (NumPy), or a GPU's CuPy where the gathered values are many (the
    host's arithmetic would cost seconds, more than compiling CuPy's kernels once)."""
    return xp if xp is not np and values > HOST_GATHER_MAX else np


def _in_chunks(pos: np.ndarray, per_sample: int, sums, m):
    """``sums(part)`` -> (ref, terms) on module ``m`` over ``pos`` cut in parts whose gathers hold at
    most HOST_GATHER_MAX values (the index arrays of a huge receptive field at 512 positions)."""
    step = max(1, HOST_GATHER_MAX // max(1, per_sample))
    parts = [sums(pos[i:i + step]) for i in range(0, pos.size, step)] or [sums(pos)]
    return m.concatenate([r for r, _ in parts]), m.concatenate([t for _, t in parts])


def conv_samples(xp, x, w, b, layer, idx, act: str | None = None, residual=None):
    """(reference, terms) at the flat positions ``idx`` of y = act(conv(x, w) + b [+ residual]),
    for ``layer`` (a labkit.shapes.ConvLayer: kernel, stride, padding, dilation, groups); x (N, C, H, W)
    and w (M, C/G, KH, KW) on ``xp``'s backend, b (M,) or None; both results on ``xp``'s backend."""
    N = int(x.shape[0])
    C, H, W, M, G = layer.C, layer.H, layer.W, layer.M, layer.groups
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    Ho, Wo = layer.out_hw
    cg, taps = C // G, C // G * KH * KW
    pos = to_host(idx).astype(np.int64)
    mod = _sums_module(xp, pos.size * taps)

    def sums(pos):
        n, m, h, o = np.unravel_index(pos, (N, M, Ho, Wo))
        c = (m // (M // G))[:, None] * cg + np.arange(cg)[None, :]              # (S, Cg)
        ih = h[:, None] * sh - ph + dh * np.arange(KH)[None, :]                  # (S, KH)
        iw = o[:, None] * sw - pw + dw * np.arange(KW)[None, :]                  # (S, KW)
        inside = ((ih >= 0) & (ih < H))[:, None, :, None] & ((iw >= 0) & (iw < W))[:, None, None, :]
        at = (((n[:, None, None, None] * C + c[:, :, None, None]) * H + np.clip(ih, 0, H - 1)[:, None, :, None]) * W
              + np.clip(iw, 0, W - 1)[:, None, None, :])
        xs = _take(x, at, mod) * mod.asarray(inside)                             # (S, Cg, KH, KW)
        ws = _take(w, m[:, None] * taps + np.arange(taps)[None, :], mod).reshape(xs.shape)
        return (xs * ws).sum(axis=(1, 2, 3)), (mod.abs(xs) * mod.abs(ws)).sum(axis=(1, 2, 3))

    ref, terms = _in_chunks(pos, taps, sums, mod)
    if b is not None:
        bv = _take(b, np.unravel_index(pos, (N, M, Ho, Wo))[1], mod)
        ref, terms = ref + bv, terms + mod.abs(bv)
    if residual is not None:
        r = _take(residual, pos, mod)
        ref, terms = ref + r, terms + mod.abs(r)
    return xp.asarray(activate(mod, ref, act)), xp.asarray(terms)


def conv_transpose_samples(xp, x, w, b, geo, idx, act: str | None = None):
    """(reference, terms) at the flat positions ``idx`` of y = act(conv_transpose2d(x, w) + b) for
    ``geo`` (a labkit.ops.conv_transpose.TransposeGeometry: anything with C, H, W, M, kernel, stride,
    pad, dilation, groups and out_hw); x (N, C_in, H, W), w (C_in, C_out/G, KH, KW).  Output pixel h
    takes tap k from input row (h + P - k*D) / S where that is a whole number inside the input."""
    N = int(x.shape[0])
    G, (KH, KW), (sh, sw), (ph, pw), (dh, dw) = geo.groups, geo.kernel, geo.stride, geo.pad, geo.dilation
    Ho, Wo = geo.out_hw
    cg, og = geo.C // G, geo.M // G
    taps = cg * KH * KW
    pos = to_host(idx).astype(np.int64)
    mod = _sums_module(xp, pos.size * taps)

    def sums(pos):
        n, m, h, o = np.unravel_index(pos, (N, geo.M, Ho, Wo))
        c = (m // og)[:, None] * cg + np.arange(cg)[None, :]                    # (S, Cg)
        th = h[:, None] + ph - dh * np.arange(KH)[None, :]                       # (S, KH): S * input row
        tw = o[:, None] + pw - dw * np.arange(KW)[None, :]
        ih, iw = th // sh, tw // sw
        ok_h = (th % sh == 0) & (ih >= 0) & (ih < geo.H)
        ok_w = (tw % sw == 0) & (iw >= 0) & (iw < geo.W)
        inside = ok_h[:, None, :, None] & ok_w[:, None, None, :]
        at = (((n[:, None, None, None] * geo.C + c[:, :, None, None]) * geo.H
               + np.clip(ih, 0, geo.H - 1)[:, None, :, None]) * geo.W + np.clip(iw, 0, geo.W - 1)[:, None, None, :])
        xs = _take(x, at, mod) * mod.asarray(inside)                             # (S, Cg, KH, KW)
        # w (C_in, C_out/G, KH, KW): tap (kh, kw) of input channel c for output channel m
        wat = (((c[:, :, None, None] * og + (m % og)[:, None, None, None]) * KH + np.arange(KH)[None, None, :, None])
               * KW + np.arange(KW)[None, None, None, :])
        ws = _take(w, wat, mod)                                                  # (S, Cg, KH, KW)
        return (xs * ws).sum(axis=(1, 2, 3)), (mod.abs(xs) * mod.abs(ws)).sum(axis=(1, 2, 3))

    ref, terms = _in_chunks(pos, taps, sums, mod)
    if b is not None:
        bv = _take(b, np.unravel_index(pos, (N, geo.M, Ho, Wo))[1], mod)
        ref, terms = ref + bv, terms + mod.abs(bv)
    return xp.asarray(activate(mod, ref, act)), xp.asarray(terms)


def gemm_samples(xp, a, bm, bias, idx, act: str | None = None, bias_per: str = "column"):
    """(reference, terms) at the flat positions ``idx`` of c = act(a @ bm + bias), a (M, K), bm (K, N);
    ``bias_per`` "column" (one value per column of c) or "row"."""
    Mr, K, Nc = int(a.shape[0]), int(a.shape[1]), int(bm.shape[1])
    k = np.arange(K)[None, :]
    pos = to_host(idx).astype(np.int64)
    mod = _sums_module(xp, pos.size * K)

    def sums(pos):
        i, j = np.unravel_index(pos, (Mr, Nc))
        ai, bj = _take(a, i[:, None] * K + k, mod), _take(bm, k * Nc + j[:, None], mod)   # (S, K) each
        return (ai * bj).sum(axis=1), (mod.abs(ai) * mod.abs(bj)).sum(axis=1)

    ref, terms = _in_chunks(pos, K, sums, mod)
    i, j = np.unravel_index(pos, (Mr, Nc))
    if bias is not None:
        bv = _take(bias, j if bias_per == "column" else i, mod)
        ref, terms = ref + bv, terms + mod.abs(bv)
    return xp.asarray(activate(mod, ref, act)), xp.asarray(terms)

