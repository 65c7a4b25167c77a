"""A NaN goes where PyTorch sends it, through every kernel with an activation or a ReLU's gate, forward
and backward, against the float64 references: NaN at exactly the positions where the reference has
one, the other values close.

PyTorch's rules: relu, relu6 and tanh of NaN are NaN (fmaxf(NaN, 0) would be 0: the NaN would vanish
and the loss look finite); a max-pool window holding a NaN gives NaN; a softmax row or a
cross-entropy row holding a NaN logit is NaN; ReLU's backward is ``0 where y <= 0, else dy``, so a NaN
y passes dy and a NaN dy is zeroed only where y <= 0.

Each case puts NaN in one operand at a time (the input; the weights; dy; the gate).  A NaN weight sits
at the centre of a padded 3x3 filter: a corner tap meets the zero padding, and whether 0 * NaN is
computed there (it is in the reference) is how a kernel handles its borders, not what it does with
NaN.  Shapes are tiny: most kernels are compiled for the shape they run.
"""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import reference
from labkit.checks import rel_error, to_numpy
from labkit.models import resnet_small as rs
from labkit.models.training import LabkitTrainer
from labkit.ops import training as tr
from labkit.ops.conv import conv2d
from labkit.ops.conv_small import SmallConv3x3
from labkit.ops.conv_winograd import WinogradConv3x3, WinogradTile
from labkit.ops.depthwise import DepthwiseConv2d, depthwise_layer
from labkit.ops.dw_project import DepthwiseProject
from labkit.ops.gemm import gemm, gemm_few_rows
from labkit.ops.implicit import ImplicitConv2d
from labkit.ops.pool_softmax import max_pool2d, softmax
from labkit.reference import backward as rb
from labkit.shapes import ConvLayer

from helpers import f32, poisoned

rng = np.random.default_rng()
xp = labkit.xp
ACT = {"relu": reference.relu, "relu6": reference.relu6, "tanh": reference.tanh}


def assert_nan_where_reference(got, ref, tol=1e-5):
    """NaN exactly where the float64 ``ref`` has NaN, the rest within ``tol`` (relative error).  The
    reference must hold both NaN and numbers, or the case tests nothing."""
    got, ref = to_numpy(got).astype(np.float64), np.asarray(ref, dtype=np.float64)
    nan = np.isnan(ref)
    assert nan.any() and not nan.all(), "the case must give the reference NaN and numbers"
    assert np.array_equal(np.isnan(got), nan), (
        f"{int((np.isnan(got) & ~nan).sum())} NaN where the reference has a number, "
        f"{int((~np.isnan(got) & nan).sum())} numbers where it has NaN")
    assert rel_error(got[~nan], ref[~nan]) < tol


def with_nan(a, *where):
    """A float64 copy of ``a`` with NaN at each index tuple of ``where``."""
    a = np.array(a, dtype=np.float64)
    for i in where:
        a[i] = np.nan
    return a


# --- the elementwise rules themselves ----------------------------------------------------------------
def test_references_follow_pytorch():
    v = np.array([np.nan, -1.0, 0.0, 2.0, 7.0])
    assert np.array_equal(reference.relu(v), [np.nan, 0, 0, 2, 7], equal_nan=True)
    assert np.array_equal(reference.relu6(v), [np.nan, 0, 0, 2, 6], equal_nan=True)
    assert np.isnan(reference.tanh(v)[0])
    # threshold_backward: 0 where y <= 0 (a NaN dy included), else dy (a NaN y passes it)
    y = np.array([np.nan, np.nan, 0.0, 0.0, 3.0, 3.0])
    dy = np.array([5.0, np.nan, 5.0, np.nan, 5.0, np.nan])
    assert np.array_equal(rb.relu_backward(y, dy), [5, np.nan, 0, 0, 5, np.nan], equal_nan=True)


