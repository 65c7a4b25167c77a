"""Training the small ResNet on Fashion-MNIST with labkit's kernels: mini-batches staged through
pinned host memory, a progress bar per epoch, the loss per step and the test accuracy per epoch.

    hist = fit(ResNetSmall(64), epochs=5, batch=256, lr=0.05)
    hist["test_accuracy"][-1]

Images are standardized with the training split's mean and standard deviation of pixel values
(MEAN, STD: float32, (N, 1, 28, 28)); each epoch visits the training images in an
order drawn from ``numpy.random.default_rng(seed + epoch)``; the last, partial batch of an epoch is
dropped (a step's shapes never change: one plan, capturable as a CUDA graph).
"""
from __future__ import annotations

import time

import numpy as np

from .. import backends
from ..backends.graph import Graph
from ..checks import check_float, check_int, to_numpy
from ..data import load_fashion_mnist
from ..measure.sweep import progress_bar
from .resnet_small import ResNetSmall

__all__ = ["fashion_arrays", "Stager", "fit", "fit_peer", "LabkitTrainer", "epoch_batches", "fraction_right",
           "rate_at", "mirrored", "SCHEDULES", "accuracy", "MEAN", "STD"]

# The training split's pixel mean and standard deviation, of values scaled to [0, 1] (computed over
# the 60,000 images; a test checks them).  Centred inputs let the first steps learn: raw [0, 1]
# pixels all push the first layer's pre-activations the same way.
MEAN, STD = 0.2860, 0.3530


def fashion_arrays(split: str, limit: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(images float32 (N, 1, 28, 28) standardized, (pixel / 255 - MEAN) / STD; labels int32 (N,)) of a
    Fashion-MNIST split, the first ``limit`` of them."""
    images, labels = load_fashion_mnist(split)
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    x = (images.astype(np.float32) / np.float32(255.0) - np.float32(MEAN)) / np.float32(STD)
    return x[:, None], labels.astype(np.int32)


class Stager:
    """Host-to-device copies of fixed-size batches through page-locked (pinned) host buffers: a copy
    from pinned memory runs at the bus's full speed and asynchronously on the GPU's copy engine; from
    pageable memory the driver first copies into a pinned buffer of its own.  Two pinned buffers take
    turns: the host fills one while the GPU may still be reading the other, and an event recorded
    after each copy says when its buffer may be filled again.  On the CPU executor the batch is
    copied into the device-side buffers directly (plain NumPy)."""

    def __init__(self, batch: int, image_shape: tuple = (1, 28, 28)):
        self.backend = backends.current()
        xp = backends.xp()
        self.x = xp.empty((batch,) + tuple(image_shape), dtype=xp.float32)
        self.y = xp.empty(batch, dtype=xp.int32)
        self._turn = 0
        if self.backend == "cuda":
            import cupy
            import cupyx
            self._host = [(cupyx.empty_pinned(self.x.shape, dtype=np.float32),
                           cupyx.empty_pinned(self.y.shape, dtype=np.int32)) for _ in range(2)]
            self._done = [cupy.cuda.Event(), cupy.cuda.Event()]
            for e in self._done:
                e.record()

    def put(self, images: np.ndarray, labels: np.ndarray):
        """Copy one batch to the device buffers (``self.x``, ``self.y``), which it returns; the copy is
        queued on the current stream, after the work already there (the last step that read them)."""
        if self.backend != "cuda":
            self.x[...] = images
            self.y[...] = labels
            return self.x, self.y
        import cupy
        k, self._turn = self._turn, 1 - self._turn
        self._done[k].synchronize()              # the copy that last read this pinned buffer is over
        hx, hy = self._host[k]
        hx[...] = images
        hy[...] = labels
        stream = cupy.cuda.get_current_stream()
        self.x.set(hx, stream=stream)
        self.y.set(hy, stream=stream)
        self._done[k].record(stream)
        return self.x, self.y


def fraction_right(logits_of, images: np.ndarray, labels: np.ndarray, batch: int = 1000) -> float:
    """The fraction of ``images`` whose largest logit (``logits_of(batch of images)``, NumPy) is their
    label, ``batch`` images at a time."""
    right = sum(int((np.asarray(logits_of(images[i:i + batch])).argmax(1) == labels[i:i + batch]).sum())
                for i in range(0, len(images), batch))
    return right / len(images)


def accuracy(net: ResNetSmall, images: np.ndarray, labels: np.ndarray, batch: int = 1000) -> float:
    """The fraction of ``images`` whose largest logit is their label."""
    xp = backends.xp()
    return fraction_right(lambda x: to_numpy(net.logits(xp.asarray(x))), images, labels, batch)


class LabkitTrainer:
    """A labkit network behind ``fit_peer``'s trainer interface (``train_batch``, ``logits``,
    ``state``), each step launched eagerly and its batch staged through pinned memory: for runs that
    go step by step beside other frameworks' (labkit.ladder.divergence).  ``fit`` is the fast way to
    train labkit alone."""

    def __init__(self, net: ResNetSmall, *, momentum: float = 0.9, weight_decay: float = 0.0):
        self.net, self.momentum, self.weight_decay = net, momentum, weight_decay
        self.stage = None

    def train_batch(self, images: np.ndarray, labels: np.ndarray, rate: float) -> float:
        if self.stage is None or len(images) != len(self.stage.y):
            self.stage = Stager(len(images), images.shape[1:])
        x, y = self.stage.put(images, labels)
        loss = self.net.train_step(x, y, lr=rate, momentum=self.momentum, weight_decay=self.weight_decay)
        return float(to_numpy(loss)[0])         # read now: the next step writes the same buffer

    def logits(self, images: np.ndarray) -> np.ndarray:
        return to_numpy(self.net.logits(backends.xp().asarray(images)))

    def state(self) -> dict:
        return self.net.state()


SCHEDULES = ("constant", "cosine")


def rate_at(step: int, total: int, lr: float, schedule: str = "constant", warmup_steps: int = 0) -> float:
    """The learning rate of step ``step`` (from 0) of ``total``: ``lr`` throughout ("constant") or
    falling along half a cosine to 0 at the end ("cosine": large steps first, small ones to settle);
    over the first ``warmup_steps`` it rises linearly to that (large first steps from a random start
    can diverge)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
    rate = lr * 0.5 * (1.0 + float(np.cos(np.pi * step / total))) if schedule == "cosine" else lr
    return rate * (step + 1) / warmup_steps if step < warmup_steps else rate


