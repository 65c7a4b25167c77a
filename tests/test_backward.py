"""The backward pass and the training step's kernels: each float64 reference passes a central-difference
gradient check; each kernel matches its reference on fresh random odd sizes into a NaN-poisoned
output; on the CPU executor the kernels also run under the memory, barrier and race checks."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.loader import load
from labkit.ops import conv_backward as cb
from labkit.ops import training as tr
from labkit.ops.plans import ints
from labkit.reference import backward as ref
from labkit.shapes import ConvLayer

rng = np.random.default_rng()
xp = labkit.xp
ON_GPU = labkit.backend() == "cuda"
# (N, C, H, W, M, K, stride, pad): odd sizes, strides 1 and 2, padding 0-2, a 1x1 kernel.
CONV_CASES = [(2, 3, 7, 9, 5, 3, 1, 1), (1, 4, 9, 8, 3, 3, 2, 1), (3, 2, 6, 5, 4, 1, 1, 0), (1, 3, 8, 7, 2, 5, 2, 2),
              (2, 5, 5, 5, 3, 3, 1, 0)]


def dev(a):
    return xp.asarray(a)


def poisoned(shape):
    return xp.full(shape, np.nan, dtype=xp.float32)


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def layer_of(case) -> ConvLayer:
    N, C, H, W, M, K, S, P = case
    return ConvLayer(C, H, W, M, K, S, P)


# --- the references, against central differences ------------------------------------------------
@pytest.mark.parametrize("case", CONV_CASES[:4], ids=str)
def test_conv_backward_reference_passes_a_gradient_check(case):
    N, C, H, W, M, K, S, P = case
    x, w, b = (rng.standard_normal(s) for s in ((N, C, H, W), (M, C, K, K), (M,)))
    L = layer_of(case)
    dy = rng.standard_normal((N, M) + L.out_hw)
    dx, dw, db = ref.conv2d_backward(x, w, dy, stride=S, pad=P)
    loss = lambda **kw: ref.conv2d_loss(kw.get("x", x), kw.get("w", w), kw.get("b", b), dy, stride=S, pad=P)
    assert ref.gradient_check(lambda v: loss(x=v), x, dx, samples=40, rng=rng) < 1e-6
    assert ref.gradient_check(lambda v: loss(w=v), w, dw, samples=40, rng=rng) < 1e-6
    assert ref.gradient_check(lambda v: loss(b=v), b, db) < 1e-6


@pytest.mark.check
def test_small_references_pass_gradient_checks():
    x = rng.standard_normal((3, 4, 5, 3))
    x[np.abs(x) < 1e-3] = 0.5                       # keep every input away from ReLU's kink
    dy = rng.standard_normal(x.shape)
    y = reference.relu(x)
    assert ref.gradient_check(lambda v: float((reference.relu(v) * dy).sum()), x, ref.relu_backward(y, dy)) < 1e-6
    dg = rng.standard_normal((3, 4))
    assert ref.gradient_check(lambda v: float((reference.global_avg_pool(v) * dg).sum()), x,
                              ref.global_avg_pool_backward(dg, x.shape)) < 1e-6
    xd, wd, do = rng.standard_normal((5, 7)), rng.standard_normal((7, 3)), rng.standard_normal((5, 3))
    dx, dw, db = ref.dense_backward(xd, wd, do)
    out = lambda x_=xd, w_=wd, b_=np.zeros(3): float(((x_ @ w_ + b_) * do).sum())
    assert ref.gradient_check(lambda v: out(x_=v), xd, dx) < 1e-6
    assert ref.gradient_check(lambda v: out(w_=v), wd, dw) < 1e-6
    assert ref.gradient_check(lambda v: out(b_=v), np.zeros(3), db) < 1e-6
    z, labels = rng.standard_normal((6, 10)) * 3, rng.integers(0, 10, 6)
    loss, dz = ref.softmax_cross_entropy(z, labels)
    assert ref.gradient_check(lambda v: ref.softmax_cross_entropy(v, labels)[0], z, dz) < 1e-6
    assert np.isclose(loss, -np.log(reference.softmax(z)[np.arange(6), labels]).mean())


def test_gradient_check_can_fail():
    x = rng.standard_normal((4, 3))
    assert ref.gradient_check(lambda v: float((v ** 2).sum()), x, 2 * x) < 1e-6
    assert ref.gradient_check(lambda v: float((v ** 2).sum()), x, 2.1 * x) > 1e-2


def test_softmax_cross_entropy_reference_is_stable():
    z = np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4, -1e4]])
    loss, dz = ref.softmax_cross_entropy(z, np.array([0, 2]))
    assert np.isfinite(loss) and np.isfinite(dz).all()
    assert np.isclose(loss, (0.0 + np.log(3)) / 2)


def test_sgd_reference_is_pytorchs_update():
    p, g, v = (rng.standard_normal(5) for _ in range(3))
    p1, v1 = ref.sgd_momentum(p, g, v, lr=0.1, momentum=0.9, weight_decay=0.01)
    assert np.allclose(v1, 0.9 * v + g + 0.01 * p) and np.allclose(p1, p - 0.1 * v1)


# --- the kernels, against the references ---------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv_backward_kernels_match_the_reference(case):
    N, C, H, W, M, K, S, P = case
    L = layer_of(case)
    x, w, dy = f32(N, C, H, W), f32(M, C, K, K), f32(N, M, *L.out_hw)
    rdx, rdw, rdb = ref.conv2d_backward(x, w, dy, stride=S, pad=P)
    dx = cb.conv2d_backward_data(dev(dy), dev(w), L, out=poisoned(rdx.shape))
    dw = cb.conv2d_backward_weight(dev(x), dev(dy), L, out=poisoned(rdw.shape))
    db = cb.conv2d_backward_bias(dev(dy), out=poisoned(rdb.shape))
    assert rel_error(dx, rdx) < 1e-5 and rel_error(dw, rdw) < 1e-5
    assert rel_error(db, rdb, terms=np.abs(dy).sum(axis=(0, 2, 3))) < 1e-5   # M = 2 sums of 16 may cancel
    wt = np.ascontiguousarray(w.reshape(M, -1).T)           # (C*K*K, M): the implicit GEMM's layout
    dx = cb.conv2d_backward_data(dev(dy), dev(wt), L, layout="CKKM", out=poisoned(rdx.shape))
    assert rel_error(dx, rdx) < 1e-5
    for variant in cb.WEIGHT_VARIANTS:
        dw = cb.conv2d_backward_weight(dev(x), dev(dy), L, variant=variant, out=poisoned(rdw.shape))
        dwt = cb.conv2d_backward_weight(dev(x), dev(dy), L, layout="CKKM", variant=variant, out=poisoned(wt.shape))
        assert rel_error(dw, rdw) < 1e-5 and rel_error(dwt, rdw.reshape(M, -1).T) < 1e-5, variant


@pytest.mark.parametrize("case", [c for c in CONV_CASES if c[6] == 1], ids=str)
def test_backward_data_on_the_forward_kernel(case):
    """Stride 1: dx is the implicit GEMM's forward convolution of dy with the flipped weights; the
    weights are read at each call (updated in place, the next call sees them)."""
    N, C, H, W, M, K, S, P = case
    L = layer_of(case)
    w, dy = f32(M, C, K, K), f32(N, M, *L.out_hw)
    wt = dev(np.ascontiguousarray(w.reshape(M, -1).T))
    bwd = cb.BackwardData(wt, L)
    assert rel_error(bwd(dev(dy), out=poisoned((N, C, H, W))), ref.conv2d_backward(np.zeros((N, C, H, W)), w, dy,
                                                                                   stride=S, pad=P)[0]) < 1e-5
    wt *= 2
    assert rel_error(bwd(dev(dy)), ref.conv2d_backward(np.zeros((N, C, H, W)), 2 * w, dy, stride=S, pad=P)[0]) < 1e-5
    with pytest.raises(ValueError, match="stride-1"):
        cb.BackwardData(dev(f32(C * 9, M)), ConvLayer(C, 9, 9, M, 3, 2, 1))


@pytest.mark.parametrize("M,C", [(70, 9), (17, 15)])       # several tiles of rows and of columns, ragged
def test_tiled_backward_weight_covers_many_tiles(M, C):
    L = ConvLayer(C, 6, 5, M, 3, 1, 1)
    x, dy = f32(3, C, 6, 5), f32(3, M, 6, 5)
    _, rdw, _ = ref.conv2d_backward(x, np.zeros((M, C, 3, 3)), dy, stride=1, pad=1)
    dw = cb.conv2d_backward_weight(dev(x), dev(dy), L, out=poisoned(rdw.shape))
    assert rel_error(dw, rdw) < 1e-5


@pytest.mark.check
def test_training_kernels_match_the_reference():
    y = np.maximum(f32(3, 5, 7, 9), 0)
    dy = f32(*y.shape)
    assert rel_error(tr.relu_backward(dev(y), dev(dy), out=poisoned(y.shape)), ref.relu_backward(y, dy)) < 1e-6
    a, b = f32(7, 13), f32(7, 13)
    assert rel_error(tr.add(dev(a), dev(b), out=poisoned(a.shape)), a.astype(np.float64) + b) < 1e-6
    dg = f32(3, 5)
    assert rel_error(tr.gap_backward(dev(dg), (3, 5, 7, 9), out=poisoned((3, 5, 7, 9))),
                     ref.global_avg_pool_backward(dg, (3, 5, 7, 9))) < 1e-6
    x, w, do = f32(37, 11), f32(11, 10), f32(37, 10)
    bias = f32(10)
    assert rel_error(tr.dense_forward(dev(x), dev(w), dev(bias), out=poisoned((37, 10))),
                     reference.dense(x, w, bias)) < 1e-5
    got = tr.dense_backward(dev(x), dev(w), dev(do), out=(poisoned((37, 11)), poisoned((11, 10)), poisoned((10,))))
    for g, r in zip(got, ref.dense_backward(x, w, do)):
        assert rel_error(g, r) < 1e-5


@pytest.mark.check
@pytest.mark.parametrize("shape", [(3, 5, 7, 9), (2, 4, 6, 6), (1, 3, 1, 1), (5, 2, 3, 4)])
def test_pooling_and_relu_backward_in_one_pass(shape):
    """gap_relu_backward against the float64 references of the two in turn: HW odd (the scalar kernel)
    and a multiple of 4 (the float4 one), a poisoned output, NaN in y passing dg and NaN in dg reaching
    its plane where y > 0, as PyTorch's threshold_backward does; the same values as the two kernels."""
    y = np.maximum(f32(*shape), 0)
    y[0, 0, 0, 0] = np.nan
    dg = f32(*shape[:2])
    dg[-1, -1] = np.nan
    got = tr.gap_relu_backward(dev(y), dev(dg), out=poisoned(shape))
    want = ref.relu_backward(y, ref.global_avg_pool_backward(dg, shape))
    np.testing.assert_array_equal(np.isnan(to_numpy(got)), np.isnan(want))
    fin = np.isfinite(want)
    assert np.abs(to_numpy(got)[fin] - want[fin]).max() <= 1e-6 * np.abs(want[fin]).max()
    np.testing.assert_array_equal(to_numpy(got), to_numpy(tr.relu_backward(dev(y), tr.gap_backward(dev(dg), shape))))
    with pytest.raises(ValueError, match=r"dg"):
        tr.gap_relu_backward(dev(y), dev(f32(shape[0], shape[1] + 1)))
    with pytest.raises(ValueError):
        yd = dev(y)
        tr.gap_relu_backward(yd, dev(dg), out=yd)          # out may not overlap an input


