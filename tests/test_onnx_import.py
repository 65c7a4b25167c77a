"""labkit.import_onnx: small graphs built with onnx.helper, one per supported op and attribute, each
against a float64 NumPy reference; the whole pass eager and as a plan; refusals (unknown op,
unsupported attribute, nested graph, truncated file, oversized dims, external data outside the
folder) before any launch; the course's Fashion-MNIST network through ONNX equal to the hand-built one."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import to_numpy
from labkit.errors import OnnxImportError

from helpers import pool_ref

onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the 'reference' extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(38)
TOL = 2e-5     # relative to the largest reference value: float32 sums of a few hundred terms


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def save(tmp_path, nodes, inits, in_shape, *, opset=13, out="y", name="m.onnx"):
    """Write a one-input, one-output model of ``nodes`` and return its path."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    path = tmp_path / name
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def run(path, x, **kw):
    """(model, its output for x eager, its output through plan(N).run()), as float64 host arrays."""
    model = labkit.import_onnx(path, **kw)
    eager = to_numpy(model(labkit.xp.asarray(x))).astype(np.float64)
    p = model.plan(x.shape[0])
    p.x[...] = labkit.xp.asarray(x)
    planned = to_numpy(p.run()).astype(np.float64)
    return model, eager, planned


def close(got, ref, tol=TOL):
    assert got.shape == ref.shape, (got.shape, ref.shape)
    scale = max(np.abs(ref).max(), 1e-30)
    assert np.abs(got - ref).max() <= tol * scale, np.abs(got - ref).max() / scale


def check(path, x, ref, **kw):
    model, eager, planned = run(path, x, **kw)
    close(eager, ref)
    close(planned, ref)
    return model


# --- float64 references of what labkit.reference does not have -----------------------------------
def conv_ref(x, w, b=None, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), groups=1):
    t, l, bo, r = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, bo), (l, r)))
    return reference.conv2d(xp, w, b, stride=stride, dilation=dilation, groups=groups)


ACTS = {
    "Relu": lambda v: np.maximum(v, 0),
    "Sigmoid": lambda v: 1 / (1 + np.exp(-v)),
    "Tanh": np.tanh,
    "HardSwish": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
}