def mirrored(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A copy of ``images`` (N, 1, H, W) with a random half of them mirrored left to right: a shirt
    is a shirt either way round, and the network sees more of them."""
    out = images.copy()
    flip = rng.random(len(images)) < 0.5
    out[flip] = out[flip][..., ::-1]
    return out


def epoch_batches(x_train: np.ndarray, y_train: np.ndarray, batch: int, *, seed: int, epoch: int,
                  mirror: bool = False):
    """The batches of one epoch, (images, labels) NumPy, in the order every trainer here uses: a
    permutation drawn from ``default_rng(seed + epoch)`` (then, with ``mirror``, the same generator
    mirrors a random half of the images), the last partial batch dropped.  labkit's ``fit`` and
    ``fit_peer`` (PyTorch, TensorFlow) read the same batches in the same order."""
    rng = np.random.default_rng(seed + epoch)
    order = rng.permutation(len(x_train))
    images = mirrored(x_train, rng) if mirror else x_train
    for s in range(len(x_train) // batch):
        idx = order[s * batch:(s + 1) * batch]
        yield images[idx], y_train[idx]


def _checked_settings(epochs, batch, lr, seed, schedule, warmup_steps, train_limit, test_limit) -> float:
    """Refuse a bad setting that ``fit`` and ``fit_peer`` share before any data is read or any step is
    taken: found later, it would fail deep inside (a batch of 0 divides by zero) or after a whole epoch
    of training (a test_limit of 0 divides by zero in the first evaluation).  Returns ``lr`` as a
    float: a NumPy scalar rate would reach the SGD kernel's settings, which take Python numbers."""
    check_int(epochs, "epochs")
    check_int(batch, "batch")
    lr = check_float(lr, "lr", above=True)
    check_int(seed, "seed", low=0)             # numpy.random.default_rng(seed + epoch)
    rate_at(0, 1, lr, schedule)                 # a schedule it does not know fails here
    check_int(warmup_steps, "warmup_steps", low=0)
    for name, limit in (("train_limit", train_limit), ("test_limit", test_limit)):
        if limit is not None:
            check_int(limit, f"{name} (None: the whole split)")
    return lr


def fit(net: ResNetSmall, *, epochs: int, batch: int, lr: float, momentum: float = 0.9,
        weight_decay: float = 5e-4, seed: int = 0, schedule: str = "constant", warmup_steps: int = 0,
        mirror: bool = False, graph: bool = False, train_limit: int | None = None,
        test_limit: int | None = None, progress: bool = True) -> dict:
    """Train ``net`` on Fashion-MNIST's training split; evaluate on the test split after each epoch.
    The learning rate of each step is ``rate_at(step, epochs * steps, lr, schedule, warmup_steps)``;
    it reaches the SGD kernel through device memory (ResNetSmall.sgd), so changing it costs one small
    copy.  ``mirror``: each epoch a seeded random half of the training images is mirrored.  ``graph``:
    the first step runs as usual and is captured as one CUDA graph (forward, backward, SGD), which
    every later step replays: one launch from Python per step instead of some forty (on the CPU
    executor the steps run as they are).  Returns
    {"step_loss": [...], "epoch_loss": [...], "test_accuracy": [...], "train_accuracy": [...],
    "epoch_seconds": [...]} (the loss of each step is read back once per epoch, not per step: a read
    would wait for the GPU every step).  A bad setting is refused before anything is read or trained."""
    lr = _checked_settings(epochs, batch, lr, seed, schedule, warmup_steps, train_limit, test_limit)
    momentum, weight_decay = check_float(momentum, "momentum"), check_float(weight_decay, "weight_decay")
    x_train, y_train = fashion_arrays("train", train_limit)
    x_test, y_test = fashion_arrays("test", test_limit)
    steps = len(x_train) // batch
    if steps < 1:
        raise ValueError(f"batch {batch} is larger than the {len(x_train)} training images")
    stage = Stager(batch)
    xp = backends.xp()
    losses = xp.empty(steps, dtype=xp.float32)
    hist = {"step_loss": [], "epoch_loss": [], "test_accuracy": [], "train_accuracy": [], "epoch_seconds": []}
    replay, out = None, {}

    def step() -> None:            # reads the stager's device buffers, which every batch is copied into
        out["loss"] = net.loss_and_gradients(stage.x, stage.y)
        net.sgd.step()

    for epoch in range(epochs):
        batches = epoch_batches(x_train, y_train, batch, seed=seed, epoch=epoch, mirror=mirror)
        t0 = time.perf_counter()
        for s in progress_bar(range(steps), desc=f"epoch {epoch + 1}/{epochs}", show=progress):
            stage.put(*next(batches))
            rate = rate_at(epoch * steps + s, epochs * steps, lr, schedule, warmup_steps)
            net.sgd.set(lr=rate, momentum=momentum, weight_decay=weight_decay)    # outside any capture
            if replay is not None:
                replay.launch()
            elif graph:
                replay = Graph([step])     # on a GPU: runs this step once, then captures it
                if not replay.on_gpu:
                    replay.launch()        # the CPU executor's Graph runs its steps only when launched
            else:
                step()
            losses[s:s + 1] = out["loss"]
        epoch_losses = to_numpy(losses).tolist()
        hist["epoch_seconds"].append(time.perf_counter() - t0)
        hist["step_loss"] += epoch_losses
        hist["epoch_loss"].append(float(np.mean(epoch_losses)))
        hist["test_accuracy"].append(accuracy(net, x_test, y_test))
        hist["train_accuracy"].append(accuracy(net, x_train[:len(x_test)], y_train[:len(x_test)]))
    return hist


def fit_peer(trainer, *, epochs: int, batch: int, lr: float, seed: int = 0, schedule: str = "constant",
             warmup_steps: int = 0, mirror: bool = False, train_limit: int | None = None,
             test_limit: int | None = None, progress: bool = True) -> dict:
    """``fit`` for another framework's copy of the network: the same batches in the same order
    (``epoch_batches``), the same rate at every step, the same evaluation.  ``trainer`` has
    ``train_batch(images, labels, rate)`` (one SGD step, momentum and weight decay its own, as
    labkit's; returns the loss, or something ``float()`` reads later) and ``logits(images)`` (NumPy).
    Returns ``fit``'s history; a bad setting is refused, as by ``fit``, before the trainer takes a step."""
    lr = _checked_settings(epochs, batch, lr, seed, schedule, warmup_steps, train_limit, test_limit)
    x_train, y_train = fashion_arrays("train", train_limit)
    x_test, y_test = fashion_arrays("test", test_limit)
    steps = len(x_train) // batch
    if steps < 1:
        raise ValueError(f"batch {batch} is larger than the {len(x_train)} training images")
    hist = {"step_loss": [], "epoch_loss": [], "test_accuracy": [], "train_accuracy": [], "epoch_seconds": []}

    for epoch in range(epochs):
        batches = epoch_batches(x_train, y_train, batch, seed=seed, epoch=epoch, mirror=mirror)
        t0 = time.perf_counter()
        losses = [trainer.train_batch(*next(batches), rate_at(epoch * steps + s, epochs * steps, lr, schedule,
                                                               warmup_steps))
                  for s in progress_bar(range(steps), desc=f"epoch {epoch + 1}/{epochs}", show=progress)]
        losses = [float(v) for v in losses]          # a GPU framework's losses are read once an epoch
        hist["epoch_seconds"].append(time.perf_counter() - t0)
        hist["step_loss"] += losses
        hist["epoch_loss"].append(float(np.mean(losses)))
        hist["test_accuracy"].append(fraction_right(trainer.logits, x_test, y_test))
        hist["train_accuracy"].append(fraction_right(trainer.logits, x_train[:len(x_test)], y_train[:len(x_test)]))
    return hist