@pytest.mark.parametrize("N,D", [(37, 10), (1, 3), (9, 70)])
def test_softmax_cross_entropy_kernel(N, D):
    z = f32(N, D) * 4
    z[0, 0] = 80.0                                      # exp(80) overflows float32: the max comes off first
    labels = rng.integers(0, D, N).astype(np.int32)
    loss, dz = tr.softmax_cross_entropy(dev(z), dev(labels), out=(poisoned((1,)), poisoned((N, D)), poisoned((N,))))
    rloss, rdz = ref.softmax_cross_entropy(z, labels)
    assert abs(float(to_numpy(loss)[0]) - rloss) <= 1e-5 * max(1.0, abs(rloss)) and rel_error(dz, rdz) < 1e-5


@pytest.mark.check
def test_softmax_cross_entropy_refuses_bad_labels_and_flags_out_of_range():
    z = dev(f32(4, 3))
    with pytest.raises(TypeError, match="int32"):
        tr.softmax_cross_entropy(z, dev(np.zeros(4, np.int64)))
    with pytest.raises(TypeError, match="shape"):
        tr.softmax_cross_entropy(z, dev(np.zeros(5, np.int32)))
    loss, dz = tr.softmax_cross_entropy(z, dev(np.array([0, 1, 7, 2], np.int32)))
    d = to_numpy(dz)
    assert np.isnan(to_numpy(loss)[0]) and np.isnan(d[2]).all() and np.isfinite(np.delete(d, 2, 0)).all()