# --- the ops ------------------------------------------------------------------------------------
@pytest.mark.check
def test_conv_bn_relu_pool_flatten_gemm(tmp_path):
    # BN folds into the conv, ReLU into its epilogue, the Gemm's bias and transB into a dense layer.
    w, b, fw, fb = randn(4, 3, 3, 3), randn(4), randn(10, 36), randn(10)
    g, beta, mean = rng.uniform(0.5, 1.5, 4).astype(np.float32), randn(4), randn(4)
    var = rng.uniform(0.5, 2, 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"], epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, alpha=0.5, beta=2.0)]
    path = save(tmp_path, nodes, dict(w=w, b=b, g=g, beta=beta, mean=mean, var=var, fw=fw, fb=fb), ["N", 3, 7, 6])
    x = randn(2, 3, 7, 6)
    s = g / np.sqrt(var.astype(np.float64) + 1e-3)
    h = conv_ref(x, w, b, pads=(1, 1, 1, 1))
    h = np.maximum((h - mean[None, :, None, None]) * s[None, :, None, None] + beta[None, :, None, None], 0)
    ref = 0.5 * pool_ref(h, "max", (2, 2), (2, 2)).reshape(2, -1) @ fw.T.astype(np.float64) + 2.0 * fb
    model = check(path, x, ref)
    table = model.describe(2)
    assert [r["op"] for r in table] == ["Conv+BatchNormalization+Relu", "MaxPool", "Flatten", "Gemm"]
    assert table[0]["nodes"] == ["conv", "BatchNormalization_1", "Relu_2"]
    assert table[0]["flops"] == 2 * 2 * 4 * 7 * 6 * 3 * 9 and table[0]["output"] == (2, 4, 7, 6)
    assert "conv_implicit" in table[0]["kernel"] or "auto" in table[0]["kernel"]
    assert "conv" in str(table) and "kernel" in str(table).splitlines()[0]


@pytest.mark.parametrize("case", [
    dict(pads=[0, 1, 2, 0], strides=[1, 1]),                       # asymmetric: a Pad step, then pad 0
    dict(auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(auto_pad="SAME_LOWER", strides=[2, 1]),
    dict(auto_pad="VALID", strides=[1, 2], dilations=[2, 1]),
    dict(pads=[1, 2, 1, 2], strides=[2, 1], group=2),
])
def test_conv_padding_strides_dilations_groups(tmp_path, case):
    group = case.get("group", 1)
    w, b = randn(4, 4 // group, 3, 2), randn(4)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 2], **case)
    x = randn(2, 4, 7, 6)
    path = save(tmp_path, [node], dict(w=w, b=b), [2, 4, 7, 6])
    strides, dil = tuple(case.get("strides", (1, 1))), tuple(case.get("dilations", (1, 1)))
    pads = case.get("pads", (0, 0, 0, 0))
    if case.get("auto_pad", "").startswith("SAME"):
        total = [max(0, (-(-n // s) - 1) * s + d * (k - 1) + 1 - n) for n, k, s, d in
                 zip((7, 6), (3, 2), strides, dil)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        pads = (*small, *big) if case["auto_pad"] == "SAME_UPPER" else (*big, *small)
    check(path, x, conv_ref(x, w, b, strides, pads, dil, group))


def test_depthwise_conv_relu6_and_residual_add(tmp_path):
    # MobileNetV2's block: depthwise + Clip(0, 6), then a 1x1 projection whose output adds the input
    # (the residual, fused into the projection's epilogue).
    wd, bd, wp, bp = randn(4, 1, 3, 3), randn(4), randn(4, 4, 1, 1), randn(4)
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["d"], pads=[1, 1, 1, 1], group=4),
             helper.make_node("Clip", ["d", "lo", "hi"], ["c"]),
             helper.make_node("Conv", ["c", "wp", "bp"], ["p"]),
             helper.make_node("Add", ["x", "p"], ["y"])]
    path = save(tmp_path, nodes, dict(wd=wd, bd=bd, wp=wp, bp=bp, lo=np.float32(0), hi=np.float32(6)), [1, 4, 5, 5])
    x = randn(3, 4, 5, 5) * 3
    h = np.clip(conv_ref(x, wd, bd, pads=(1, 1, 1, 1), groups=4), 0, 6)
    model = check(path, x, conv_ref(h, wp, bp) + x)
    assert [r["op"] for r in model.describe(3)] == ["Conv+Clip", "Conv+Add"]


@pytest.mark.parametrize("group", [1, 2])
def test_conv_transpose_with_batch_norm_folded(tmp_path, group):
    w, b = randn(4, 3, 3, 3), randn(3 * group)
    g, beta, mean = randn(3 * group), randn(3 * group), randn(3 * group)
    var = rng.uniform(0.5, 2, 3 * group).astype(np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1],
                              output_padding=[1, 1], group=group),
             helper.make_node("BatchNormalization", ["t", "g", "beta", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    path = save(tmp_path, nodes, dict(w=w, b=b, g=g, beta=beta, mean=mean, var=var), [1, 4, 4, 5])
    x = randn(2, 4, 4, 5)
    s = g / np.sqrt(var.astype(np.float64) + 1e-5)
    t = reference.conv_transpose2d(x, w, b, stride=2, pad=1, output_padding=1, groups=group)
    ref = np.maximum((t - mean[None, :, None, None]) * s[None, :, None, None] + beta[None, :, None, None], 0)
    model = check(path, x, ref)
    assert model.describe(2)[0]["op"] == "ConvTranspose+BatchNormalization+Relu"


@pytest.mark.parametrize("pads, group, dil", [((2, 0, 1, 0), 1, (1, 1)), ((0, 1, 1, 0), 2, (1, 1)),
                                               ((1, 1, 2, 3), 1, (2, 1)), ((0, 0, 0, 1), 2, (1, 2))])
def test_conv_transpose_with_uneven_pads_crops_each_end(tmp_path, pads, group, dil):
    """Pads that differ between the two ends of an axis (as a converter writes for SAME padding): the
    even part runs in the kernel, the rest is cropped from the end that has more."""
    w, b = randn(4, 3, 3, 2), randn(3 * group)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2, 1], pads=list(pads),
                            output_padding=[1, 0], dilations=list(dil), group=group)
    path = save(tmp_path, [node], dict(w=w, b=b), [1, 4, 5, 6])
    x = randn(2, 4, 5, 6)
    full = reference.conv_transpose2d(x, w, b, stride=(2, 1), pad=0, output_padding=(1, 0), dilation=dil,
                                      groups=group)
    t, l, bo, r = pads
    model = check(path, x, full[:, :, t:full.shape[2] - bo, l:full.shape[3] - r])
    assert "crop" in model.describe(2)[0]["kernel"]


@pytest.mark.parametrize("attrs, out_hw", [
    (dict(auto_pad="SAME_UPPER"), None), (dict(auto_pad="SAME_LOWER"), None),
    (dict(output_shape=[11, 7]), (11, 7)), (dict(output_shape=[2, 6, 9, 12], auto_pad="SAME_UPPER"), (9, 12)),
    (dict(output_shape=[10, 12], output_padding=[1, 0]), (10, 12))])
def test_conv_transpose_output_size_from_output_shape_or_same(tmp_path, attrs, out_hw):
    """ONNX's rule: the total padding is the full output's size less the one asked for (the input's
    size times the stride for SAME); SAME_UPPER takes the smaller half off the beginning, the others
    the larger."""
    w, b = randn(4, 3, 3, 4), randn(6)
    stride, dil = (2, 2), (1, 2)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], strides=list(stride), dilations=list(dil),
                            group=2, **attrs)
    path = save(tmp_path, [node], dict(w=w, b=b), [1, 4, 5, 6])
    x = randn(2, 4, 5, 6)
    op = tuple(attrs.get("output_padding", (0, 0)))
    full = reference.conv_transpose2d(x, w, b, stride=stride, pad=0, output_padding=op, dilation=dil, groups=2)
    want = out_hw or (5 * 2, 6 * 2)
    cut = []
    for axis, size in enumerate(want):
        total = full.shape[2 + axis] - size
        small, big = total // 2, total - total // 2
        cut.append((small, big) if attrs.get("auto_pad") == "SAME_UPPER" else (big, small))
    (t, bo), (l, r) = cut
    check(path, x, full[:, :, t:full.shape[2] - bo, l:full.shape[3] - r])


def test_conv_transpose_asking_more_than_it_makes_is_refused(tmp_path):
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[1, 1], output_shape=[9, 4])
    path = save(tmp_path, [node], dict(w=randn(2, 2, 3, 3)), [1, 2, 4, 4])
    with pytest.raises(OnnxImportError, match="more than the 6"):
        labkit.import_onnx(path)


def test_pad_with_negative_pads_crops(tmp_path):
    path = save(tmp_path, [helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")],
                dict(p=np.array([0, 0, -1, 2, 0, 0, 1, -2], np.int64)), [2, 3, 6, 7])
    x = randn(2, 3, 6, 7)
    ref = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (0, 1), (2, 0)))[:, :, 1:, :-2]
    check(path, x, ref)
    bad = save(tmp_path, [helper.make_node("Pad", ["x", "p"], ["y"], mode="constant")],
               dict(p=np.array([0, 0, -3, 0, 0, 0, -3, 0], np.int64)), [2, 3, 6, 7], name="bad.onnx")
    with pytest.raises(OnnxImportError, match="to nothing"):
        labkit.import_onnx(bad)


def test_a_file_exported_at_a_fixed_batch_runs_at_any(tmp_path):
    # x.view(x.size(0), -1) traced at batch 2 writes Reshape [2, -1]: the importer keeps the batch axis.
    w = randn(12, 4)
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])]
    path = save(tmp_path, nodes, dict(w=w, shape=np.array([2, -1], dtype=np.int64)), [2, 3, 2, 2])
    for n in (2, 5):
        x = randn(n, 3, 2, 2)
        check(path, x, x.reshape(n, -1) @ w.astype(np.float64))


