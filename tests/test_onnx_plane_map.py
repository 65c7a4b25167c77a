"""labkit.import_onnx on layout ops that move the batch axis and bring it back (nodes_plane.PlaneMap):
torch.onnx's dynamo exporter writes an adaptive average pool it cannot write as one AveragePool that
way (Transpose, GatherND, Transpose, then a ReduceMean, or Where, Gather, Add and Div for uneven
windows).  Each graph against ONNX's own reference evaluator, eager and as a plan, at two batch sizes;
a region that mixes images or channels, or is not linear, refused before any launch."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import labkit
from labkit.checks import to_numpy
from labkit.errors import OnnxImportError

onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the 'reference' extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

pytestmark = pytest.mark.check
rng = np.random.default_rng(5)
DATA = Path(__file__).resolve().parent / "data" / "onnx" / "adaptive_pools"


def save(tmp_path, nodes, inits, chw, opset=18):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", *chw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    return path, ReferenceEvaluator(model)


def windows(n: int, out: int) -> list[tuple[int, int]]:
    """adaptive pooling's windows of an axis of n into out: [floor(i n / out), ceil((i+1) n / out))."""
    return [(i * n // out, -(-(i + 1) * n // out)) for i in range(out)]


def even_pool(h, w, ho, wo):
    """GatherND indices (Ho, k, Wo, k, 2) of an adaptive pool whose windows all have k x k taps."""
    rows, cols = windows(h, ho), windows(w, wo)
    k = rows[0][1] - rows[0][0]
    assert all(b - a == k for a, b in rows + cols)
    idx = np.zeros((ho, k, wo, k, 2), np.int64)
    for i, (a, _) in enumerate(rows):
        for j, (c, _) in enumerate(cols):
            for p in range(k):
                for q in range(k):
                    idx[i, p, j, q] = (a + p, c + q)
    return idx


def chain(idx, tail):
    return [helper.make_node("Relu", ["x"], ["r"]),          # a computed value, as after a MaxPool
            helper.make_node("Transpose", ["r"], ["t"], perm=[2, 3, 0, 1]),
            helper.make_node("GatherND", ["t", "idx"], ["g"], batch_dims=0),
            helper.make_node("Transpose", ["g"], ["b"], perm=[4, 5, 0, 1, 2, 3])] + tail


def check(path, ref, chw):
    model = labkit.import_onnx(path)
    for N in (1, 3):
        x = rng.standard_normal((N, *chw)).astype(np.float32)
        want = ref.run(None, {"x": x})[0].astype(np.float64)
        got = to_numpy(model(labkit.xp.asarray(x))).astype(np.float64)
        p = model.plan(N)
        p.x[...] = labkit.xp.asarray(x)
        planned = to_numpy(p.run()).astype(np.float64)
        for y in (got, planned):
            assert y.shape == want.shape and np.abs(y - want).max() <= 1e-5 * max(np.abs(want).max(), 1.0)
    return model


@pytest.mark.parametrize("chw, out", [((4, 1, 1), (3, 3)), ((2, 2, 3), (4, 3)), ((3, 6, 4), (3, 2))])
def test_an_adaptive_pool_by_gather_and_mean(tmp_path, chw, out):
    """AlexNet's head at 64x64 input: a 1x1 plane to 6x6 (here 3x3), and even windows of 1, 2 taps."""
    idx = even_pool(chw[1], chw[2], *out)
    path, ref = save(tmp_path, chain(idx, [helper.make_node("ReduceMean", ["b", "axes"], ["y"], keepdims=0)]),
                     {"idx": idx, "axes": np.array([-3, -1], np.int64)}, chw)
    model = check(path, ref, chw)
    rows = model.describe(2)
    step = next(r for r in rows if "GatherND" in r["op"])
    assert step["op"] == "Transpose+GatherND+Transpose+ReduceMean" and "dense over each plane" in step["kernel"]


def test_uneven_windows_by_where_gather_add_and_div(tmp_path):
    """VGG's head at 64x64 input as the dynamo exporter writes it: windows of 1 or 2 taps padded to 2, the
    padding taps zeroed by a Where, the taps gathered and added, each window divided by its size."""
    h, w, ho, wo = 3, 2, 2, 3                                 # rows [0,2) [1,3); columns [0,1) [0,2) [1,2)
    rows, cols = windows(h, ho), windows(w, wo)
    idx = np.zeros((ho, 2, wo, 2, 2), np.int64)
    pad = np.zeros((ho, 2, wo, 2), bool)
    for i, (a, b) in enumerate(rows):
        for j, (c, d) in enumerate(cols):
            for p in range(2):
                for q in range(2):
                    idx[i, p, j, q] = (min(a + p, h - 1), min(c + q, w - 1))
                    pad[i, p, j, q] = a + p >= b or c + q >= d
    count = np.array([[(b - a) * (d - c) for c, d in cols] for a, b in rows], np.float32)
    tail = [helper.make_node("Where", ["pad", "zero", "b"], ["m"]),
            helper.make_node("Gather", ["m", "i0"], ["s0"], axis=3), helper.make_node("Gather", ["m", "i1"], ["s1"], axis=3),
            helper.make_node("Gather", ["s0", "i0"], ["a00"], axis=4), helper.make_node("Gather", ["s0", "i1"], ["a01"], axis=4),
            helper.make_node("Gather", ["s1", "i0"], ["a10"], axis=4), helper.make_node("Gather", ["s1", "i1"], ["a11"], axis=4),
            helper.make_node("Add", ["a00", "a01"], ["u"]), helper.make_node("Add", ["u", "a10"], ["v"]),
            helper.make_node("Add", ["v", "a11"], ["sum"]), helper.make_node("Div", ["sum", "count"], ["y"])]
    inits = {"idx": idx, "pad": pad, "zero": np.array(0.0, np.float32), "i0": np.array(0, np.int64),
             "i1": np.array(1, np.int64), "count": count}
    check(*save(tmp_path, chain(idx, tail), inits, (2, h, w)), (2, h, w))


AXES = {"axes": np.array([-3, -1], np.int64)}


@pytest.mark.parametrize("tail, inits, match", [
    ([helper.make_node("Transpose", ["g"], ["y"], perm=[4, 5, 1, 0, 2, 3])], {},       # images and channels swapped
     "does not bring it back first"),
    ([helper.make_node("ReduceMean", ["b", "axes"], ["m"], keepdims=0),                 # the mean of the channels
      helper.make_node("ReduceMean", ["m", "c"], ["y"], keepdims=1)], {**AXES, "c": np.array([1], np.int64)},
     "mixes images or channels"),
    ([helper.make_node("ReduceMean", ["b", "axes"], ["m"], keepdims=0), helper.make_node("Add", ["m", "one"], ["y"])],
     {**AXES, "one": np.array(1.0, np.float32)}, "not linear"),
])
def test_a_region_that_is_not_a_map_of_each_plane_is_refused(tmp_path, tail, inits, match):
    idx = even_pool(2, 2, 2, 2)
    nodes = chain(idx, tail)
    if tail[0].input[0] == "g":                              # the swap replaces the chain's second Transpose
        nodes = nodes[:3] + tail
    path, _ = save(tmp_path, nodes, {"idx": idx, **inits}, (3, 2, 2))
    with pytest.raises(OnnxImportError, match=match):
        labkit.import_onnx(path).plan(2)


def test_a_gather_nd_elsewhere_is_still_refused(tmp_path):
    idx = np.zeros((2, 1), np.int64)
    path, _ = save(tmp_path, [helper.make_node("GatherND", ["x", "idx"], ["y"])], {"idx": idx}, (3, 2, 2))
    with pytest.raises(OnnxImportError, match="GatherND.*not supported"):
        labkit.import_onnx(path)


def test_the_dynamo_exporters_adaptive_pools_run_as_pytorch_does():
    """A file torch.onnx's dynamo exporter wrote (tests/data/onnx/adaptive_pools): a 3x3 map pooled to 5x5
    and a global max pooled to 2x2, against PyTorch's logits, eager and as a plan, at batch 3 and 1."""
    model = labkit.import_onnx(DATA / "dynamo18.onnx")
    x = np.random.default_rng(0).standard_normal((3, 3, 12, 12)).astype(np.float32)
    want = np.load(DATA / "logits.npy").astype(np.float64)
    got = to_numpy(model(labkit.xp.asarray(x))).astype(np.float64)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    p = model.plan(1)
    p.x[...] = labkit.xp.asarray(x[2:])
    assert np.abs(to_numpy(p.run()).astype(np.float64) - want[2:]).max() <= 1e-5 * np.abs(want).max()
    ops = [r["op"] for r in model.describe(3)]
    assert sum(op.startswith("Transpose+GatherND+Transpose") for op in ops) == 2 and "ReduceMax" in ops


@pytest.mark.parametrize("node", [helper.make_node("GlobalMaxPool", ["x"], ["y"]),
                                  helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=0),
                                  helper.make_node("ReduceMax", ["x", "axes"], ["y"], keepdims=1)])
def test_a_global_max_pool_keeps_nan_as_pytorch_does(tmp_path, node):
    path, ref = save(tmp_path, [node], {"axes": np.array([2, 3], np.int64)}, (4, 5, 3))
    model = labkit.import_onnx(path)
    x = rng.standard_normal((2, 4, 5, 3)).astype(np.float32)
    x[1, 2, 3, 1] = np.nan                                     # one plane holds a NaN: its max is NaN
    want = ref.run(None, {"x": x})[0]
    got = to_numpy(model(labkit.xp.asarray(x)))
    assert got.shape == want.shape and np.isnan(got.reshape(2, 4)[1, 2])
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.allclose(got[~np.isnan(got)], want[~np.isnan(want)])