@pytest.mark.check
def test_sgd_kernel_is_the_reference_step():
    p, g, v = f32(1001), f32(1001), f32(1001)
    pd, gd, vd = dev(p.copy()), dev(g.copy()), dev(v.copy())     # (on the CPU executor dev() is no copy)
    tr.sgd_momentum(pd, gd, vd, lr=0.05, momentum=0.9, weight_decay=5e-4)
    rp, rv = ref.sgd_momentum(p, g, v, lr=0.05, momentum=0.9, weight_decay=5e-4)
    assert rel_error(pd, rp) < 1e-6 and rel_error(vd, rv) < 1e-6
    with pytest.raises(ValueError, match="lr must be"):
        tr.sgd_momentum(pd, gd, vd, lr=float("nan"))
    with pytest.raises(ValueError, match="overlap|share"):
        tr.sgd_momentum(pd, pd, vd, lr=0.1)


def test_a_prepared_sgd_reads_its_hyperparameters_at_each_step():
    # As a CUDA graph would replay it: the launch is made once, the learning rate changes between steps.
    p, g, v = f32(777), f32(777), f32(777)
    pd, gd, vd = dev(p.copy()), dev(g.copy()), dev(v.copy())
    opt = tr.SGD(pd, gd, vd)
    with pytest.raises(RuntimeError, match="set"):
        opt.step()
    for lr, wd in ((0.1, 0.0), (0.02, 1e-3)):
        opt.set(lr=lr, momentum=0.8, weight_decay=wd)
        opt.step()
        p, v = ref.sgd_momentum(p, g, v, lr=lr, momentum=0.8, weight_decay=wd)
        assert rel_error(pd, p) < 1e-6 and rel_error(vd, v) < 1e-6


