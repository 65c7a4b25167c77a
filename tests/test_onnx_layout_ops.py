"""labkit.import_onnx on the ops that move values (Transpose, Slice, Split) and ReduceMean over H and
W, as torchvision's ShuffleNetV2 writes them: a channel shuffle (Reshape to 5 axes, Transpose,
Reshape), halves by Split, a head by ReduceMean; each against a float64 NumPy reference, eager and as
a plan, in every opset form; what labkit does not run refused before any launch."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import to_numpy
from labkit.errors import OnnxImportError
from labkit.ops.pool_pad import Permute, SliceCopy, batched_transpose

onnx = pytest.importorskip("onnx", reason="the ONNX importer needs the onnx package (the 'reference' extra)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

rng = np.random.default_rng(41)
TOL = 2e-5


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def save(tmp_path, nodes, inits, in_shape, *, opset=13, outs=("y",)):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
                              initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    path = tmp_path / f"m{opset}.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), str(path))
    return path


def check(path, x, ref):
    model = labkit.import_onnx(path)
    eager = to_numpy(model(labkit.xp.asarray(x))).astype(np.float64)
    p = model.plan(x.shape[0])
    p.x[...] = labkit.xp.asarray(x)
    planned = to_numpy(p.run()).astype(np.float64)
    scale = max(np.abs(ref).max(), 1e-30)
    for got in (eager, planned):
        assert got.shape == ref.shape, (got.shape, ref.shape)
        assert np.abs(got - ref).max() <= TOL * scale
    return model


# --- the kernels ---------------------------------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("shape, perm", [((2, 3, 4, 5, 7), (0, 2, 1, 3, 4)), ((3, 5, 7), (2, 0, 1)),
                                         ((2, 3, 1, 5, 2, 3), (5, 4, 3, 2, 1, 0)), ((9,), (0,)),
                                         ((1, 9, 2, 3), (0, 2, 3, 1)), ((3, 37, 5, 7), (0, 2, 3, 1)),
                                         ((2, 5, 7, 45), (0, 3, 1, 2)), ((33, 70), (1, 0)),
                                         ((2, 3, 35, 33), (0, 1, 3, 2)), ((4, 3, 2, 5), (2, 3, 0, 1))])
def test_permute_is_numpy_transpose(shape, perm):
    x = randn(*shape)
    out = labkit.xp.full(tuple(shape[p] for p in perm), np.nan, dtype=np.float32)
    got = to_numpy(Permute(perm)(labkit.xp.asarray(x), out))
    assert np.array_equal(got, np.transpose(x, perm))


@pytest.mark.check
def test_which_permutations_are_a_batch_of_transposes():
    """transpose_tiles takes a permutation that keeps its first axes and swaps the two runs after them."""
    assert batched_transpose((8, 96, 56, 56), (0, 2, 3, 1)) == (8, 96, 56 * 56)        # NCHW -> NHWC
    assert batched_transpose((8, 56, 56, 96), (0, 3, 1, 2)) == (8, 56 * 56, 96)        # and back
    assert batched_transpose((4, 3, 2, 5), (2, 3, 0, 1)) == (1, 12, 10)
    assert batched_transpose((2, 3, 4, 5), (0, 1, 3, 2)) == (6, 4, 5)
    for perm in [(0, 1, 2, 3), (0, 2, 1, 3), (3, 2, 1, 0), (1, 0, 3, 2)]:
        assert batched_transpose((2, 3, 4, 5), perm) is None


@pytest.mark.check
@pytest.mark.parametrize("axis, offset, n", [(1, 2, 3), (1, 0, 7), (2, 1, 2), (3, 4, 1), (3, 0, 5)])
def test_slice_copy_takes_one_window_of_an_axis(axis, offset, n):
    x = randn(2, 7, 3, 5)
    shape = list(x.shape)
    shape[axis] = n
    y = labkit.xp.full(tuple(shape), np.nan, dtype=np.float32)
    SliceCopy(axis)(labkit.xp.asarray(x), y, offset)
    assert np.array_equal(to_numpy(y), np.take(x, range(offset, offset + n), axis=axis))


@pytest.mark.check
def test_bad_permutations_and_windows_are_refused():
    with pytest.raises(ValueError, match="perm must order the axes"):
        Permute((0, 0, 1))
    with pytest.raises(ValueError, match="cannot slice"):
        SliceCopy(1)(labkit.xp.zeros((1, 4, 2), np.float32), labkit.xp.zeros((1, 3, 2), np.float32), 2)


# --- ShuffleNetV2's unit -------------------------------------------------------------------------
def shuffle_unit(opset):
    """x (N, 8, H, W) -> Split in halves -> the second through 1x1 conv + ReLU -> Concat -> channel
    shuffle of 2 groups -> ReduceMean over H, W (keepdims 0)."""
    w = randn(4, 4, 1, 1)
    split_sizes = np.array([4, 4], np.int64)
    nodes = []
    inits = {"w": w}
    if opset >= 13:
        inits["split"] = split_sizes
        nodes.append(helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1))
    else:
        nodes.append(helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[4, 4]))
    nodes += [helper.make_node("Conv", ["b", "w"], ["bc"]), helper.make_node("Relu", ["bc"], ["br"]),
              helper.make_node("Concat", ["a", "br"], ["cat"], axis=1)]
    inits["s5"] = np.array([3, 2, 4, 5, 7], np.int64)     # as traced at batch 3
    inits["s4"] = np.array([3, -1, 5, 7], np.int64)
    nodes += [helper.make_node("Reshape", ["cat", "s5"], ["r5"]),
              helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
              helper.make_node("Reshape", ["t5", "s4"], ["sh"])]
    if opset >= 18:
        inits["axes"] = np.array([2, 3], np.int64)
        nodes.append(helper.make_node("ReduceMean", ["sh", "axes"], ["y"], keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceMean", ["sh"], ["y"], axes=[2, 3], keepdims=0))
    return nodes, inits, w


def shuffle_unit_ref(x, w):
    a, b = x[:, :4].astype(np.float64), x[:, 4:]
    br = np.maximum(reference.conv2d(b.astype(np.float64), w), 0)
    cat = np.concatenate([a, br], axis=1)
    N, C, H, W = cat.shape
    sh = cat.reshape(N, 2, C // 2, H, W).transpose(0, 2, 1, 3, 4).reshape(N, C, H, W)
    return sh.mean(axis=(2, 3))


@pytest.mark.check
@pytest.mark.parametrize("opset", [11, 13, 18])
def test_a_shufflenet_unit_in_each_opset_form(tmp_path, opset):
    nodes, inits, w = shuffle_unit(opset)
    x = randn(3, 8, 5, 7)
    model = check(save(tmp_path, nodes, inits, x.shape, opset=opset), x, shuffle_unit_ref(x, w))
    rows = {r["node"]: r for r in model.describe(3)}
    split = [n for n in rows if rows[n]["op"] == "Split"]
    assert len(split) == 2 and split[0].endswith("[0]") and split[1].endswith("[1]")
    assert {rows[n]["kernel"] for n in split} == {"slice_copy (pool_pad.cu)"}
    assert [r["kernel"] for r in rows.values() if r["op"] == "Transpose"] == ["permute (pool_pad.cu)"]
    # exported at batch 3 (the reshapes' literal 3), run at 5
    x5 = randn(5, 8, 5, 7)
    check(save(tmp_path, nodes, inits, x.shape, opset=opset), x5, shuffle_unit_ref(x5, w))


@pytest.mark.check
@pytest.mark.parametrize("starts, ends, axes, window", [
    ([1], [4], [1], (1, 4)), ([-3], [2**62], [1], (3, 6)), ([0, 2], [2**63 - 1, 5], [1, 3], None),
    ([2], [-1], [-1], None)])
def test_slice_with_clamped_and_negative_bounds(tmp_path, starts, ends, axes, window):
    x = randn(2, 6, 3, 5)
    inits = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64), "ax": np.array(axes, np.int64)}
    path = save(tmp_path, [helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"])], inits, x.shape)
    want = x.astype(np.float64)
    for s, e, a in zip(starts, ends, axes):
        n = x.shape[a]
        s, e = (s + n if s < 0 else s), (e + n if e < 0 else e)
        want = np.take(want, range(min(max(s, 0), n), min(max(e, 0), n)), axis=a)
    check(path, x, want)


@pytest.mark.check
def test_split_in_equal_parts_and_by_num_outputs(tmp_path):
    x = randn(2, 7, 3, 4)
    # opset 18: num_outputs 3 on 7 channels -> 3, 3, 1; the second part is the graph's output
    node = helper.make_node("Split", ["x"], ["p0", "p1", "p2"], axis=1, num_outputs=3)
    add = helper.make_node("Add", ["p1", "p1"], ["y"])
    check(save(tmp_path, [node, add], {}, x.shape, opset=18), x, 2 * x[:, 3:6].astype(np.float64))


@pytest.mark.check
@pytest.mark.parametrize("node, inits, opset, match", [
    (helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0, 2, 3]), {}, 13, "moves the batch axis"),
    (helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"]),
     {"st": np.array([0]), "en": np.array([4]), "ax": np.array([1]), "sp": np.array([2])}, 13, "step 1"),
    (helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"]),
     {"st": np.array([0, 1]), "en": np.array([2, 3]), "ax": np.array([1, 2])}, 13, "one axis at a time"),
    (helper.make_node("Slice", ["x", "st", "en", "ax"], ["y"]),
     {"st": np.array([0]), "en": np.array([1]), "ax": np.array([0])}, 13, "an axis after the batch"),
    (helper.make_node("ReduceMean", ["x"], ["y"], axes=[1]), {}, 13, "over H and W"),
    (helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=1), {"sp": np.array([2, 5])}, 13,
     "do not split axis 1"),
])
def test_what_labkit_does_not_run_is_refused_before_any_launch(tmp_path, node, inits, opset, match):
    x = randn(2, 4, 3, 3)
    with pytest.raises(OnnxImportError, match=match):
        model = labkit.import_onnx(save(tmp_path, [node], inits, x.shape, opset=opset,
                                        outs=tuple(o for o in node.output[:1])))
        model(labkit.xp.asarray(x))


@pytest.mark.check
def test_a_slice_of_the_input_s_shape_feeds_a_reshape(tmp_path):
    """x.view(*x.shape[:2], -1): Shape, Slice [0, 2), Concat with -1, Reshape; then softmax over H*W."""
    inits = {"st": np.array([0], np.int64), "en": np.array([2], np.int64), "m1": np.array([-1], np.int64)}
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "st", "en"], ["nc"]),
             helper.make_node("Concat", ["nc", "m1"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["r"]),
             helper.make_node("Softmax", ["r"], ["y"], axis=-1)]
    x = randn(2, 3, 4, 5)
    r = x.astype(np.float64).reshape(2, 3, 20)
    e = np.exp(r - r.max(axis=-1, keepdims=True))
    check(save(tmp_path, nodes, inits, x.shape), x, e / e.sum(axis=-1, keepdims=True))


@pytest.mark.check
@pytest.mark.parametrize("shape, perm", [((3, 37, 5, 7), (0, 2, 3, 1)), ((2, 5, 7, 45), (0, 3, 1, 2)),
                                         ((2, 3, 4, 5, 7), (0, 2, 1, 3, 4))])
def test_permute_adds_an_addend_in_the_copy(shape, perm):
    """y = transpose(x) + addend, in the tiled kernel and the element-a-thread one; a NaN of either stays."""
    x = randn(*shape)
    out_shape = tuple(shape[p] for p in perm)
    r = randn(*out_shape)
    r.reshape(-1)[5] = np.nan
    layer = Permute(perm, add=True)
    out = labkit.xp.full(out_shape, 7.0, dtype=np.float32)
    got = to_numpy(layer(labkit.xp.asarray(x), out, addend=labkit.xp.asarray(r)))
    assert np.array_equal(got, np.transpose(x, perm) + r, equal_nan=True)
    assert layer.kernel(shape).startswith("transpose_tiles" if batched_transpose(shape, perm) else "permute")
    with pytest.raises(ValueError, match="pass addend="):
        layer(labkit.xp.asarray(x))
    with pytest.raises(ValueError, match="addend must have the output's shape"):
        layer(labkit.xp.asarray(x), addend=labkit.xp.asarray(x if x.shape != out_shape else randn(1, 2, 3, 4)))
    with pytest.raises(ValueError, match="without add=True"):
        Permute(perm)(labkit.xp.asarray(x), addend=labkit.xp.asarray(r))


@pytest.mark.parametrize("N", [1, 3])
def test_a_slice_at_bounds_computed_from_shapes(tmp_path, N):
    """x.chunk(2, dim=1) as torch.onnx.export writes it with a dynamic batch (torchvision's
    ShuffleNetV2): the half's end is Shape, Gather(1), Add 1, Div 2, Mul 1 of x; each half a Slice.
    Both halves, at the batch size of the call; a constant sliced at such bounds is shape arithmetic,
    which a kernel's input may not be: refused, naming the node that reads it."""
    one, two, lo, big = (np.array([v], np.int64) for v in (1, 2, 0, 2**62))
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
             helper.make_node("Add", ["c", "one"], ["c1"]), helper.make_node("Div", ["c1", "two"], ["h"]),
             helper.make_node("Mul", ["h", "one"], ["end"]),
             helper.make_node("Slice", ["x", "lo", "end", "one"], ["a"]),
             helper.make_node("Slice", ["x", "end", "big", "one"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"])]
    x = randn(N, 6, 3, 5)
    check(save(tmp_path, nodes, dict(one=one, two=two, lo=lo, big=big), ["N", 6, 3, 5]), x,
          x[:, :3].astype(np.float64) * x[:, 3:])
    nodes[-3] = helper.make_node("Slice", ["w", "lo", "end", "one"], ["a"])
    with pytest.raises(OnnxImportError, match="Mul node .* reads values computed from shapes as data"):
        labkit.import_onnx(save(tmp_path, nodes, dict(one=one, two=two, lo=lo, big=big, w=randn(1, 6, 3, 5)),
                                ["N", 6, 3, 5], opset=14))


@pytest.mark.parametrize("N", [1, 3])
def test_a_gather_at_indices_computed_from_the_batch(tmp_path, N):
    """An as_strided view as torch.onnx's dynamo exporter writes it: x flattened, then a Gather at
    Range(0, N) * C + (the channels' offsets), the batch taken from Shape and a Squeeze without axes.
    Here the offsets reverse the channels; against NumPy, at the batch size of the call."""
    C = 6
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["f"]),
             helper.make_node("Shape", ["x"], ["s"], start=0, end=1), helper.make_node("Squeeze", ["s"], ["n"]),
             helper.make_node("Range", ["zero", "n", "one"], ["r"]), helper.make_node("Mul", ["r", "c"], ["base"]),
             helper.make_node("Unsqueeze", ["base", "ax1"], ["b2"]), helper.make_node("Add", ["b2", "rev"], ["idx"]),
             helper.make_node("Gather", ["f", "idx"], ["y"], axis=0)]
    inits = dict(flat=np.array([-1], np.int64), zero=np.array(0, np.int64), one=np.array(1, np.int64),
                 c=np.array(C, np.int64), ax1=np.array([1], np.int64), rev=np.arange(C - 1, -1, -1, dtype=np.int64))
    x = randn(N, C, 1, 1)
    check(save(tmp_path, nodes, inits, ["N", C, 1, 1], opset=18), x, x.reshape(N, C)[:, ::-1].astype(np.float64))


