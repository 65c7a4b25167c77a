"""Float64 references at a few output positions, on the arrays' own backend (CuPy or NumPy).

    ref, terms = conv_samples(xp, x, w, b, layer, idx, act)   # y.ravel()[idx] should be ref
    ok = abs(y.ravel()[idx] - ref) <= tol * terms

The autotuner checks each candidate's whole output for NaN (a value never written) and a few
hundred positions against these sums: a full float64 reference of AlexNet's conv1 at batch 1,024 would
cost more than the search.  ``terms`` is the same sum over absolute values: float32 rounding is
bounded by it, not by the sum itself (which may cancel).
"""
from __future__ import annotations

__all__ = ["conv_samples", "conv_transpose_samples", "gemm_samples", "activate", "sample_positions"]


def sample_positions(xp, size: int, count: int = 512, seed: int = 0):
    """``count`` flat positions of an output of ``size`` elements (all of them if fewer), always
    with the first and the last."""
    if size <= count:
        return xp.arange(size)
    rng = xp.random.RandomState(seed)
    idx = rng.randint(0, size, count - 2)
    return xp.concatenate([xp.asarray([0, size - 1]), idx])


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


def conv_samples(xp, x, w, b, layer, idx, act: str | None = None, residual=None):
    """(reference, terms) at the flat positions ``idx`` of y = act(conv(x, w) + b [+ residual]),
    for ``layer`` (a labkit.shapes.ConvLayer: kernel, stride, padding, dilation, groups); x (N, C, H, W)
    and w (M, C/G, KH, KW) on ``xp``'s backend, b (M,) or None."""
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


def conv_transpose_samples(xp, x, w, b, geo, idx, act: str | None = None):
    """(reference, terms) at the flat positions ``idx`` of y = act(conv_transpose2d(x, w) + b) for
    ``geo`` (a labkit.ops.conv_transpose.TransposeGeometry: anything with C, H, W, M, kernel, stride,
    pad, dilation, groups and out_hw); x (N, C_in, H, W), w (C_in, C_out/G, KH, KW).  Output pixel h
    takes tap k from input row (h + P - k*D) / S where that is a whole number inside the input."""
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


def gemm_samples(xp, a, bm, bias, idx, act: str | None = None, bias_per: str = "column"):
    """(reference, terms) at the flat positions ``idx`` of c = act(a @ bm + bias), a (M, K), bm (K, N);
    ``bias_per`` "column" (one value per column of c) or "row"."""
    Mr, Nc = int(a.shape[0]), int(bm.shape[1])
    i, j = xp.unravel_index(idx, (Mr, Nc))
    ai, bj = a[i].astype(xp.float64), bm[:, j].T.astype(xp.float64)
    ref, terms = (ai * bj).sum(axis=1), (xp.abs(ai) * xp.abs(bj)).sum(axis=1)
    if bias is not None:
        bv = bias[j if bias_per == "column" else i].astype(xp.float64)
        ref, terms = ref + bv, terms + xp.abs(bv)
    return activate(xp, ref, act), terms
