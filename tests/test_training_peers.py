"""The small ResNet in TensorFlow (labkit.models.resnet_small_tf), the design's trainer: from the
same parameters and batch, one step agrees with the float64 reference step and with labkit's; a few
steps through fit_peer (the same batches in the same order and the same rates as labkit's fit) end
where labkit's end."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit.checks import rel_error
from labkit.models import training
from labkit.models.resnet_small import ResNetSmall, reference_loss_and_grads, reference_pre_activations
from labkit.reference import backward as rb

from helpers import away_from_kinks

tf = pytest.importorskip("tensorflow", reason="TensorFlow is the reference extra (tensorflow-cpu)")
from labkit.models.resnet_small_tf import TFResNetSmall  # noqa: E402

LR, MOMENTUM, WD = 0.05, 0.9, 5e-4


def largest_rel(a: dict, b: dict) -> float:
    return max(rel_error(a[k], b[k]) for k in a)


@pytest.mark.check
def test_one_step_matches_the_float64_reference_and_labkit():
    rng = np.random.default_rng()
    N, H, W = 5, 9, 11
    net = ResNetSmall(4, seed=3, input_hw=(H, W))
    state = net.state()
    x, y = away_from_kinks(     # float32's sums on the same side of every ReLU as float64's
        lambda: (rng.standard_normal((N, 1, H, W)).astype(np.float32), rng.integers(0, 10, N).astype(np.int32)),
        lambda x, _y: reference_pre_activations(state, x))
    peer = TFResNetSmall(state, momentum=MOMENTUM, weight_decay=WD)
    loss = peer.train_batch(x, y, LR)
    ref_loss, grads = reference_loss_and_grads(state, x.astype(np.float64), y)
    ref = {k: rb.sgd_momentum(state[k], grads[k], np.zeros_like(grads[k]), lr=LR, momentum=MOMENTUM,
                              weight_decay=WD)[0] for k in state}
    assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss)
    assert largest_rel(peer.state(), ref) <= 1e-5
    net.train_step(labkit.xp.asarray(x), labkit.xp.asarray(y), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    assert largest_rel(net.state(), peer.state()) <= 1e-4


def test_fit_peer_reads_the_batches_and_rates_of_fit():
    # Six steps over two epochs (each its own order), a cosine rate with warmup, mirroring: if the
    # batches, their order or a rate differed, the parameters would part by far more than float32.
    kw = dict(epochs=2, batch=16, lr=LR, seed=4, schedule="cosine", warmup_steps=2, mirror=True, train_limit=48,
              test_limit=32, progress=False)
    net = ResNetSmall(4, seed=1)
    peer = TFResNetSmall(net.state(), momentum=0.9, weight_decay=5e-4)
    ours = training.fit(net, weight_decay=5e-4, **kw)
    theirs = training.fit_peer(peer, **kw)
    assert len(theirs["step_loss"]) == 6 and len(theirs["test_accuracy"]) == 2
    assert np.allclose(ours["step_loss"], theirs["step_loss"], rtol=1e-4, atol=0)
    assert largest_rel(net.state(), peer.state()) <= 1e-4
    assert np.allclose(ours["test_accuracy"], theirs["test_accuracy"], atol=1.5 / 32)    # one image at most