@pytest.mark.check
def test_relu_backward_kernel_is_threshold_backward():
    y = rng.standard_normal(300).clip(0)            # the ReLU's output: zeros and positives
    dy = rng.standard_normal(300)
    y[:40:4] = np.nan                                # NaN outputs: dy passes
    dy[1:80:4] = np.nan                              # NaN gradients: zeroed where y is 0, kept where y > 0
    got = tr.relu_backward(f32(y), f32(dy), out=poisoned(300))
    ref = rb.relu_backward(y.astype(np.float32), dy.astype(np.float32))
    assert (ref[:40:4] != 0).all() and ((y == 0) & np.isnan(dy)).any() and ((y > 0) & np.isnan(dy)).any()
    assert np.array_equal(to_numpy(got), ref.astype(np.float32), equal_nan=True)


# --- the direct convolution ladder (conv_naive, conv_tiled, conv_constant, conv_tuned) ---------------
@pytest.mark.parametrize("variant", ["naive", "tiled", "constant", "tuned"])
def test_conv_ladder_keeps_nan_through_its_activations(variant):
    N, C, H, W, M, K = 2, 2, 9, 8, 3, 3
    x = rng.standard_normal((N, C, H, W))
    w = rng.standard_normal((M, C, K, K)) / np.sqrt(C * K * K)
    b = rng.standard_normal(M)
    cases = [(with_nan(x, (0, 1, 4, 3)), w), (x, with_nan(w, (1, 0, 2, 0)))]   # valid conv: any tap meets data
    for xs, ws in cases:
        for act in ("relu", "tanh"):
            out = poisoned(N, M, H - K + 1, W - K + 1)
            y = conv2d(f32(xs), f32(ws), f32(b), variant=variant, activation=act, tile_width=8, out=out)
            assert_nan_where_reference(y, ACT[act](reference.conv2d(xs, ws, b)))


# --- the implicit GEMM (conv_implicit.cu) --------------------------------------------------------------
@pytest.mark.parametrize("act", ["relu", "relu6"])
def test_implicit_gemm_keeps_nan(act):
    L = ConvLayer(3, 7, 6, 5, 3, 1, 1)
    x = rng.standard_normal((2, L.C, L.H, L.W)) * 4          # values past 6 as well
    w = rng.standard_normal((L.M, L.C, 3, 3))
    b = rng.standard_normal(L.M)
    for xs, ws in [(with_nan(x, (1, 2, 3, 0)), w), (x, with_nan(w, (4, 1, 1, 1)))]:
        y = ImplicitConv2d(f32(ws), f32(b), L, activation=act)(f32(xs), poisoned(2, L.M, L.H, L.W))
        assert_nan_where_reference(y, ACT[act](reference.conv2d(xs, ws, b, pad=1)))


# --- the GEMM ladder (gemm.cu): every variant shares the epilogue ---------------------------------------
@pytest.mark.parametrize("variant,kw", [("naive", {}), ("dbuf", {"splits": 2}), ("few_rows", {})],
                         ids=["naive", "dbuf-splitk", "few_rows"])
def test_gemm_keeps_nan_through_relu_and_tanh(variant, kw):
    M, N, K = 6, 37, 20
    a, bm, bias = rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal(N)
    for aa, bb in [(with_nan(a, (2, 5)), bm), (a, with_nan(bm, (7, 11)))]:     # a row of C, a column of C
        for act in ("relu", "tanh"):
            out = poisoned(M, N)
            if variant == "few_rows":
                y = gemm_few_rows(f32(aa), f32(bb), f32(bias), activation=act, out=out)
            else:
                y = gemm(f32(aa), f32(bb), f32(bias), variant=variant, activation=act, out=out, **kw)
            assert_nan_where_reference(y, ACT[act](aa @ bb + bias))