@pytest.mark.parametrize("op,attrs,ref", [
    ("Relu", {}, ACTS["Relu"]),
    ("Sigmoid", {}, ACTS["Sigmoid"]),
    ("Tanh", {}, ACTS["Tanh"]),
    ("HardSwish", {}, ACTS["HardSwish"]),
    ("LeakyRelu", {"alpha": 0.2}, lambda v: np.where(v < 0, 0.2 * v, v)),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, lambda v: np.clip(0.3 * v + 0.4, 0, 1)),
])
def test_activations(tmp_path, op, attrs, ref):
    path = save(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)], {}, [2, 3, 4, 5])
    x = randn(2, 3, 4, 5) * 4
    check(path, x, ref(x.astype(np.float64)))


@pytest.mark.parametrize("opset", [11, 13])
def test_clip_general_bounds_and_opset_forms(tmp_path, opset):
    path = save(tmp_path, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                dict(lo=np.float32(-0.5), hi=np.float32(1.25)), [2, 7], opset=opset)
    x = randn(2, 7) * 2
    check(path, x, np.clip(x.astype(np.float64), -0.5, 1.25))
    old = save(tmp_path, [helper.make_node("Clip", ["x"], ["y"], min=-1.0, max=0.5)], {}, [2, 7], opset=6,
               name="old.onnx")
    check(old, x, np.clip(x.astype(np.float64), -1.0, 0.5))


@pytest.mark.parametrize("inputs, lo, hi", [(["x", "lo"], 0.0, np.inf), (["x", "lo"], -0.5, np.inf),
                                            (["x", "", "hi"], -np.inf, 0.75)])
def test_clip_with_one_bound(tmp_path, inputs, lo, hi):
    """A Clip with only a min (ReLU when it is 0) or only a max: the missing bound is infinite."""
    inits = {k: np.float32(v) for k, v in (("lo", lo), ("hi", hi)) if k in inputs}
    path = save(tmp_path, [helper.make_node("Clip", inputs, ["y"])], inits, [2, 3, 4, 5])
    x = randn(2, 3, 4, 5) * 2
    check(path, x, np.clip(x.astype(np.float64), lo, hi))
    w = randn(4, 3, 3, 3)
    conv = save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                           helper.make_node("Clip", ["c"] + inputs[1:], ["y"])],
                {"w": w, **inits}, [2, 3, 6, 5], name="conv.onnx")
    x = randn(2, 3, 6, 5)
    check(conv, x, np.clip(conv_ref(x, w, None, pads=(1, 1, 1, 1)), lo, hi))


