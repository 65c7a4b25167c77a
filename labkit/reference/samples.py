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

import numpy as np

__all__ = ["conv_samples", "conv_transpose_samples", "gemm_samples", "activate", "sample_positions",
           "to_host"]

# The most values one gather brings to the host (per operand).  Beyond it the sums stay on a GPU;
# on the CPU executor the samples go in parts of at most this many, so that the index arrays and
# their temporaries stay within some hundred MB.
HOST_GATHER_MAX = 1 << 24


def to_host(a) -> np.ndarray:
    """``a`` as a NumPy array (a copy from the GPU where it lives there)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def _take(x, flat: np.ndarray) -> np.ndarray:
    """x's elements at the flat positions ``flat`` (a host int64 array of any shape), as float64 on the
    host: one gather on x's backend."""
    xp_mod = type(x).__module__.split(".")[0]
    flat_x = x.reshape(-1)
    if xp_mod == "cupy":
        import cupy
        return flat_x[cupy.asarray(flat.reshape(-1))].get().astype(np.float64).reshape(flat.shape)
    return np.asarray(flat_x)[flat].astype(np.float64)


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
    """The kernels' epilogues in float64: None, "relu", "relu6", "tanh"; each keeps a NaN, as
    PyTorch's do (``maximum`` and ``minimum`` propagate it, where ``fmax`` would drop it)."""
    if act is None:
        return v
    if act == "relu":
        return xp.maximum(v, 0.0)
    if act == "relu6":
        return xp.minimum(xp.maximum(v, 0.0), 6.0)
    if act == "tanh":
        return xp.tanh(v)
    raise ValueError(f"activation must be None, 'relu', 'relu6' or 'tanh', got {act!r}")


def _on_device(xp, values: int) -> bool:
    """Whether the sums should stay on a GPU: where the gathered values are many, the host's
    arithmetic costs seconds, more than compiling CuPy's kernels once (on NumPy, always the host)."""
    return xp is not np and values > HOST_GATHER_MAX