# --- depthwise (depthwise.cu) and depthwise + projection (dw_project.cu) --------------------------------
@pytest.mark.parametrize("variant", ["naive", "tiled"])
def test_depthwise_keeps_nan_through_relu_and_relu6(variant):
    C, H, W = 3, 9, 7
    L = depthwise_layer(C, H, W, 1)
    x = rng.standard_normal((2, C, H, W)) * 4
    w, b = rng.standard_normal((C, 1, 3, 3)), rng.standard_normal(C)
    for xs, ws in [(with_nan(x, (0, 1, 0, 3), (1, 2, 5, 5)), w), (x, with_nan(w, (2, 0, 1, 1)))]:
        for act in ("relu", "relu6"):
            y = DepthwiseConv2d(f32(ws), f32(b), L, activation=act, variant=variant)(f32(xs), poisoned(2, C, H, W))
            assert_nan_where_reference(y, ACT[act](reference.conv2d(xs, ws, b, pad=1, groups=C)))


def test_depthwise_project_keeps_nan_through_its_relu6():
    N, C, H, W, S, M = 2, 5, 7, 6, 1, 4
    layer = depthwise_layer(C, H, W, S)
    x = rng.standard_normal((N, C, H, W)) * 4
    wdw, bdw = rng.standard_normal((C, 1, 3, 3)), rng.standard_normal(C)
    wp, bp = rng.standard_normal((M, C, 1, 1)) / np.sqrt(C), rng.standard_normal(M)

    def run(xs, wd):
        dwp = DepthwiseProject(f32(wd), f32(bdw), f32(wp), f32(bp), layer)
        ref = reference.conv2d(reference.relu6(reference.conv2d(xs, wd, bdw, stride=S, pad=1, groups=C)), wp, bp)
        return to_numpy(dwp(f32(xs), poisoned(N, M, H, W))), ref

    assert_nan_where_reference(*run(with_nan(x, (1, 3, 2, 4)), wdw))
    # A NaN depthwise weight makes its channel NaN everywhere, and the projection mixes every channel
    # into every output: all NaN (relu6 by fminf(fmaxf(.)) would have made them numbers).
    got, ref = run(x, with_nan(wdw, (0, 0, 1, 1)))
    assert np.isnan(ref).all() and np.isnan(got).all()


# --- pooling, softmax, cross-entropy --------------------------------------------------------------------
def test_max_pool_window_with_nan_is_nan():
    x = -np.abs(rng.standard_normal((1, 2, 6, 6))) - 1      # all negative: a dropped NaN would show as a number
    x = with_nan(x, (0, 0, 0, 0), (0, 1, 3, 4))              # a window's first element, and one inside
    y, ref = max_pool2d(f32(x), 2, 2, out=poisoned(1, 2, 3, 3)), reference.max_pool2d(x, 2, 2)
    assert_nan_where_reference(y, ref)
    assert np.array_equal(to_numpy(y), ref.astype(np.float32), equal_nan=True)     # a max is exact


def softmax64(z):
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_softmax_and_cross_entropy_rows_with_a_nan_logit_are_nan():
    # D = 45: two columns a lane.  Row 0's NaN is the element the softmax's max starts from; row 2's is
    # one a later lane reads; the row max skips a NaN (fmaxf), but the NaN still enters the sum.
    N, D = 4, 45
    z = with_nan(rng.standard_normal((N, D)) * 3, (0, 0), (2, 38))
    assert_nan_where_reference(softmax(f32(z), out=poisoned(N, D)), softmax64(z))
    labels = np.array([1, 4, 0, 44], np.int32)
    loss, dz = tr.softmax_cross_entropy(f32(z), xp.asarray(labels), out=(poisoned(1), poisoned(N, D), poisoned(N)))
    rloss, rdz = rb.softmax_cross_entropy(z, labels)
    assert np.isnan(rloss) and np.isnan(to_numpy(loss)[0])
    assert_nan_where_reference(dz, rdz)