@pytest.mark.parametrize("mode,k,s,pads,ceil,include,dil", [
    ("max", (3, 3), (2, 2), (1, 1, 1, 1), False, False, (1, 1)),
    ("max", (3, 2), (2, 2), (0, 0, 0, 0), True, False, (1, 1)),       # ceil_mode: a partial last window
    ("max", (2, 2), (1, 2), (0, 1, 1, 0), False, False, (2, 1)),       # asymmetric pads, dilation
    ("avg", (3, 3), (2, 2), (1, 1, 1, 1), False, False, (1, 1)),
    ("avg", (3, 3), (2, 2), (1, 1, 1, 1), False, True, (1, 1)),         # count_include_pad
    ("avg", (3, 3), (2, 2), (0, 1, 1, 0), True, True, (1, 1)),          # both, asymmetric pads
    ("avg", (2, 3), (2, 1), (1, 0, 0, 2), True, False, (1, 1)),
])
def test_pooling(tmp_path, mode, k, s, pads, ceil, include, dil):
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=list(pads), ceil_mode=int(ceil))
    if mode == "avg":
        attrs["count_include_pad"] = int(include)
    if dil != (1, 1):
        attrs["dilations"] = list(dil)
    op = "MaxPool" if mode == "max" else "AveragePool"
    path = save(tmp_path, [helper.make_node(op, ["x"], ["y"], **attrs)], {}, [2, 3, 8, 7])
    x = randn(2, 3, 8, 7)
    check(path, x, pool_ref(x, mode, k, s, pads, dil, ceil, include))


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
def test_pooling_auto_pad(tmp_path, auto_pad):
    path = save(tmp_path, [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 2], strides=[2, 2],
                                            auto_pad=auto_pad)], {}, [1, 2, 7, 6])
    x = randn(1, 2, 7, 6)
    if auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        tot = [max(0, (-(-n // 2) - 1) * 2 + k - n) for n, k in ((7, 3), (6, 2))]
        lo, hi = [t // 2 for t in tot], [t - t // 2 for t in tot]
        pads = (*lo, *hi) if auto_pad == "SAME_UPPER" else (*hi, *lo)
    check(path, x, pool_ref(x, "max", (3, 2), (2, 2), pads))


def test_global_average_pool_softmax_and_squeeze(tmp_path):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("Squeeze", ["g", "axes"], ["s"]),
             helper.make_node("Softmax", ["s"], ["y"])]
    path = save(tmp_path, nodes, dict(axes=np.array([2, 3], dtype=np.int64)), [2, 40, 3, 5])
    x = randn(2, 40, 3, 5)
    check(path, x, reference.softmax(x.astype(np.float64).mean(axis=(2, 3))))


@pytest.mark.parametrize("op", ["Add", "Mul"])
@pytest.mark.parametrize("other", [(1, 3, 1, 1), (5,), (2, 3, 4, 5), (1, 1, 4, 1)])
def test_add_mul_broadcasting(tmp_path, op, other):
    # A constant operand (squeeze-excite's scales, a per-channel shift) and a computed one.
    c = randn(*other)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node(op, ["c", "r"], ["a"]),
             helper.make_node("Sigmoid", ["a"], ["y"])]
    path = save(tmp_path, nodes, dict(c=c), [2, 3, 4, 5])
    x = randn(2, 3, 4, 5)
    r = np.maximum(x.astype(np.float64), 0)
    v = c + r if op == "Add" else c * r
    model = check(path, x, 1 / (1 + np.exp(-v)))
    assert model.describe(2)[1]["op"] == f"{op}+Sigmoid"


def test_squeeze_excite_mul_of_two_computed_values(tmp_path):
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["g"]),
             helper.make_node("HardSigmoid", ["g"], ["h"]),
             helper.make_node("Mul", ["x", "h"], ["y"])]
    path = save(tmp_path, nodes, {}, [2, 3, 4, 5])
    x = randn(2, 3, 4, 5)
    g = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    check(path, x, x * np.clip(0.2 * g + 0.5, 0, 1))


def test_concat_channels_and_lrn(tmp_path):
    w = randn(2, 3, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Concat", ["c", "r", "c"], ["k"], axis=1),
             helper.make_node("LRN", ["k"], ["y"], size=3, alpha=1e-2, beta=0.75, bias=2.0)]
    path = save(tmp_path, nodes, dict(w=w), [2, 3, 4, 5])
    x = randn(2, 3, 4, 5)
    c = conv_ref(x, w)
    k = np.concatenate([c, np.maximum(x, 0), c], axis=1)
    check(path, x, reference.lrn(k, depth_radius=1, bias=2.0, alpha=1e-2 / 3, beta=0.75))


@pytest.mark.check
def test_lrn_then_max_pool_run_as_one_kernel_where_they_can(tmp_path):
    """LRN + MaxPool fused (lrn_max_pool) when the pool is plain and reads the LRN alone; a padded pool,
    or an LRN read twice, keeps the two kernels.  Each against the float64 reference."""
    lrn = dict(size=5, alpha=1e-2, beta=0.75, bias=2.0)
    x = randn(2, 7, 11, 13)
    norm = reference.lrn(x, depth_radius=2, bias=2.0, alpha=1e-2 / 5, beta=0.75)
    nodes = [helper.make_node("LRN", ["x"], ["n"], **lrn),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    model = check(save(tmp_path, nodes, {}, [2, 7, 11, 13]), x, reference.max_pool2d(norm, 3, 2))
    rows = model.describe(2)
    assert [r["op"] for r in rows] == ["LRN+MaxPool"] and rows[0]["kernel"] == "lrn_max_pool (lrn.cu)"
    assert rows[0]["bytes"] == 4 * (2 * 7 * 11 * 13 + 2 * 7 * 5 * 6)      # x read once, the pooled output written

    nodes = [helper.make_node("LRN", ["x"], ["n"], **lrn),
             helper.make_node("MaxPool", ["n"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])]
    model = check(save(tmp_path, nodes, {}, [2, 7, 11, 13], name="padded.onnx"), x, pool_ref(norm, "max", (3, 3),
                                                                                             (2, 2), (1, 1, 1, 1)))
    assert [r["op"] for r in model.describe(2)] == ["LRN", "MaxPool"]

    nodes = [helper.make_node("LRN", ["x"], ["n"], **lrn),
             helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
             helper.make_node("Pad", ["n", "pads"], ["q"]),         # the LRN's output read twice
             helper.make_node("Add", ["p", "q"], ["y"])]
    pads = np.array([0, 0, -6, -7, 0, 0, 0, 0], dtype=np.int64)  # crop n to the pooled output's 5 x 6
    ref = reference.max_pool2d(norm, 3, 2) + norm[:, :, 6:, 7:]
    model = check(save(tmp_path, nodes, dict(pads=pads), [2, 7, 11, 13], name="twice.onnx"), x, ref)
    assert [r["op"] for r in model.describe(2)][:2] == ["LRN", "MaxPool"]


def _erf(v):
    from math import erf
    return np.vectorize(erf)(v)


@pytest.mark.check
@pytest.mark.parametrize("gelu", ["decomposed", "Gelu"])
def test_a_convnext_block_layer_norm_gelu_sub_div(tmp_path, gelu):
    """ConvNeXt's block as torch.onnx.export writes it: a 7x7 depthwise convolution, channels-last
    (Transpose), LayerNormalization over the channels, MatMul + bias on a rank-4 input, GELU (as
    Div, Erf, Add, Mul, Mul at opset 17, or the Gelu op of opset 20) fused into the first MatMul's
    epilogue, MatMul, back to NCHW, the layer scale (Mul), the skip (Add); then a Sub and a Div of a
    constant.  Against float64."""
    C, N, H, W = 8, 2, 9, 7
    wd, bd = randn(C, 1, 7, 7) * 0.2, randn(C)
    g, be = rng.random(C).astype(np.float32) + 0.5, randn(C)
    w1, b1, w2, b2 = randn(C, 4 * C) * 0.3, randn(4 * C), randn(4 * C, C) * 0.3, randn(C)
    scale = randn(C, 1, 1)
    inits = dict(wd=wd, bd=bd, g=g, be=be, w1=w1, b1=b1, w2=w2, b2=b2, scale=scale,
                 sqrt2=np.float32(np.sqrt(2.0)), one=np.float32(1.0), half=np.float32(0.5),
                 shift=np.float32(0.25), div=np.float32(3.0))
    nodes = [helper.make_node("Conv", ["x", "wd", "bd"], ["c"], kernel_shape=[7, 7], pads=[3, 3, 3, 3], group=C),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "be"], ["ln"], axis=-1, epsilon=1e-6),
             helper.make_node("MatMul", ["ln", "w1"], ["m1"]),
             helper.make_node("Add", ["m1", "b1"], ["h"])]
    if gelu == "Gelu":
        nodes += [helper.make_node("Gelu", ["h"], ["gl"])]
        opset = 20
    else:
        nodes += [helper.make_node("Div", ["h", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["a1"]), helper.make_node("Mul", ["h", "a1"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["gl"])]
        opset = 17
    nodes += [helper.make_node("MatMul", ["gl", "w2"], ["m2"]), helper.make_node("Add", ["m2", "b2"], ["o"]),
              helper.make_node("Transpose", ["o"], ["back"], perm=[0, 3, 1, 2]),
              helper.make_node("Mul", ["scale", "back"], ["ls"]), helper.make_node("Add", ["ls", "x"], ["r"]),
              helper.make_node("Sub", ["r", "shift"], ["s"]), helper.make_node("Div", ["s", "div"], ["y"])]
    path = save(tmp_path, nodes, inits, [N, C, H, W], opset=opset)
    x = randn(N, C, H, W)
    c = conv_ref(x, wd, bd, pads=(3, 3, 3, 3), groups=C).transpose(0, 2, 3, 1)
    h = reference.layer_norm(c, g, be, 1e-6) @ w1 + b1
    gl = 0.5 * h * (1 + _erf(h / np.sqrt(2.0)))
    ref = ((scale * ((gl @ w2 + b2).transpose(0, 3, 1, 2)) + x) - 0.25) / 3.0
    model = check(path, x, ref)
    ops = [r["op"] for r in model.describe(N)]
    assert "LayerNormalization" in ops and any(o.startswith("MatMul") for o in ops)
    kernels = " ".join(r["kernel"] for r in model.describe(N))
    assert "layer_norm_rows" in kernels and "leading axes as rows" in kernels
    # the GELU rides in the first dense layer's epilogue (gemm.cu): no pass of its own
    assert any(o.startswith("MatMul+Add+") and ("Gelu" in o or "Erf" in o) for o in ops), ops
    assert "unary gelu" not in kernels
    # the layer scale folded into the second dense layer's weights, the skip added in the transposing copy
    assert "MatMul+Add+Mul" in ops and "Transpose+Add" in ops and "Mul" not in ops, ops


def test_a_scale_that_varies_along_another_axis_is_not_folded(tmp_path):
    """Gemm -> Transpose -> Mul folds only a constant that varies along the axis the Gemm's outputs
    moved to; one along the rows stays a Mul of its own.  Both against float64."""
    w, b = randn(6, 4), randn(4)
    for scale, folded in ((randn(4, 1, 1), True), (randn(1, 3, 1), False), (np.float32(1.5), True)):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"]),
                 helper.make_node("Transpose", ["a"], ["t"], perm=[0, 3, 1, 2]),
                 helper.make_node("Mul", ["t", "s"], ["y"])]
        x = randn(2, 3, 5, 6)
        ref = (x @ w + b).transpose(0, 3, 1, 2) * scale
        model = check(save(tmp_path, nodes, dict(w=w, b=b, s=np.asarray(scale, np.float32)), [2, 3, 5, 6],
                           name=f"scale{np.size(scale)}{folded}.onnx"), x, ref)
        ops = [r["op"] for r in model.describe(2)]
        assert ("MatMul+Add+Mul" in ops) == folded and ("Mul" in ops) == (not folded), ops


@pytest.mark.parametrize("form", ["div", "mul", "swapped", "add2", "read_twice"])
def test_gelu_written_out_runs_as_one_step_where_it_is_gelu(tmp_path, form):
    """x * (1 + erf(x / sqrt 2)) * 0.5 as exporters write it (Div, or Mul by 1/sqrt 2; operands in either
    order) is one gelu step; an Add of 2 instead of 1, or the Erf read twice, keeps the ops apart.
    Each against float64."""
    inits = dict(c=np.float32(np.sqrt(2.0)), r=np.float32(np.sqrt(0.5)), one=np.float32(1.0),
                 two=np.float32(2.0), half=np.float32(0.5))
    scaled = (helper.make_node("Mul", ["r", "x"], ["d"]) if form == "mul" else helper.make_node("Div", ["x", "c"], ["d"]))
    add = helper.make_node("Add", ["two" if form == "add2" else "one", "e"] if form == "swapped" else
                           ["e", "two" if form == "add2" else "one"], ["a"])
    nodes = [scaled, helper.make_node("Erf", ["d"], ["e"]), add,
             helper.make_node("Mul", ["a", "x"] if form == "swapped" else ["x", "a"], ["m"]),
             helper.make_node("Mul", ["half", "m"] if form == "swapped" else ["m", "half"],
                              ["g" if form == "read_twice" else "y"])]
    if form == "read_twice":
        nodes.append(helper.make_node("Add", ["g", "e"], ["y"]))
    x = randn(2, 3, 5) * 2
    e = _erf(x / np.sqrt(2.0))
    ref = x * (e + (2.0 if form == "add2" else 1.0)) * 0.5 + (e if form == "read_twice" else 0.0)
    model = check(save(tmp_path, nodes, inits, [2, 3, 5], name=f"{form}.onnx"), x, ref)
    ops = [r["op"] for r in model.describe(2)]
    fused = form in ("div", "mul", "swapped")
    assert (len(ops) == 1 and ops[0].endswith("Erf+Add+Mul+Mul")) == fused, ops
    assert any("gelu" in r["kernel"] for r in model.describe(2)) == fused


def test_layer_norm_refusals(tmp_path):
    g = np.ones(5, np.float32)
    for attrs, inits, match in [({"axis": 0}, dict(g=g), "never the batch"),
                                ({"stash_type": 0}, dict(g=g), "stash_type"),
                                ({}, dict(g=np.ones(4, np.float32)), "Scale of shape")]:
        nodes = [helper.make_node("LayerNormalization", ["x", "g"], ["y"], **attrs)]
        path = save(tmp_path, nodes, inits, [2, 3, 5], name=f"ln{len(match)}.onnx")
        with pytest.raises(OnnxImportError, match=match):
            labkit.import_onnx(path)
    nodes = [helper.make_node("Gelu", ["x"], ["y"], approximate="cubic")]
    with pytest.raises(OnnxImportError, match="approximate"):
        labkit.import_onnx(save(tmp_path, nodes, {}, [2, 3], opset=20, name="gelu.onnx"))


def test_layer_norm_of_a_whole_image_and_the_tanh_gelu(tmp_path):
    """LayerNormalization over the last three axes (axis=1 of NCHW: GroupNorm-like shapes), and Gelu's
    tanh approximation."""
    g, b = rng.random((3, 4, 5)).astype(np.float32) + 0.5, randn(3, 4, 5)
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=1),
             helper.make_node("Gelu", ["n"], ["y"], approximate="tanh")]
    x = randn(2, 3, 4, 5) * 4 + 7
    n = reference.layer_norm(x, g, b, 1e-5)
    ref = 0.5 * n * (1 + np.tanh(np.sqrt(2 / np.pi) * (n + 0.044715 * n ** 3)))
    check(save(tmp_path, nodes, dict(g=g, b=b), [2, 3, 4, 5], opset=20), x, ref)


