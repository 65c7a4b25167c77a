"""labkit.import_onnx on random small CNNs, against ONNX's own reference runtime (onnx.reference).

Each run draws fresh networks (the seed is in the failure message): a few blocks from the ops a
CNN exporter writes -- convolutions of any kernel, stride, dilation, group and padding (symmetric,
uneven, auto_pad), batch normalization, the activations, residual adds, squeeze-excite, pooling
(pads, ceil_mode, count_include_pad, dilation), concatenation, LRN, constant padding and cropping,
transposed convolutions (uneven pads, dilation, groups), broadcast adds and multiplies, views --
then a head (global pooling or flatten, Gemm or MatMul + Add, ReLU, softmax).  The network runs
eagerly and as a plan on the backend, and must match within 1e-4 of the largest output.

onnx.reference is the operator definitions in NumPy, with four known gaps, replaced here by
labkit.reference's float64 layers (and tests/helpers.py's pooling): its LRN loops over the batch
instead of the channels, its pooling computes another output size for pads as large as the kernel's
reach allows, its grouped ConvTranspose reshapes the weights wrongly, and its Pad hands negative pads
(a crop) to np.pad.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import to_numpy

onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the 'reference' extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx.reference.op_run import OpRun  # noqa: E402

from helpers import pool_ref  # noqa: E402

NETWORKS = 12          # per run, each a fresh draw
TOL = 1e-4             # of the largest output: float32 through a few layers


# --- the operators' definitions where onnx.reference departs from them ---------------------------
class LRN(OpRun):
    def _run(self, x, alpha=None, beta=None, bias=None, size=None):    # the draws use odd sizes
        return (reference.lrn(x, (size - 1) // 2, bias, alpha / size, beta).astype(x.dtype),)


class MaxPool(OpRun):
    def _run(self, x, auto_pad=None, ceil_mode=0, dilations=None, kernel_shape=None, pads=None, storage_order=0,
             strides=None):
        return (pool_ref(x, "max", kernel_shape, strides, pads, dilations or (1, 1), bool(ceil_mode)).astype(x.dtype),)


class AveragePool(OpRun):
    def _run(self, x, auto_pad=None, ceil_mode=0, count_include_pad=0, dilations=None, kernel_shape=None, pads=None,
             strides=None):
        return (pool_ref(x, "avg", kernel_shape, strides, pads, dilations or (1, 1), bool(ceil_mode),
                         bool(count_include_pad)).astype(x.dtype),)


class ConvTranspose(OpRun):
    def _run(self, x, w, b=None, auto_pad=None, dilations=None, group=1, kernel_shape=None, output_padding=None,
             output_shape=None, pads=None, strides=None):
        full = reference.conv_transpose2d(x, w, b, stride=tuple(strides or (1, 1)), dilation=tuple(dilations or (1, 1)),
                                          output_padding=tuple(output_padding or (0, 0)), groups=group)
        t, l, bo, r = pads or (0, 0, 0, 0)       # uneven pads: the full output cropped at each end
        return (full[:, :, t:full.shape[2] - bo, l:full.shape[3] - r].astype(x.dtype),)


class Pad(OpRun):
    """Constant padding where a negative pad crops (onnx.reference hands negative pads to np.pad)."""
    def _run(self, x, pads, constant_value=None, axes=None, mode="constant"):
        n = x.ndim
        before, after = [int(v) for v in pads[:n]], [int(v) for v in pads[n:]]
        y = np.pad(x, [(max(b, 0), max(a, 0)) for b, a in zip(before, after)],
                   constant_values=0 if constant_value is None else constant_value)
        return (y[tuple(slice(max(-b, 0), y.shape[k] - max(-a, 0)) for k, (b, a) in enumerate(zip(before, after)))],)


# --- random networks ---------------------------------------------------------------------------------
class Net:
    """The nodes and initializers of a network being drawn."""

    def __init__(self, r: np.random.Generator):
        self.r, self.nodes, self.inits, self.n = r, [], {}, 0

    def name(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def init(self, arr, p: str = "w") -> str:
        k = self.name(p)
        self.inits[k] = np.asarray(arr)
        return k

    def randn(self, *shape, scale: float = 1.0) -> np.ndarray:
        return (self.r.standard_normal(shape) * scale).astype(np.float32)

    def node(self, op: str, ins: list, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, ins, [out], name=out + "_node", **attrs))
        return out


def out_size(n, k, s, d, p0, p1, ceil=False):
    span = d * (k - 1) + 1
    v = n + p0 + p1 - span
    if v < 0:
        return 0
    o = (-(-v // s) if ceil else v // s) + 1
    return o - 1 if ceil and (o - 1) * s >= n + p0 else o


def conv(g: Net, x, shape, *, k=None, s=None, d=None, group=None, same=False):
    r, (N, C, H, W) = g.r, shape
    kh, kw = k or (int(r.integers(1, 5)), int(r.integers(1, 5)))
    sh, sw = s or (int(r.integers(1, 3)), int(r.integers(1, 3)))
    dh, dw = d or ((1, 1) if r.random() < 0.7 else (int(r.integers(1, 3)), int(r.integers(1, 3))))
    if group is None:
        group = 1 if r.random() < 0.6 else (C if r.random() < 0.5 else next(v for v in (2, 3, 1) if C % v == 0))
    M = group * int(r.integers(1, 4 if group == C else 5))
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], group=group)
    mode = "even" if same else str(r.choice(["even", "uneven", "SAME_UPPER", "SAME_LOWER", "VALID", "none"]))
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        attrs["auto_pad"] = mode

        def split(n, k, s, d):
            total = max(0, (-(-n // s) - 1) * s + d * (k - 1) + 1 - n)
            return (total // 2, total - total // 2) if mode == "SAME_UPPER" else (total - total // 2, total // 2)
        (t, b), (l, rr) = split(H, kh, sh, dh), split(W, kw, sw, dw)
        pads = (t, l, b, rr)
    elif mode in ("VALID", "none"):
        if mode == "VALID":
            attrs["auto_pad"] = "VALID"
        pads = (0, 0, 0, 0)
    else:
        if same:
            pads = ((dh * (kh - 1)) // 2, (dw * (kw - 1)) // 2) * 2
        elif mode == "even":
            pads = (int(r.integers(0, kh)), int(r.integers(0, kw))) * 2
        else:
            pads = tuple(int(v) for v in r.integers(0, 3, 4))
        attrs["pads"] = list(pads)
    Ho, Wo = out_size(H, kh, sh, dh, pads[0], pads[2]), out_size(W, kw, sw, dw, pads[1], pads[3])
    if Ho < 1 or Wo < 1:
        return None
    ins = [x, g.init(g.randn(M, C // group, kh, kw, scale=1 / math.sqrt(C // group * kh * kw)))]
    if r.random() < 0.7:
        ins.append(g.init(g.randn(M), "b"))
    return g.node("Conv", ins, **attrs), (N, M, Ho, Wo)


def act(g: Net, x):
    r = g.r
    op = str(r.choice(["Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "none"]))
    if op == "none":
        return x
    if op == "Clip":
        bounds = [g.init(np.float32(0), "lo")] + ([g.init(np.float32(6), "hi")] if r.random() < 0.7 else [])
        return g.node("Clip", [x] + bounds)
    if op == "LeakyRelu":
        return g.node(op, [x], alpha=float(r.uniform(0.01, 0.3)))
    if op == "HardSigmoid":
        return g.node(op, [x], alpha=float(r.uniform(0.1, 0.3)), beta=float(r.uniform(0.3, 0.6)))
    return g.node(op, [x])


def batch_norm(g: Net, x, C: int):
    r = g.r
    return g.node("BatchNormalization", [x, g.init(r.uniform(0.5, 1.5, C).astype(np.float32), "scale"),
                                         g.init(g.randn(C), "shift"), g.init(g.randn(C, scale=0.1), "mean"),
                                         g.init(r.uniform(0.5, 2, C).astype(np.float32), "var")], epsilon=1e-5)


def block(g: Net, x, shape):
    r, (N, C, H, W) = g.r, shape
    kind = str(r.choice(["conv", "conv", "residual", "se", "pool", "concat", "lrn", "pad", "transpose", "broadcast",
                         "views", "product"]))
    if kind == "conv":
        made = conv(g, x, shape)
        if made is None:
            return x, shape
        y, out = made
        return act(g, batch_norm(g, y, out[1]) if r.random() < 0.5 else y), out
    if kind == "residual":
        y, out = conv(g, x, shape, k=(3, 3), s=(1, 1), d=(1, 1), group=1, same=True)
        y = batch_norm(g, y, out[1]) if out[1] == C else y
        if out[1] != C:
            return x, shape
        y = g.node("Add", [y, x] if r.random() < 0.5 else [x, y])
        return (g.node("Relu", [y]) if r.random() < 0.8 else y), out
    if kind == "se":
        m = max(1, C // 2)
        s = g.node("GlobalAveragePool", [x])
        s = g.node("Relu", [g.node("Conv", [s, g.init(g.randn(m, C, 1, 1)), g.init(g.randn(m), "b")], kernel_shape=[1, 1])])
        s = g.node("Conv", [s, g.init(g.randn(C, m, 1, 1)), g.init(g.randn(C), "b")], kernel_shape=[1, 1])
        s = g.node(str(r.choice(["Sigmoid", "HardSigmoid"])), [s])
        return g.node("Mul", [x, s] if r.random() < 0.5 else [s, x]), shape
    if kind == "pool":
        op = str(r.choice(["MaxPool", "AveragePool"]))
        kh, kw, sh, sw = (int(v) for v in (r.integers(1, 4), r.integers(1, 4), r.integers(1, 3), r.integers(1, 3)))
        pads = [int(r.integers(0, kh)), int(r.integers(0, kw)), int(r.integers(0, kh)), int(r.integers(0, kw))]
        ceil = int(r.random() < 0.4)
        attrs, dil = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=pads, ceil_mode=ceil), (1, 1)
        if op == "AveragePool":
            attrs["count_include_pad"] = int(r.random() < 0.5)
        elif r.random() < 0.3:
            dil = (int(r.integers(1, 3)), int(r.integers(1, 3)))
            attrs["dilations"] = list(dil)
        Ho = out_size(H, kh, sh, dil[0], pads[0], pads[2], ceil)
        Wo = out_size(W, kw, sw, dil[1], pads[1], pads[3], ceil)
        if Ho < 1 or Wo < 1 or max(pads[0], pads[2]) > dil[0] * (kh - 1) // 2 + kh // 2 or \
                max(pads[1], pads[3]) > dil[1] * (kw - 1) // 2 + kw // 2:
            return x, shape
        return g.node(op, [x], **attrs), (N, C, Ho, Wo)
    if kind == "concat":
        a = conv(g, x, shape, s=(1, 1), d=(1, 1), k=(1, 1), group=1)
        b = conv(g, x, shape, s=(1, 1), d=(1, 1), k=(3, 3), group=1, same=True)
        if a is None or b is None or a[1][2:] != b[1][2:]:
            return x, shape
        ins = [a[0], b[0]] + ([x] if r.random() < 0.5 else [])
        return g.node("Concat", ins, axis=1), (N, a[1][1] + b[1][1] + (C if len(ins) == 3 else 0), H, W)
    if kind == "lrn":
        return g.node("LRN", [x], size=int(r.choice([3, 5])), alpha=1e-3, beta=0.75, bias=2.0), shape
    if kind == "pad":
        lo = -2 if min(H, W) > 5 else 0
        p = [0, 0] + [int(v) for v in r.integers(lo, 3, 2)] + [0, 0] + [int(v) for v in r.integers(lo, 3, 2)]
        return g.node("Pad", [x, g.init(np.array(p, np.int64), "pads")], mode="constant"), \
            (N, C, H + p[2] + p[6], W + p[3] + p[7])
    if kind == "transpose":
        kh, kw, sh, sw = (int(v) for v in (r.integers(1, 4), r.integers(1, 4), r.integers(1, 3), r.integers(1, 3)))
        dh, dw = (1, 1) if r.random() < 0.7 else (int(r.integers(1, 3)), int(r.integers(1, 3)))
        pads = [int(r.integers(0, kh)), int(r.integers(0, kw)), int(r.integers(0, kh)), int(r.integers(0, kw))]
        op = [int(r.integers(0, max(sh, dh))), int(r.integers(0, max(sw, dw)))]
        group, mg = (1 if r.random() < 0.7 or C % 2 else 2), int(r.integers(1, 4))
        Ho = (H - 1) * sh - pads[0] - pads[2] + dh * (kh - 1) + 1 + op[0]
        Wo = (W - 1) * sw - pads[1] - pads[3] + dw * (kw - 1) + 1 + op[1]
        if Ho < 1 or Wo < 1:
            return x, shape
        y = g.node("ConvTranspose", [x, g.init(g.randn(C, mg, kh, kw, scale=1 / math.sqrt(C * kh * kw))),
                                     g.init(g.randn(mg * group), "b")],
                   kernel_shape=[kh, kw], strides=[sh, sw], dilations=[dh, dw], group=group, pads=pads,
                   output_padding=op)
        return act(g, y), (N, mg * group, Ho, Wo)
    if kind == "broadcast":
        other = g.init(g.randn(*[(C, 1, 1), (1, C, 1, 1), (1,), (W,), (1, 1, H, W)][int(r.integers(0, 5))]), "k")
        return g.node(str(r.choice(["Add", "Mul"])), [x, other] if r.random() < 0.5 else [other, x]), shape
    if kind == "views":
        y = g.node(str(r.choice(["Identity", "Dropout"])), [x])
        y = g.node("Unsqueeze", [y, g.init(np.array([int(r.choice([1, 2, -1]))], np.int64), "axes")])
        return g.node("Reshape", [y, g.init(np.array([0, C, H, W], np.int64), "shape")]), shape
    a, b = act(g, x), g.node("Sigmoid", [x])        # "product": two computed values
    return g.node(str(r.choice(["Mul", "Add"])), [a, b]), shape


def head(g: Net, x, shape):
    r, (N, C, H, W) = g.r, shape
    if r.random() < 0.5:
        x, F = g.node("GlobalAveragePool", [x]), C
        x = g.node("Flatten", [x]) if r.random() < 0.5 else \
            g.node("Reshape", [x, g.init(np.array([0, -1], np.int64), "shape")])
    else:
        x, F = g.node("Flatten", [x]), C * H * W
    K = int(r.integers(3, 12))
    if r.random() < 0.5:
        tb = int(r.random() < 0.5)
        w = g.randn(*((K, F) if tb else (F, K)), scale=1 / math.sqrt(F))
        x = g.node("Gemm", [x, g.init(w), g.init(g.randn(K), "b")], transB=tb, alpha=float(r.choice([1.0, 0.5])),
                   beta=float(r.choice([1.0, 2.0])))
    else:
        x = g.node("Add", [g.node("MatMul", [x, g.init(g.randn(F, K, scale=1 / math.sqrt(F)))]), g.init(g.randn(K), "b")])
    if r.random() < 0.5:
        x = g.node("Relu", [x])
    if r.random() < 0.5:
        x = g.node("Softmax", [x], axis=int(r.choice([1, -1])))
    return x


@pytest.mark.parametrize("i", range(NETWORKS))
def test_a_random_network_matches_onnx_s_reference(i, tmp_path):
    seed = int(np.random.SeedSequence().entropy % 2**31)
    r = np.random.default_rng(seed)
    g = Net(r)
    in_shape = (2, int(r.integers(1, 7)), int(r.integers(6, 20)), int(r.integers(6, 20)))
    x, shape = "x", in_shape
    for _ in range(int(r.integers(1, 6))):
        x, shape = block(g, x, shape)
    y = head(g, x, shape)
    graph = helper.make_graph(g.nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *in_shape[1:]])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(v, k) for k, v in g.inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / f"random_{seed}.onnx"
    onnx.save(model, str(path))
    xs = r.standard_normal(in_shape).astype(np.float32)
    what = f"seed {seed}: " + " ".join(n.op_type for n in model.graph.node)
    want = ReferenceEvaluator(model, new_ops=[LRN, MaxPool, AveragePool, ConvTranspose, Pad]).run(None, {"x": xs})[0]
    want = want.astype(np.float64)
    try:
        net = labkit.import_onnx(path)
        eager = to_numpy(net(labkit.xp.asarray(xs))).astype(np.float64)
        plan = net.plan(in_shape[0])
        plan.x[...] = labkit.xp.asarray(xs)
        planned = to_numpy(plan.run()).astype(np.float64)
    except Exception as e:
        raise AssertionError(f"{what}: {type(e).__name__}: {e}") from e
    scale = max(np.abs(want).max(), 1e-30)
    for got, how in ((eager, "eager"), (planned, "plan")):
        assert got.shape == want.shape, f"{what}: {how} shape {got.shape}, expected {want.shape}"
        err = np.abs(got - want).max() / scale
        assert err <= TOL, f"{what}: {how} differs by {err:.2e} of the largest output"