@pytest.mark.check
def test_backward_ops_refuse_bad_input():
    L = ConvLayer(3, 7, 7, 4, 3, 1, 1)
    dy, w = dev(f32(2, 4, 7, 7)), dev(f32(4, 3, 3, 3))
    with pytest.raises(ValueError, match="dy must have shape"):
        cb.conv2d_backward_data(dev(f32(2, 4, 6, 7)), w, L)
    with pytest.raises(ValueError, match="w must have shape"):
        cb.conv2d_backward_data(dy, dev(f32(4, 3, 5, 5)), L)
    with pytest.raises(ValueError, match="groups = 1"):
        cb.conv2d_backward_data(dy, w, ConvLayer(4, 7, 7, 4, 3, 1, 1, 2))
    with pytest.raises(TypeError):
        cb.conv2d_backward_weight(dev(f32(2, 3, 7, 7)).astype(xp.float64), dy, L)
    with pytest.raises(ValueError, match="overlap|share"):
        cb.conv2d_backward_bias(dy, out=dy.reshape(-1)[:4])


@pytest.mark.skipif(ON_GPU, reason="the memory, barrier and race checks are the CPU executor's")
def test_backward_kernels_under_the_executor_checks():
    N, C, H, W, M, K, S, P = 2, 3, 5, 4, 2, 3, 2, 1
    L = ConvLayer(C, H, W, M, K, S, P)
    x, w, dy = f32(N, C, H, W), f32(M, C, K, K), f32(N, M, *L.out_hw)
    rdx, rdw, rdb = ref.conv2d_backward(x, w, dy, stride=S, pad=P)
    mod = load("conv_backward", check="all")
    ho, wo = L.out_hw
    dx, dw, db = (np.full(s, np.nan, np.float32) for s in (rdx.shape, rdw.shape, rdb.shape))
    sizes = ints(N, C, H, W, M, K, S, P, ho, wo, 0)
    mod.get_function("conv_bwd_data_direct")((-(-dx.size // 64),), (64,), (dy, w, dx) + sizes)
    mod.get_function("conv_bwd_weight_direct")((dw.size,), (256,), (x, dy, dw) + sizes)
    mod.get_function("conv_bwd_bias")((M,), (256,), (dy, db) + ints(N, M, ho * wo))
    assert rel_error(dx, rdx) < 1e-5 and rel_error(dw, rdw) < 1e-5
    assert rel_error(db, rdb, terms=np.abs(dy).sum(axis=(0, 2, 3))) < 1e-5   # 2 sums of 12 may cancel
    J, R, per = C * K * K, N * ho * wo, 5                    # the tiled rung: 12 pixels in 3 slices, one ragged
    ws, dw = np.full((3, J, M), np.nan, np.float32), np.full(rdw.shape, np.nan, np.float32)
    mod.get_function("conv_bwd_weight_tiled")((1, 1, -(-R // per)), (256,), (x, dy, ws) + sizes[:-1] + ints(per))
    mod.get_function("conv_bwd_weight_reduce")((1,), (256,), (ws, dw) + ints(3, J * M, M, 0))
    assert R == 12 and rel_error(dw, rdw) < 1e-5
    t = load("train", check="all")
    z, labels = f32(5, 7), np.array([0, 6, 3, 3, 1], np.int32)
    rows, dz, loss = np.full(5, np.nan, np.float32), np.full((5, 7), np.nan, np.float32), np.full(1, np.nan, np.float32)
    t.get_function("softmax_xent")((3,), (64,), (z, labels, rows, dz) + ints(5, 7))     # 2 warps (rows) a block
    t.get_function("mean")((1,), (256,), (rows, loss) + ints(5))
    rl, rdz = ref.softmax_cross_entropy(z, labels)
    assert abs(loss[0] - rl) < 1e-5 and rel_error(dz, rdz) < 1e-5