def test_matmul_add_reshape_unsqueeze_dropout_identity_pad(tmp_path):
    wm, bias = randn(24, 6), randn(6)
    nodes = [helper.make_node("Pad", ["x", "pads", "zero"], ["p"]),
             helper.make_node("Reshape", ["p", "shape"], ["f"]),
             helper.make_node("MatMul", ["f", "wm"], ["m"]),
             helper.make_node("Add", ["m", "bias"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Dropout", ["r"], ["d"]),
             helper.make_node("Identity", ["d"], ["i"]),
             helper.make_node("Unsqueeze", ["i", "axes"], ["y"])]
    inits = dict(wm=wm, bias=bias, pads=np.array([0, 0, 1, 0, 0, 0, 0, 1], dtype=np.int64),
                 zero=np.float32(0.5), shape=np.array([0, -1], dtype=np.int64), axes=np.array([2], dtype=np.int64))
    path = save(tmp_path, nodes, inits, [3, 2, 1, 5])
    x = randn(3, 2, 1, 5)
    p = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 0), (0, 1)), constant_values=0.5)
    ref = np.maximum(p.reshape(3, -1) @ wm + bias, 0)[:, :, None]
    model = check(path, x, ref)
    assert [r["op"] for r in model.describe(3)][:3] == ["Pad", "Reshape", "MatMul+Add+Relu"]