# --- the 3x3 kernels of the small ResNet: conv_small.cu and conv_winograd.cu ----------------------------
def small_case(N=2, C=3, M=4, H=7, W=6):
    L = ConvLayer(C, H, W, M, 3, 1, 1)
    x, w = rng.standard_normal((N, C, H, W)), rng.standard_normal((M, C, 3, 3))
    b, skip = rng.standard_normal(M), rng.standard_normal((N, M, H, W))
    return L, x, w, b, skip


def tile_cover(nan_in, f):
    """The outputs of every f x f output tile whose (f+2) x (f+2) input patch holds a NaN of
    ``nan_in`` (N, C, H, W), for every output channel: where Winograd's transforms may carry it."""
    N, _, H, W = nan_in.shape
    cover = np.zeros((N, H, W), bool)
    for n, _c, h, w in zip(*np.nonzero(nan_in)):
        for ti in range(max(0, (h - 1 - f) // f + 1), min((H - 1) // f, (h + 1) // f) + 1):
            for tj in range(max(0, (w - 1 - f) // f + 1), min((W - 1) // f, (w + 1) // f) + 1):
                cover[n, f * ti:f * ti + f, f * tj:f * tj + f] = True
    return cover[:, None]


def assert_winograd_nan(got, ref, nan_in, f):
    """F(4x4, 3x3)'s version of assert_nan_where_reference: NaN wherever the reference has NaN, and
    elsewhere only in tiles whose patch holds the input's NaN.  Its transforms add an input into sums
    where a finite value's contributions cancel, so a NaN may reach a neighbour of the 3x3 windows
    that hold it (F(2x2, 3x3)'s reach exactly the direct convolution's outputs: no such spread);
    every other value as the reference."""
    got, ref = to_numpy(got).astype(np.float64), np.asarray(ref, dtype=np.float64)
    nan = np.isnan(ref)
    assert nan.any() and not nan.all()
    assert np.isnan(got[nan]).all(), "a NaN of the reference vanished"
    extra = np.isnan(got) & ~nan
    assert not (extra & ~np.broadcast_to(tile_cover(nan_in, f), got.shape)).any(), "a NaN outside its tiles"
    keep = ~np.isnan(got)
    assert rel_error(got[keep], ref[keep]) < 1e-5


@pytest.mark.parametrize("kind", ["small", "winograd2", "winograd4"])
def test_3x3_forward_keeps_nan_through_relu(kind):
    L, x, w, b, skip = small_case()
    wt = f32(rs.to_ckkm(w))
    if kind == "small":
        conv = SmallConv3x3(wt, f32(b), L, activation="relu", residual=True)
    else:
        f = int(kind[-1])
        conv = WinogradConv3x3(wt, f32(b), L, activation="relu", residual=True,
                               tile=WinogradTile(4, 4, 1, 4, 3, f) if f == 4 else None)
        assert conv.tile.f == f
    shape = (2, L.M, L.H, L.W)
    # NaN in x (at a plane's corner and inside), then in the weights (wt is read at every call), then in
    # the skip (the addend, before the ReLU)
    xs = with_nan(x, (0, 0, 0, 0), (1, 2, 3, 4))
    cases = [(xs, w, skip, np.isnan(xs)), (x, with_nan(w, (2, 1, 1, 1)), skip, None),
             (x, w, with_nan(skip, (1, 3, 6, 5)), None)]
    for xc, wc, sc, nan_in in cases:
        wt[...] = f32(rs.to_ckkm(wc))
        y = conv(f32(xc), poisoned(*shape), residual=f32(sc))
        ref = reference.relu(reference.conv2d(xc, wc, b, pad=1) + sc)
        if nan_in is not None and kind == "winograd4":
            assert_winograd_nan(y, ref, nan_in, 4)
        else:
            assert_nan_where_reference(y, ref)


@pytest.mark.parametrize("kind", ["small", "winograd"])
def test_3x3_backward_data_gate_is_threshold_backward(kind):
    L, x, w, _, _ = small_case()
    dy = rng.standard_normal((2, L.M, L.H, L.W))
    skip = rng.standard_normal((2, L.C, L.H, L.W))
    gate = rng.standard_normal((2, L.C, L.H, L.W)).clip(0)      # a ReLU's output: zeros and positives
    make = SmallConv3x3 if kind == "small" else WinogradConv3x3
    bwd = make(f32(rs.to_ckkm(w)), None, L, transpose=True, gate=True, residual=True)
    shape = (2, L.C, L.H, L.W)

    def ref_of(dyc, gc):
        return rb.relu_backward(gc, rb.conv2d_backward(x, w, dyc, pad=1)[0] + skip)

    # A NaN gate (the forward's NaN) passes the gradient: the numbers there must be dx, not 0.
    g = with_nan(gate, (0, 0, 0, 0), (1, 2, 4, 3), (0, 1, 6, 5))
    got = bwd(f32(dy), poisoned(*shape), gate=f32(g), residual=f32(skip))
    ref = ref_of(dy, g)
    assert np.isfinite(ref).all() and (ref[np.isnan(g)] != 0).all()
    assert rel_error(got, ref) < 1e-5
    assert np.allclose(to_numpy(got)[np.isnan(g)], ref[np.isnan(g)], rtol=1e-4, atol=1e-5)
    # A NaN in dy: NaN where the gate is open, 0 where it is shut (gate <= 0)
    d = with_nan(dy, (0, 1, 3, 2))
    got = bwd(f32(d), poisoned(*shape), gate=f32(gate), residual=f32(skip))
    ref = ref_of(d, gate)
    assert kind == "small" or bwd.tile.f == 2      # F(2x2, 3x3): NaN exactly where the direct conv has it
    assert_nan_where_reference(got, ref)
    assert (to_numpy(got)[gate <= 0] == 0).all()


# --- end to end: the small ResNet, one NaN pixel in a batch ---------------------------------------------
@pytest.mark.check
def test_resnet_one_nan_pixel_makes_the_loss_nan():
    net = rs.ResNetSmall(4, seed=1, input_hw=(6, 5))
    x = rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
    labels = rng.integers(0, 10, 2).astype(np.int32)
    x[1, 0, 2, 3] = np.nan
    state = net.state()
    rloss, rgrads = rs.reference_loss_and_grads(state, x, labels)
    trainer = LabkitTrainer(net)
    loss = trainer.train_batch(x, labels, 0.05)
    assert np.isnan(rloss) and np.isnan(loss), loss
    # as in the float64 network, every gradient is NaN: the NaN image's terms reach every sum over the batch
    got = net.gradients()
    for name, r in rgrads.items():
        assert np.array_equal(np.isnan(got[name]), np.isnan(r)), name
    # the step spread the NaN into the weights, so the next, clean batch's loss is NaN too: a NaN
    # that reached the weights does not hide behind finite losses
    clean = rng.standard_normal((2, 1, 6, 5)).astype(np.float32)
    assert np.isnan(trainer.train_batch(clean, labels, 0.05))


@pytest.mark.parametrize("backward,winograd", [("small", True), ("gemm", None)])
def test_resnet_logits_are_nan_only_for_the_image_with_the_nan(backward, winograd):
    net = rs.ResNetSmall(4, seed=2, input_hw=(6, 5), backward=backward, winograd=winograd)
    x = rng.standard_normal((3, 1, 6, 5))
    x = with_nan(x, (1, 0, 0, 4))
    z = rs.reference_pre_activations(net.state(), x)
    s = {k: v.astype(np.float64) for k, v in net.state().items()}
    ref = reference.global_avg_pool(reference.relu(z["block2.conv2"])) @ s["fc.w"] + s["fc.b"]
    assert_nan_where_reference(net.logits(f32(x)), ref, 1e-4)
    loss = net.loss_and_gradients(f32(x), xp.asarray(np.array([3, 1, 7], np.int32)))
    assert np.isnan(to_numpy(loss)[0])
