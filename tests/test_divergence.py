"""labkit.ladder.divergence: trainers stepped in lockstep on fit's batches and rates, the distances
between their parameters, and the seed-by-seed gaps between runs' final accuracies."""
from __future__ import annotations

import numpy as np
import pytest

from labkit.ladder import divergence
from labkit.models import training
from labkit.models.resnet_small import ResNetSmall

KW = dict(epochs=2, batch=16, lr=0.05, seed=4, schedule="cosine", warmup_steps=2, mirror=True, train_limit=48,
          test_limit=32)


@pytest.mark.check
def test_checkpoints_are_log_spaced_from_0_to_the_end():
    marks = divergence.checkpoints(18_750)
    assert marks[0] == 0 and marks[1] == 1 and marks[-1] == 18_750
    assert marks == sorted(set(marks))
    assert 20 <= len(marks) <= 30                 # about 6 a decade over 4.3 decades
    ratios = np.diff(np.log10(marks[3:]))
    assert ratios.max() < 0.3                     # no decade left without a mark
    assert divergence.checkpoints(1) == [0, 1]


@pytest.mark.check
def test_relative_distance():
    a = {"w": np.array([3.0, 4.0]), "b": np.array([0.0])}
    b = {"w": np.array([3.0, 4.0]), "b": np.array([5.0])}
    assert divergence.relative_distance(a, b) == pytest.approx(5 / np.sqrt(50))
    assert divergence.relative_distance(b, b) == 0.0
    with pytest.raises(ValueError, match="different parameters"):
        divergence.relative_distance({"w": a["w"]}, b)


@pytest.mark.check
def test_seed_gaps_pairs_runs_by_seed_and_repeat():
    runs = [{"seed": s, "run": run, "repeat": rep, "test_accuracy": [0.5, acc]}
            for s, run, rep, acc in [(0, "a", 0, 0.870), (0, "b", 0, 0.885), (0, "b", 1, 0.880),
                                     (1, "a", 0, 0.882), (1, "b", 0, 0.878), (1, "b", 1, 0.881),
                                     (2, "b", 0, 0.9)]]           # seed 2 has no "a": left out
    g = divergence.seed_gaps(runs, "a", "b")
    assert g["seeds"] == [0, 1]
    assert np.allclose(g["gaps"], [-1.5, 0.4])
    assert g["mean"] == pytest.approx(-0.55) and g["largest"] == pytest.approx(1.5) and g["over_1"] == 1
    assert g["sd"] == pytest.approx(np.std([-1.5, 0.4], ddof=1))
    same = divergence.seed_gaps(runs, "b", "b", repeat_a=1)
    assert np.allclose(same["gaps"], [-0.5, 0.3, ]) and same["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="no seed"):
        divergence.seed_gaps(runs, "a", "c")


def test_lockstep_feeds_fits_batches_and_measures_the_drift():
    # Two copies of one network step for step stay bit for bit equal (labkit's kernels have no atomics
    # and a fixed order of sums); a copy nudged at the start is that far away at step 0; and each
    # copy ends where fit, on the same batches and rates, ends.
    seed_net = ResNetSmall(4, seed=1)
    nudged = ResNetSmall(4, seed=1)
    rng = np.random.default_rng()
    start = {k: v * (1 + 1e-3 * rng.standard_normal(v.shape)).astype(np.float32) for k, v in seed_net.state().items()}
    nudged.load_state(start)
    trainers = {"a": training.LabkitTrainer(seed_net, weight_decay=5e-4),
                "b": training.LabkitTrainer(ResNetSmall(4, seed=1), weight_decay=5e-4),
                "nudged": training.LabkitTrainer(nudged, weight_decay=5e-4)}
    first = divergence.relative_distance(ResNetSmall(4, seed=1).state(), start)
    out = divergence.lockstep(trainers, at=[0, 1, 3, 6], **KW)
    assert out["steps"] == [0, 1, 3, 6]
    assert out["distance"]["a|b"] == [0.0] * 4
    assert out["distance"]["a|nudged"][0] == pytest.approx(first, rel=1e-6)
    assert all(0 < d < 1 for d in out["distance"]["a|nudged"])
    assert all(len(acc) == 2 for acc in out["test_accuracy"].values())
    assert out["test_accuracy"]["a"] == out["test_accuracy"]["b"]

    ref = ResNetSmall(4, seed=1)
    hist = training.fit(ref, weight_decay=5e-4, progress=False, **KW)
    got, want = seed_net.state(), ref.state()
    assert all(np.allclose(got[k], want[k], rtol=1e-6, atol=1e-7) for k in want)
    assert hist["test_accuracy"] == out["test_accuracy"]["a"]


@pytest.mark.check
def test_lockstep_needs_two_trainers():
    with pytest.raises(ValueError, match="at least two"):
        divergence.lockstep({"a": None}, **KW)


@pytest.mark.gpu
def test_the_float64_peer_steps_as_the_float64_reference():
    # The reference run of --lockstep: PyTorch's copy kept in float64 takes the float64 NumPy step.
    from labkit import peers
    from labkit.models.resnet_small import reference_loss_and_grads
    from labkit.reference import backward as rb
    why = peers.cudnn_available()
    if why:
        pytest.skip(f"needs PyTorch on a GPU: {why}")
    rng = np.random.default_rng()
    state = {k: v.astype(np.float64) + 0.05 * rng.standard_normal(v.shape)
             for k, v in ResNetSmall(5, seed=7, input_hw=(9, 11)).state().items()}
    x, y = rng.standard_normal((3, 1, 9, 11)), rng.integers(0, 10, 3)
    peer = peers.TorchResNetSmall(state, lr=0.05, weight_decay=5e-4, dtype="float64")
    loss = float(peer.train_batch(x, y, 0.05))
    ref_loss, grads = reference_loss_and_grads(state, x, y)
    got = peer.state()
    assert all(v.dtype == np.float64 for v in got.values())
    assert abs(loss - ref_loss) <= 1e-12 * abs(ref_loss)
    for k in state:
        want = rb.sgd_momentum(state[k], grads[k], np.zeros_like(grads[k]), lr=0.05, momentum=0.9, weight_decay=5e-4)[0]
        assert np.allclose(got[k], want, rtol=1e-11, atol=1e-13), k
    with pytest.raises(ValueError, match="dtype"):
        peers.TorchResNetSmall(state, lr=0.05, dtype="float16")