def test_batch_norm_alone_and_constants(tmp_path):
    # DenseNet's pre-activation: BN (no conv before it) + ReLU as one per-channel affine step; a
    # Constant node feeds an Add.
    g, beta, mean = randn(3), randn(3), randn(3)
    var = rng.uniform(0.5, 2, 3).astype(np.float32)
    one = numpy_helper.from_array(np.full((1, 3, 1, 1), 0.25, dtype=np.float32), "one")
    nodes = [helper.make_node("BatchNormalization", ["x", "g", "beta", "mean", "var"], ["n"]),
             helper.make_node("Relu", ["n"], ["r"]),
             helper.make_node("Constant", [], ["k"], value=one),
             helper.make_node("Add", ["r", "k"], ["y"])]
    path = save(tmp_path, nodes, dict(g=g, beta=beta, mean=mean, var=var), [2, 3, 4, 4])
    x = randn(2, 3, 4, 4)
    s = g / np.sqrt(var.astype(np.float64) + 1e-5)
    ref = np.maximum((x - mean[None, :, None, None]) * s[None, :, None, None] + beta[None, :, None, None], 0) + 0.25
    model = check(path, x, ref)
    assert model.describe(2)[0]["op"] == "BatchNormalization+Relu"


def test_batch_sizes_and_symbolic_input(tmp_path):
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], {}, ["N", "C", 3, 3])
    with pytest.raises(OnnxImportError, match="input_shape"):
        labkit.import_onnx(path)
    model = labkit.import_onnx(path, input_shape=(2, 3, 3))
    for n in (1, 4):
        x = randn(n, 2, 3, 3)
        close(to_numpy(model(labkit.xp.asarray(x))).astype(np.float64), np.maximum(x, 0))
    with pytest.raises(ValueError, match=r"x must be \(N, 2, 3, 3\)"):
        model(labkit.xp.asarray(randn(1, 3, 3, 3)))


# --- refusals, before any launch ------------------------------------------------------------------
@pytest.fixture
def no_launch(monkeypatch):
    """Fails the test if any kernel is loaded (nothing may compile or launch before a refusal)."""
    import labkit.loader as loader

    def refuse(*a, **k):
        raise AssertionError("a kernel was loaded before the refusal")
    monkeypatch.setattr(loader, "load_source", refuse)


@pytest.mark.check
def test_unknown_op_is_refused_naming_op_and_node(tmp_path, no_launch):
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mish", ["r"], ["y"], name="act7")]
    path = save(tmp_path, nodes, {}, [1, 2, 3, 3], opset=18)
    with pytest.raises(OnnxImportError, match=r"Mish node 'act7': op 'Mish' is not supported"):
        labkit.import_onnx(path)


@pytest.mark.parametrize("node,inits,match", [
    (helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], storage_order=1), {}, "storage_order"),
    (helper.make_node("Relu", ["x"], ["y"], alpha=1.0), {}, "attribute 'alpha' is not supported"),
    (helper.make_node("Pad", ["x", "p"], ["y"], mode="reflect"), {"p": np.zeros(8, np.int64)}, "mode 'reflect'"),
    (helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_MIDDLE"), {"w": randn(2, 2, 1, 1)}, "auto_pad"),
    (helper.make_node("LRN", ["x"], ["y"], size=4), {}, "odd window"),
    (helper.make_node("Gemm", ["x", "w"], ["y"], transA=1), {"w": randn(3, 3)}, "transA"),
    (helper.make_node("Softmax", ["x"], ["y"], axis=1), {}, "last axis"),
    (helper.make_node("Conv", ["x", "x"], ["y"]), {}, "computed at run time"),
    (helper.make_node("LeakyRelu", ["x"], ["y"], alpha=float("nan")), {}, "not a finite number"),
    (helper.make_node("BatchNormalization", ["x", "s", "s", "s", "v"], ["y"]),
     {"s": np.ones(2, np.float32), "v": -np.ones(2, np.float32)}, "not positive"),
    (helper.make_node("Conv", ["x", "w"], ["y"]), {"w": np.full((2, 2, 1, 1), np.inf, np.float32)}, "infinity"),
])
def test_unsupported_attributes_are_refused(tmp_path, no_launch, node, inits, match):
    node.name = "the_node"
    path = save(tmp_path, [node], inits, [1, 2, 3, 3])
    with pytest.raises(OnnxImportError, match=match) as err:
        labkit.import_onnx(path)
    assert "the_node" in str(err.value) and node.op_type in str(err.value)


def test_nested_graph_is_refused(tmp_path, no_launch):
    body = helper.make_graph([helper.make_node("Identity", ["x"], ["z"])], "body", [],
                             [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body, name="branch")
    path = save(tmp_path, [node], {"c": np.array(True)}, [1, 2, 3, 3])
    with pytest.raises(OnnxImportError, match="nested graph"):
        labkit.import_onnx(path)


def test_truncated_and_empty_files_are_refused(tmp_path, no_launch):
    w = randn(8, 3, 3, 3)
    path = save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["y"])], dict(w=w), [1, 3, 5, 5])
    data = path.read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(OnnxImportError, match="truncated|declares"):
        labkit.import_onnx(cut)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(OnnxImportError, match="empty"):
        labkit.import_onnx(tmp_path / "empty.onnx")
    with pytest.raises(OnnxImportError, match="over the limit"):
        labkit.import_onnx(path, max_bytes=100)


