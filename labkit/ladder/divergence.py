"""How far training runs from the same start drift apart when their arithmetic differs only in
rounding: several trainers fed the same batches at the same rates, step by step, their parameters
compared every so often; and, over many seeds, how far their final test accuracies fall apart.

    rows = lockstep({"labkit": LabkitTrainer(net), "float64": TorchResNetSmall(state, lr=0.03, dtype="float64")},
                    epochs=1, batch=16, lr=0.03, seed=0)
    rows["distance"]["labkit|float64"]          # relative distance of the parameters at rows["steps"]
    seed_gaps(runs, "labkit_tuned", "torch")    # final accuracies of two kinds of run, seed by seed

A trainer is anything with ``train_batch(images, labels, rate)``, ``logits(images)`` (NumPy) and
``state()`` (NumPy parameters by name): labkit.models.training.LabkitTrainer, labkit.peers.TorchResNetSmall.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..models.training import epoch_batches, fashion_arrays, fraction_right, rate_at

__all__ = ["lockstep", "checkpoints", "relative_distance", "seed_gaps"]


def checkpoints(total: int, per_decade: int = 6) -> list[int]:
    """Step counts from 0 to ``total``, about ``per_decade`` of them to each factor of ten: a drift
    that grows by orders of magnitude is read on a log axis."""
    marks = np.unique(np.round(np.logspace(0, np.log10(max(total, 1)), 1 + int(per_decade * np.log10(max(total, 10))))))
    return sorted({0, total, *(int(m) for m in marks if m <= total)})


def relative_distance(a: dict, b: dict) -> float:
    """||a - b|| / ||b|| over all parameters together, in float64."""
    keys = sorted(b)
    if sorted(a) != keys:
        raise ValueError(f"the two states hold different parameters: {sorted(a)} against {keys}")
    va = np.concatenate([np.asarray(a[k], np.float64).ravel() for k in keys])
    vb = np.concatenate([np.asarray(b[k], np.float64).ravel() for k in keys])
    return float(np.linalg.norm(va - vb) / np.linalg.norm(vb))


def lockstep(trainers: dict, *, epochs: int, batch: int, lr: float, seed: int = 0, schedule: str = "constant",
             warmup_steps: int = 0, mirror: bool = False, at: list[int] | None = None,
             train_limit: int | None = None, test_limit: int | None = None) -> dict:
    """Train every trainer of ``trainers`` (name -> trainer, all from the same parameters) on
    ``fit``'s batches and rates (labkit.models.training), one step each in turn.  At the step counts
    ``at`` (default ``checkpoints`` of the run), the relative distance of every pair's parameters;
    after each epoch, each one's test accuracy.  Returns {"steps": [...], "distance": {"a|b": [...]},
    "test_accuracy": {name: [per epoch]}}."""
    if len(trainers) < 2:
        raise ValueError("lockstep compares at least two trainers")
    x_train, y_train = fashion_arrays("train", train_limit)
    x_test, y_test = fashion_arrays("test", test_limit)
    steps = len(x_train) // batch
    if steps < 1:
        raise ValueError(f"batch {batch} is larger than the {len(x_train)} training images")
    total = epochs * steps
    marks = set(checkpoints(total) if at is None else at)
    pairs = list(itertools.combinations(trainers, 2))
    out = {"steps": [], "distance": {f"{a}|{b}": [] for a, b in pairs}, "test_accuracy": {n: [] for n in trainers}}

    def measure(step: int) -> None:
        states = {name: t.state() for name, t in trainers.items()}
        out["steps"].append(step)
        for a, b in pairs:
            out["distance"][f"{a}|{b}"].append(relative_distance(states[a], states[b]))

    step = 0
    if 0 in marks:
        measure(0)
    for epoch in range(epochs):
        for images, labels in epoch_batches(x_train, y_train, batch, seed=seed, epoch=epoch, mirror=mirror):
            rate = rate_at(step, total, lr, schedule, warmup_steps)
            for t in trainers.values():
                t.train_batch(images, labels, rate)
            step += 1
            if step in marks:
                measure(step)
        for name, t in trainers.items():
            out["test_accuracy"][name].append(fraction_right(t.logits, x_test, y_test))
    return out


def seed_gaps(runs: list[dict], a: str, b: str, *, repeat_a: int = 0, repeat_b: int = 0) -> dict:
    """Seed by seed, the final test accuracy of run kind ``a`` (its repeat ``repeat_a``) minus that of
    ``b``.  ``runs``: rows {"seed", "run", "repeat", "test_accuracy": [per epoch]} (scripts/train_resnet.py
    --seeds).  Returns {"seeds", "gaps" (points), "mean", "sd", "largest" (absolute), "over_1"
    (how many seeds are more than a point apart)}."""
    final = {(r["run"], r["repeat"], r["seed"]): r["test_accuracy"][-1] for r in runs}
    seeds = sorted({s for (run, rep, s) in final if (a, repeat_a, s) in final and (b, repeat_b, s) in final})
    if not seeds:
        raise ValueError(f"no seed has both {a!r} (repeat {repeat_a}) and {b!r} (repeat {repeat_b})")
    gaps = np.array([100 * (final[(a, repeat_a, s)] - final[(b, repeat_b, s)]) for s in seeds])
    return {"seeds": seeds, "gaps": gaps.tolist(), "mean": float(gaps.mean()),
            "sd": float(gaps.std(ddof=1)) if len(gaps) > 1 else 0.0,
            "largest": float(np.abs(gaps).max()), "over_1": int((np.abs(gaps) > 1.0).sum())}