def test_a_gather_of_constant_indices_and_its_refusals(tmp_path):
    """Gather on axis 1 at constant indices (a negative one counted from the end): x[:, [2, -1, 0]];
    an index outside the axis is refused at import, and so is shape arithmetic past its bound."""
    x = randn(2, 5, 3, 4)
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)]
    check(save(tmp_path, nodes, dict(i=np.array([2, -1, 0], np.int64)), ["N", 5, 3, 4]), x,
          x[:, [2, 4, 0]].astype(np.float64))
    with pytest.raises(OnnxImportError, match="indices from 0 to 5 on an axis of 5"):
        labkit.import_onnx(save(tmp_path, nodes, dict(i=np.array([0, 5], np.int64)), ["N", 5, 3, 4], opset=14))
    inits = dict(zero=np.array(0, np.int64), one=np.array(1, np.int64), big=np.array(2**40, np.int64))
    for limit in ("big", "nbig"):      # a constant Range, and one whose limit comes from the batch
        huge = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
                helper.make_node("Mul", ["n", "big"], ["nbig"]), helper.make_node("Range", ["zero", limit, "one"], ["r"]),
                helper.make_node("Gather", ["x", "r"], ["y"], axis=1)]
        with pytest.raises(OnnxImportError, match="over 4194304 values"):
            labkit.import_onnx(save(tmp_path, huge, inits, ["N", 5, 3, 4], opset=15))