def test_declared_dims_must_match_the_data(tmp_path, no_launch):
    # A tensor that declares 10^13 floats but holds 4 bytes: refused before anything is allocated.
    t = numpy_helper.from_array(np.zeros(1, np.float32), "w")
    del t.dims[:]
    t.dims.extend([10**13])
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[t])
    path = tmp_path / "big.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(OnnxImportError, match="declares dims"):
        labkit.import_onnx(path)


@pytest.mark.parametrize("location", ["../outside.bin", "/etc/passwd", "link.bin"])
def test_external_data_outside_the_folder_is_refused(tmp_path, no_launch, location):
    folder = tmp_path / "model"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 64)
    (folder / "link.bin").symlink_to(tmp_path / "outside.bin")
    t = numpy_helper.from_array(np.zeros((2, 2, 1, 1), np.float32), "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in {"location": location, "offset": "0", "length": "16"}.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[t])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    with pytest.raises(OnnxImportError, match="outside|not a relative path"):
        labkit.import_onnx(path)


def test_external_data_inside_the_folder_is_read(tmp_path):
    w = randn(2, 2, 1, 1)
    path = save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["y"])], dict(w=w), [1, 2, 3, 3])
    m = onnx.load(str(path))
    onnx.save_model(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.bin", size_threshold=0)
    x = randn(1, 2, 3, 3)
    check(tmp_path / "ext.onnx", x, conv_ref(x, w))


def test_repeated_names_are_refused_in_linear_time(tmp_path, no_launch):
    import time
    inits = [numpy_helper.from_array(np.zeros(1, np.float32), "w") for _ in range(40_000)]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=inits)
    path = tmp_path / "dup.onnx"
    onnx.save(helper.make_model(graph), str(path))
    t = time.perf_counter()
    with pytest.raises(OnnxImportError, match="stored twice"):
        labkit.import_onnx(path)
    assert time.perf_counter() - t < 10


def test_cycles_and_values_written_twice_are_refused(tmp_path, no_launch):
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["x"], ["a"], name="again")]
    with pytest.raises(OnnxImportError, match="written twice"):
        labkit.import_onnx(save(tmp_path, nodes + [helper.make_node("Relu", ["a"], ["y"])], {}, [1, 1, 2, 2]))
    loop = [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
            helper.make_node("Relu", ["b"], ["y"])]
    with pytest.raises(OnnxImportError, match="cycle"):
        labkit.import_onnx(save(tmp_path, loop, {}, [1, 1, 2, 2], name="loop.onnx"))