def _in_chunks(pos: np.ndarray, per_sample: int, sums) -> tuple[np.ndarray, np.ndarray]:
    """``sums(part)`` -> (ref, terms) over ``pos`` cut in parts whose gathers hold at most
    HOST_GATHER_MAX values (a huge receptive field at 512 positions would not fit the host at once)."""
    step = max(1, HOST_GATHER_MAX // max(1, per_sample))
    parts = [sums(pos[i:i + step]) for i in range(0, pos.size, step)] or [sums(pos)]
    return np.concatenate([r for r, _ in parts]), np.concatenate([t for _, t in parts])


def conv_samples(xp, x, w, b, layer, idx, act: str | None = None, residual=None):
    """(reference, terms) at the flat positions ``idx`` of y = act(conv(x, w) + b [+ residual]),
    for ``layer`` (a labkit.shapes.ConvLayer: kernel, stride, padding, dilation, groups); x (N, C, H, W)
    and w (M, C/G, KH, KW) on ``xp``'s backend, b (M,) or None; both results on ``xp``'s backend."""
    N = int(x.shape[0])
    C, H, W, M, G = layer.C, layer.H, layer.W, layer.M, layer.groups
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    Ho, Wo = layer.out_hw
    cg, taps = C // G, C // G * KH * KW

    def sums(pos):
        n, m, h, o = np.unravel_index(pos, (N, M, Ho, Wo))
        c = (m // (M // G))[:, None] * cg + np.arange(cg)[None, :]              # (S, Cg)
        ih = h[:, None] * sh - ph + dh * np.arange(KH)[None, :]                  # (S, KH)
        iw = o[:, None] * sw - pw + dw * np.arange(KW)[None, :]                  # (S, KW)
        inside = ((ih >= 0) & (ih < H))[:, None, :, None] & ((iw >= 0) & (iw < W))[:, None, None, :]
        at = (((n[:, None, None, None] * C + c[:, :, None, None]) * H + np.clip(ih, 0, H - 1)[:, None, :, None]) * W
              + np.clip(iw, 0, W - 1)[:, None, None, :])
        xs = _take(x, at) * inside                                               # (S, Cg, KH, KW)
        ws = _take(w, m[:, None] * taps + np.arange(taps)[None, :]).reshape(xs.shape)
        return (xs * ws).sum(axis=(1, 2, 3)), (np.abs(xs) * np.abs(ws)).sum(axis=(1, 2, 3))

    pos = to_host(idx).astype(np.int64)
    if _on_device(xp, pos.size * taps):
        return _conv_samples_xp(xp, x, w, b, layer, idx, act, residual)
    ref, terms = _in_chunks(pos, taps, sums)
    m = np.unravel_index(pos, (N, M, Ho, Wo))[1]
    if b is not None:
        bv = _take(b, m)
        ref, terms = ref + bv, terms + np.abs(bv)
    if residual is not None:
        r = _take(residual, pos)
        ref, terms = ref + r, terms + np.abs(r)
    return xp.asarray(activate(np, ref, act)), xp.asarray(terms)


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
        xs = _take(x, at) * inside                                               # (S, Cg, KH, KW)
        # w (C_in, C_out/G, KH, KW): tap (kh, kw) of input channel c for output channel m
        wat = (((c[:, :, None, None] * og + (m % og)[:, None, None, None]) * KH + np.arange(KH)[None, None, :, None])
               * KW + np.arange(KW)[None, None, None, :])
        ws = _take(w, wat)                                                       # (S, Cg, KH, KW)
        return (xs * ws).sum(axis=(1, 2, 3)), (np.abs(xs) * np.abs(ws)).sum(axis=(1, 2, 3))

    pos = to_host(idx).astype(np.int64)
    if _on_device(xp, pos.size * taps):
        return _conv_transpose_samples_xp(xp, x, w, b, geo, idx, act)
    ref, terms = _in_chunks(pos, taps, sums)
    if b is not None:
        bv = _take(b, np.unravel_index(pos, (N, geo.M, Ho, Wo))[1])
        ref, terms = ref + bv, terms + np.abs(bv)
    return xp.asarray(activate(np, ref, act)), xp.asarray(terms)


def gemm_samples(xp, a, bm, bias, idx, act: str | None = None, bias_per: str = "column"):
    """(reference, terms) at the flat positions ``idx`` of c = act(a @ bm + bias), a (M, K), bm (K, N);
    ``bias_per`` "column" (one value per column of c) or "row"."""
    Mr, K, Nc = int(a.shape[0]), int(a.shape[1]), int(bm.shape[1])
    k = np.arange(K)[None, :]

    def sums(pos):
        i, j = np.unravel_index(pos, (Mr, Nc))
        ai, bj = _take(a, i[:, None] * K + k), _take(bm, k * Nc + j[:, None])      # (S, K) each
        return (ai * bj).sum(axis=1), (np.abs(ai) * np.abs(bj)).sum(axis=1)

    pos = to_host(idx).astype(np.int64)
    if _on_device(xp, pos.size * K):
        return _gemm_samples_xp(xp, a, bm, bias, idx, act, bias_per)
    ref, terms = _in_chunks(pos, 2 * K, sums)
    i, j = np.unravel_index(pos, (Mr, Nc))
    if bias is not None:
        bv = _take(bias, j if bias_per == "column" else i)
        ref, terms = ref + bv, terms + np.abs(bv)
    return xp.asarray(activate(np, ref, act)), xp.asarray(terms)


# --- the same sums on the device, for samples whose gathers would be too large for the host ---------
def _conv_samples_xp(xp, x, w, b, layer, idx, act: str | None = None, residual=None):
    """conv_samples with the sums on the arrays' own backend (many values: one gather would not fit the host)."""
    N = int(x.shape[0])
    C, H, W, M, G = layer.C, layer.H, layer.W, layer.M, layer.groups
    (KH, KW), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    Ho, Wo = layer.out_hw
    n, m, h, o = xp.unravel_index(idx, (N, M, Ho, Wo))
    cg = C // G
    c = (m // (M // G))[:, None] * cg + xp.arange(cg)[None, :]                  # (S, Cg)
    ih = h[:, None] * sh - ph + dh * xp.arange(KH)[None, :]                      # (S, KH)
    iw = o[:, None] * sw - pw + dw * xp.arange(KW)[None, :]                      # (S, KW)
    inside = ((ih >= 0) & (ih < H))[:, None, :, None] & ((iw >= 0) & (iw < W))[:, None, None, :]
    xs = x[n[:, None, None, None], c[:, :, None, None], xp.clip(ih, 0, H - 1)[:, None, :, None],
           xp.clip(iw, 0, W - 1)[:, None, None, :]].astype(xp.float64) * inside
    ws = w[m].astype(xp.float64)                                                 # (S, Cg, KH, KW)
    ref = (xs * ws).sum(axis=(1, 2, 3))
    terms = (xp.abs(xs) * xp.abs(ws)).sum(axis=(1, 2, 3))
    if b is not None:
        ref = ref + b[m].astype(xp.float64)
        terms = terms + xp.abs(b[m].astype(xp.float64))
    if residual is not None:
        r = residual.reshape(-1)[idx].astype(xp.float64)
        ref, terms = ref + r, terms + xp.abs(r)
    return activate(xp, ref, act), terms


def _conv_transpose_samples_xp(xp, x, w, b, geo, idx, act: str | None = None):
    """conv_transpose_samples with the sums on the arrays' own backend (many values: one gather would not fit the host)."""
    N = int(x.shape[0])
    G, (KH, KW), (sh, sw), (ph, pw), (dh, dw) = geo.groups, geo.kernel, geo.stride, geo.pad, geo.dilation
    Ho, Wo = geo.out_hw
    cg, og = geo.C // G, geo.M // G
    n, m, h, o = xp.unravel_index(idx, (N, geo.M, Ho, Wo))
    c = (m // og)[:, None] * cg + xp.arange(cg)[None, :]                        # (S, Cg)
    th = h[:, None] + ph - dh * xp.arange(KH)[None, :]                           # (S, KH): S * input row
    tw = o[:, None] + pw - dw * xp.arange(KW)[None, :]
    ih, iw = th // sh, tw // sw
    ok_h = (th % sh == 0) & (ih >= 0) & (ih < geo.H)
    ok_w = (tw % sw == 0) & (iw >= 0) & (iw < geo.W)
    inside = ok_h[:, None, :, None] & ok_w[:, None, None, :]
    xs = x[n[:, None, None, None], c[:, :, None, None], xp.clip(ih, 0, geo.H - 1)[:, None, :, None],
           xp.clip(iw, 0, geo.W - 1)[:, None, None, :]].astype(xp.float64) * inside   # (S, Cg, KH, KW)
    ws = w[c, (m % og)[:, None]].astype(xp.float64)                              # (S, Cg, KH, KW)
    ref = (xs * ws).sum(axis=(1, 2, 3))
    terms = (xp.abs(xs) * xp.abs(ws)).sum(axis=(1, 2, 3))
    if b is not None:
        ref = ref + b[m].astype(xp.float64)
        terms = terms + xp.abs(b[m].astype(xp.float64))
    return activate(xp, ref, act), terms


def _gemm_samples_xp(xp, a, bm, bias, idx, act: str | None = None, bias_per: str = "column"):
    """gemm_samples with the sums on the arrays' own backend (many values: one gather would not fit the host)."""
    Mr, Nc = int(a.shape[0]), int(bm.shape[1])
    i, j = xp.unravel_index(idx, (Mr, Nc))
    ai, bj = a[i].astype(xp.float64), bm[:, j].T.astype(xp.float64)
    ref, terms = (ai * bj).sum(axis=1), (xp.abs(ai) * xp.abs(bj)).sum(axis=1)
    if bias is not None:
        bv = bias[j if bias_per == "column" else i].astype(xp.float64)
        ref, terms = ref + bv, terms + xp.abs(bv)
    return activate(xp, ref, act), terms