# --- the course's own network through ONNX --------------------------------------------------------
def test_fashion_mnist_through_onnx_equals_the_hand_built_network(tmp_path):
    from labkit.models import fashion_mnist as fm
    w = fm.load_weights()
    # The exporter's view of FashionNet: conv, tanh, pool, conv, tanh, flatten (C, H, W order), two
    # dense layers as Gemm of weights stored (out, in) with transB, as torch.onnx.export writes them.
    nodes = [helper.make_node("Conv", ["x", "conv1_w", "conv1_b"], ["c1"], name="conv1"),
             helper.make_node("Tanh", ["c1"], ["t1"]),
             helper.make_node("MaxPool", ["t1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "conv2_w", "conv2_b"], ["c2"], name="conv2"),
             helper.make_node("Tanh", ["c2"], ["t2"]),
             helper.make_node("Flatten", ["t2"], ["f"]),
             helper.make_node("Gemm", ["f", "fc1_wt", "fc1_b"], ["d1"], transB=1),
             helper.make_node("Tanh", ["d1"], ["h1"]),
             helper.make_node("Gemm", ["h1", "fc2_wt", "fc2_b"], ["y"], transB=1)]
    inits = {k: v for k, v in w.items() if not k.startswith("fc") or k.endswith("_b")}
    inits.update(fc1_wt=np.ascontiguousarray(w["fc1_w"].T), fc2_wt=np.ascontiguousarray(w["fc2_w"].T))
    path = save(tmp_path, nodes, inits, ["N", 1, 48, 48])
    x = rng.uniform(0, 1, (3, 1, 48, 48)).astype(np.float32)
    model, eager, planned = run(path, x)
    net = fm.FashionNet(w, variant="naive")
    hand = to_numpy(net.logits(labkit.xp.asarray(x))).astype(np.float64)
    close(eager, hand, 1e-5)
    close(planned, hand, 1e-5)
    close(eager, fm.reference_logits(w, x), 2e-5)
    assert [r["op"] for r in model.describe(3)] == ["Conv+Tanh", "MaxPool", "Conv+Tanh", "Flatten", "Gemm+Tanh",
                                                    "Gemm"]


def test_describe_times_each_step_and_sums_the_work(tmp_path):
    w = randn(4, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    model = labkit.import_onnx(save(tmp_path, nodes, dict(w=w), [1, 3, 6, 6]))
    table = model.describe(2, time=True, repeat=2)
    assert [r["node"] for r in table][:2] == ["Conv_0", "GlobalAveragePool_2"]
    assert all(r["ms"] is not None and r["ms"] > 0 for r in table if r["kernel"] != "(view: no kernel)")
    assert table[0]["bytes"] == 4 * (2 * 3 * 36 + 2 * 4 * 36 + 4 * 27)
    assert "ms" in str(table).splitlines()[0]


def test_softmax_before_opset_13_flattens_from_its_axis(tmp_path):
    path = save(tmp_path, [helper.make_node("Softmax", ["x"], ["y"], axis=1)], {}, [2, 3, 2, 2], opset=11)
    x = randn(2, 3, 2, 2)
    check(path, x, reference.softmax(x.reshape(2, -1).astype(np.float64)).reshape(x.shape))


def mobilenet_onnx_nodes(hw):
    """MobileNetV2 as torch.onnx.export writes it without constant folding: every Conv followed by its
    BatchNormalization (torchvision's names) and Clip(0, 6), a residual Add per block that has one."""
    from labkit.models import mobilenet_v2 as mb
    nodes = []

    def conv_bn(x, prefix, stride, pad, groups, act):
        wname, bn = mb.tensor_names(prefix)
        nodes.append(helper.make_node("Conv", [x, wname], [f"{prefix}/conv"], strides=[stride] * 2, pads=[pad] * 4,
                                      group=groups, name=f"{prefix}/Conv"))
        nodes.append(helper.make_node("BatchNormalization", [f"{prefix}/conv"] + [f"{bn}.{p}" for p in mb.BN_PARTS],
                                      [f"{prefix}/bn"], epsilon=mb.BN_EPS))
        if not act:
            return f"{prefix}/bn"
        nodes.append(helper.make_node("Clip", [f"{prefix}/bn", "zero", "six"], [f"{prefix}/relu6"]))
        return f"{prefix}/relu6"

    h = conv_bn("x", "features.0", 2, 1, 1, True)
    bs = mb.blocks(hw)
    for b in bs:
        skip = h
        for kind, (prefix, L) in b.convs().items():
            h = conv_bn(h, prefix, L.stride, L.pad, L.groups, kind != "project")
        if b.residual:
            nodes.append(helper.make_node("Add", [skip, h], [f"{b.name}/add"]))
            h = f"{b.name}/add"
    h = conv_bn(h, f"features.{len(bs) + 1}", 1, 0, 1, True)
    nodes += [helper.make_node("GlobalAveragePool", [h], ["pool"]), helper.make_node("Flatten", ["pool"], ["flat"]),
              helper.make_node("Gemm", ["flat", "classifier.1.weight", "classifier.1.bias"], ["y"], transB=1)]
    return nodes


def test_mobilenet_v2_through_onnx_equals_the_hand_built_network(tmp_path):
    from labkit.models import mobilenet_v2 as mb
    hw = (40, 40)
    weights = mb.synthetic_weights()
    inits = {**weights, "zero": np.float32(0), "six": np.float32(6)}
    path = save(tmp_path, mobilenet_onnx_nodes(hw), inits, ["N", 3, *hw])
    x = randn(2, 3, *hw)
    model, eager, planned = run(path, x)
    hand = to_numpy(mb.MobileNetV2(weights, input_hw=hw).logits(labkit.xp.asarray(x))).astype(np.float64)
    ref = mb.reference_logits(weights, x)
    close(eager, hand, 1e-5)
    close(planned, hand, 1e-5)
    close(eager, ref, 1e-4)
    ops = [r["op"] for r in model.describe(2)]
    # Every BN folded, every ReLU6 in its conv's epilogue, every skip in its projection's.
    assert "BatchNormalization" not in ops and "Clip" not in ops and "Add" not in ops
    assert ops.count("Conv+BatchNormalization+Add") == 10 and ops[0] == "Conv+BatchNormalization+Clip"


def test_oversized_declared_input_is_refused_before_allocating(tmp_path, no_launch):
    path = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], {}, [1, 3, 100_000, 100_000])
    with pytest.raises(OnnxImportError, match="32-bit indices"):
        labkit.import_onnx(path)


def test_views_of_the_input_and_concat_with_a_constant(tmp_path):
    # A view of the input is copied into the plan's buffer (the input is read in place, so a view of
    # it cannot be the plan's); a constant may be concatenated with computed values.
    w, c = randn(12, 5), randn(1, 3)
    nodes = [helper.make_node("Flatten", ["x"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["m"]),
             helper.make_node("Concat", ["c", "m"], ["y"], axis=1)]
    path = save(tmp_path, nodes, dict(w=w, c=c), [1, 3, 2, 2])
    x = randn(1, 3, 2, 2)
    model = check(path, x, np.concatenate([c, x.reshape(1, -1) @ w.astype(np.float64)], axis=1))
    assert model.describe(1)[0]["kernel"].startswith("copy")


def test_shape_arithmetic_for_a_dynamic_reshape(tmp_path):
    # x.view(x.size(0), -1) exported with a dynamic batch: Shape, Gather, Unsqueeze, Concat, Reshape.
    w = randn(12, 4)
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["r", "target"], ["f"]), helper.make_node("MatMul", ["f", "w"], ["y"])]
    inits = dict(w=w, zero=np.array(0, dtype=np.int64), axes=np.array([0], dtype=np.int64),
                 minus1=np.array([-1], dtype=np.int64))
    path = save(tmp_path, nodes, inits, ["N", 3, 2, 2])
    model = None
    for n in (1, 3):
        x = randn(n, 3, 2, 2)
        model = check(path, x, np.maximum(x, 0).reshape(n, -1) @ w.astype(np.float64))
    kernels = [r["kernel"] for r in model.describe(3)]
    assert kernels.count("(shape arithmetic on the host)") == 4
    bad = nodes[:2] + [helper.make_node("Add", ["r", "s"], ["y"])]
    with pytest.raises(OnnxImportError, match="shape arithmetic only for a Reshape's target"):
        labkit.import_onnx(save(tmp_path, bad, {}, ["N", 3, 2, 2], name="bad.onnx"))


def test_an_imported_model_runs_in_the_sub_batch_pipeline(tmp_path):
    # The pipeline takes any model with plans: its own plan per stream (new_plan), replicas per device.
    from labkit.pipeline import SubBatchPipeline
    w = randn(4, 2, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["y"])]
    model = labkit.import_onnx(save(tmp_path, nodes, dict(w=w), ["N", 2, 5, 5]))
    x = randn(7, 2, 5, 5)
    # two replicas on the CPU executor; on a GPU host, one per GPU it has (a one-GPU host refuses devices=2)
    devices = 2 if labkit.backends.current() == "cpu" else "all"
    got = SubBatchPipeline(model, streams=2, sub_batch=3, devices=devices).run(x)
    ref = np.maximum(conv_ref(x, w, pads=(1, 1, 1, 1)), 0).mean(axis=(2, 3))
    close(np.asarray(got, dtype=np.float64), ref)


def test_repeated_node_names_are_made_unique(tmp_path):
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="n"), helper.make_node("Sigmoid", ["a"], ["b"], name="n#2"),
             helper.make_node("Tanh", ["b"], ["c"], name="n"), helper.make_node("Relu", ["c"], ["y"], name="n")]
    model = labkit.import_onnx(save(tmp_path, nodes, {}, [1, 2, 2, 2]))
    names = [r["node"] for r in model.describe(1)]
    assert len(set(names)) == 4 and names[:2] == ["n", "n#2"]
