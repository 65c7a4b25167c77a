"""The ECE408 (Spring 2019) Fashion-MNIST model: safe weight loader and NumPy reference.

Network (NCHW activations, as everywhere in labkit)::

    x      (N, 1, 48, 48)   Fashion-MNIST 28x28 resized to 48x48, pixels in [0, 1]
    conv1  (N, 6, 44, 44)   6 filters 1x5x5, valid, + bias, tanh
    pool1  (N, 6, 22, 22)   max 2x2, stride 2
    conv2  (N, 16, 18, 18)  16 filters 6x5x5, valid, + bias, tanh   (no second pooling)
    flat   (N, 5184)        x.reshape(N, -1): C, H, W order
    fc1    (N, 140)         + bias, tanh
    fc2    (N, 10)          + bias -> logits (softmax gives class probabilities)

Weight layouts of the shipped file ``data/models/fashion_mnist_ece408.npz``
(all float32, C-contiguous): conv weights MCKK ``(M, C, K, K)``, dense weights
``(in, out)`` with the rows of ``fc1_w`` in C, H, W flatten order, biases 1-D.
It was written by ``scripts/train_fashion_mnist.py``; its metadata (test
accuracy, TensorFlow version, command) is ``fashion_mnist_ece408.json`` beside it.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import backends, layers
from ..checks import check_array
from ..results import DATA_DIR
from ..data import ArrayFileError, read_npz, resize_images
from ..measure.roofline import Cost, conv2d_cost, dense_cost, pool2d_cost, softmax_cost
from ..reference import conv2d, dense, max_pool2d, tanh
from .plan import Plan, PlannedModel

__all__ = [
    "WEIGHTS_PATH",
    "METADATA_PATH",
    "KERAS_LOGITS_PATH",
    "SHAPES",
    "INPUT_SHAPE",
    "load_weights",
    "check_weights",
    "preprocess",
    "reference_logits",
    "reference_predict",
]

_MODELS_DIR = DATA_DIR / "models"
WEIGHTS_PATH = _MODELS_DIR / "fashion_mnist_ece408.npz"
METADATA_PATH = _MODELS_DIR / "fashion_mnist_ece408.json"
KERAS_LOGITS_PATH = _MODELS_DIR / "fashion_mnist_keras_logits.npz"

INPUT_SHAPE: tuple[int, int, int] = (1, 48, 48)   # (C, H, W) of one image
SHAPES: dict[str, tuple[int, ...]] = {
    "conv1_w": (6, 1, 5, 5),      # MCKK
    "conv1_b": (6,),
    "conv2_w": (16, 6, 5, 5),     # MCKK
    "conv2_b": (16,),
    "fc1_w": (16 * 18 * 18, 140),  # (in, out); rows in C, H, W order
    "fc1_b": (140,),
    "fc2_w": (140, 10),           # (in, out)
    "fc2_b": (10,),
}
_DTYPE = np.dtype(np.float32)
# What the weights can need, with room for a stray extra array (check_weights names it): a file whose
# arrays declare more is refused before anything is allocated.
WEIGHTS_MAX_BYTES = 8 * 2**20
_FIX = ("re-create it with `python scripts/train_fashion_mnist.py` "
        "(see its docstring) or restore it from the repository")


def check_weights(weights: dict[str, np.ndarray], source: str = "weights") -> None:
    """Raise ValueError unless ``weights`` has exactly the keys of :data:`SHAPES`,
    each a finite float32 array of the listed shape."""
    if not isinstance(weights, dict):
        raise TypeError(f"{source}: expected a dict of arrays, got {type(weights).__name__}")
    missing = sorted(set(SHAPES) - set(weights))
    extra = sorted(set(weights) - set(SHAPES))
    if missing or extra:
        raise ValueError(
            f"{source}: wrong keys (missing: {missing or 'none'}; extra: {extra or 'none'}); "
            f"expected exactly {sorted(SHAPES)}")
    for key, shape in SHAPES.items():
        arr = weights[key]
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{source}: {key} must be a numpy array, got {type(arr).__name__}")
        if arr.dtype == object:
            raise ValueError(f"{source}: {key} is an object (pickled) array; "
                             "only float32 arrays are accepted")
        if arr.shape != shape:
            raise ValueError(f"{source}: {key} has shape {arr.shape}, expected {shape}")
        if arr.dtype != _DTYPE:
            raise ValueError(f"{source}: {key} has dtype {arr.dtype}, expected float32")
        if not np.isfinite(arr).all():
            raise ValueError(f"{source}: {key} holds {int((~np.isfinite(arr)).sum())} "
                             "non-finite values (NaN or inf)")


def load_weights(path: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """Load and validate the model's weights from an ``.npz`` file.

    Args:
        path: the file; by default :data:`WEIGHTS_PATH` (the shipped weights).

    Returns:
        ``{key: float32 C-contiguous array}`` with the keys and shapes of
        :data:`SHAPES` (conv weights MCKK, dense weights ``(in, out)``).

    Raises:
        ValueError: the file is missing, not a readable ``.npz`` (truncated or
            corrupt), holds a pickled object array, has a missing or extra key,
            or an array of the wrong shape or dtype or with NaN/inf values.
            The message names the file and the problem.  Nothing in the file
            is ever executed (``allow_pickle=False``).
    """
    p = Path(WEIGHTS_PATH if path is None else path)
    if not p.is_file():
        raise ValueError(f"{p}: weights file not found; {_FIX}")
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ValueError(f"{p}: cannot be read ({exc}); {_FIX}") from None
    if magic != b"PK\x03\x04":        # every .npz is a zip archive
        raise ValueError(f"{p}: not an .npz (zip) archive (it starts with {magic!r}); {_FIX}")
    try:
        weights = read_npz(p, max_bytes=WEIGHTS_MAX_BYTES)   # headers checked before anything is allocated
    except ArrayFileError as exc:
        raise ValueError(f"{exc}; {_FIX}") from None
    try:
        check_weights(weights, str(p))
    except ValueError as exc:
        raise ValueError(f"{exc}; {_FIX}") from None
    return {k: np.ascontiguousarray(weights[k]) for k in SHAPES}


def preprocess(images: np.ndarray) -> np.ndarray:
    """Fashion-MNIST ``uint8 (N, 28, 28)`` -> model input ``float32 (N, 1, 48, 48)``.

    Bilinear resize to 48x48 (half-pixel centers, as ``tf.image.resize``) of
    the pixels scaled by 1/255, exactly as in training
    (:func:`labkit.data.resize_images`; the resize is linear, so scaling
    before or after it is the same).
    """
    return resize_images(images, INPUT_SHAPE[1])


def _check_input(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 4 or x.shape[1:] != INPUT_SHAPE:
        hint = ""
        if x.ndim == 3 and x.shape[1:] == (28, 28):
            hint = "; these look like raw images: pass preprocess(images)"
        raise ValueError(f"x must be NCHW (N, 1, 48, 48), got shape {x.shape}{hint}")
    return x


def reference_logits(weights: dict[str, np.ndarray], x: np.ndarray,
                     batch: int = 256) -> np.ndarray:
    """Pre-softmax scores of the model, computed in float64 with labkit.reference.

    Args:
        weights: as returned by :func:`load_weights`.
        x: NCHW input ``(N, 1, 48, 48)`` (see :func:`preprocess`).
        batch: images per step (bounds the memory of the window views).

    Returns:
        ``float64 (N, 10)`` logits.
    """
    check_weights(weights)
    x = _check_input(x)
    w = weights
    out = np.empty((len(x), SHAPES["fc2_b"][0]), dtype=np.float64)
    for i in range(0, len(x), batch):
        h = tanh(conv2d(x[i:i + batch], w["conv1_w"], w["conv1_b"]))   # (n, 6, 44, 44)
        h = max_pool2d(h, 2)                                           # (n, 6, 22, 22)
        h = tanh(conv2d(h, w["conv2_w"], w["conv2_b"]))                # (n, 16, 18, 18)
        h = tanh(dense(h.reshape(len(h), -1), w["fc1_w"], w["fc1_b"]))  # (n, 140)
        out[i:i + batch] = dense(h, w["fc2_w"], w["fc2_b"])             # (n, 10)
    return out


def reference_predict(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Predicted class indices ``int64 (N,)`` (argmax of :func:`reference_logits`)."""
    return np.argmax(reference_logits(weights, x), axis=1)


def load_keras_outputs(path: str | os.PathLike | None = None) -> dict[str, np.ndarray]:
    """What the Keras model computed, recorded when it was trained (no TensorFlow needed here):
    ``indices`` (32,) and ``logits`` (32, 10) for the first test images, ``predictions`` (10000,),
    its class for every test image.  Read without unpickling; shapes checked."""
    p = Path(path) if path is not None else KERAS_LOGITS_PATH
    want = {"indices": (32,), "labels": (32,), "logits": (32, 10), "predictions": (10000,)}
    try:
        out = read_npz(p, max_bytes=1 << 20)
    except (ArrayFileError, OSError) as exc:
        raise ValueError(f"{p}: not a readable .npz of Keras outputs ({exc}); {_FIX}") from None
    for k, shape in want.items():
        if k not in out or out[k].shape != shape:
            raise ValueError(f"{p}: '{k}' must have shape {shape}, got "
                             f"{None if k not in out else out[k].shape}; {_FIX}")
    return out


# --- the network on labkit's kernels ------------------------------------------------------------
CONV_VARIANTS = ("fused", "naive", "tiled", "constant", "tuned")
TILE2 = 8   # the ladder's tile width for layer 2 (labkit.ladder.TILE_WIDTH): its 18x18 plane


class FashionNet(PlannedModel):
    """The seed's network on the backend in use, every layer a labkit kernel.

        net = FashionNet()                       # the shipped weights, copied to the device once
        probs = net(x)                           # x: float32 (N, 1, 48, 48) on the backend, step by step
        plan = net.plan(N); plan.x[...] = x; plan.run()     # the whole pass as one CUDA graph
        for name, fn in net.layers(x): ...       # each layer as a callable (for per-layer op times)

    ``variant``: "fused" runs layer 1 as one kernel (convolution, bias, tanh and max-pool,
    labkit/kernels/conv_pool.cu) and layer 2 as the tuned convolution; a ladder variant ("naive",
    "tiled", "constant", "tuned") runs both convolutions with it (tanh fused) and pools with
    max_pool2d.  The dense layers are labkit.layers.Dense (tiles and split-K chosen by shape) with
    the bias and tanh fused; softmax is one warp per row.  Each batch size gets a plan (buffers,
    steps, graph) made once; activations stay on the device between layers.
    """

    def __init__(self, weights: dict[str, np.ndarray] | None = None, *, variant: str = "fused"):
        if variant not in CONV_VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(map(repr, CONV_VARIANTS))}, got {variant!r}")
        weights = load_weights() if weights is None else weights
        check_weights(weights)
        self.backend = backends.current()
        xp = backends.xp()
        self.variant = variant
        self.host_weights = weights          # kept (not copied) for replica()
        self.w = {k: xp.array(v) for k, v in weights.items()}   # copies: the host dict stays as it is
        w = self.w
        if variant == "fused":
            self.conv1 = layers.ConvPoolTanh(w["conv1_w"], w["conv1_b"])
            self.v2 = "tuned"
        else:
            self.conv1 = layers.Conv2d(w["conv1_w"], w["conv1_b"], variant=variant, activation="tanh")
            self.pool1 = layers.MaxPool2d(2, 2)
            self.v2 = variant
        self.conv2 = layers.Conv2d(w["conv2_w"], w["conv2_b"], variant=self.v2, activation="tanh", tile_width=TILE2)
        self.fc1 = layers.Dense(w["fc1_w"], w["fc1_b"], activation="tanh")
        self.fc2 = layers.Dense(w["fc2_w"], w["fc2_b"])
        self.softmax = layers.Softmax()
        self._plans: dict[int, Plan] = {}

    def replica(self) -> "FashionNet":
        """The same network on the current device (its weights copied there from the host once)."""
        return FashionNet(self.host_weights, variant=self.variant)

    def _make_plan(self, N: int) -> Plan:
        p = Plan(N, INPUT_SHAPE, self.backend)
        if self.variant == "fused":
            p.add("conv1 + tanh + pool (fused)", (N, 6, 22, 22), self.conv1)
        else:
            p.add(f"conv1 + tanh ({self.variant})", (N, 6, 44, 44), self.conv1)
            p.add("max-pool 2x2", (N, 6, 22, 22), self.pool1)
        h = p.add(f"conv2 + tanh ({self.v2})", (N, 16, 18, 18), self.conv2)
        for name, fc, width, src in (("dense 5184->140 + tanh", self.fc1, 140, h.reshape(N, 5184)),
                                     ("dense 140->10", self.fc2, 10, None)):
            ws = p.add_workspace(name, fc.workspace_shape(N))
            p.add(name, (N, width), lambda src, out, fc=fc, ws=ws: fc(src, out, workspace=ws), source=src)
        p.add("softmax", (N, 10), self.softmax)
        return p

    def step_costs(self, N: int) -> dict[str, Cost]:
        """Each step of ``plan(N)`` by name -> its FLOPs and least bytes (labkit.measure.roofline).
        The fused layer 1 moves the input, weights and pooled output only: the 44x44 planes never
        leave the chip."""
        C, H, W = INPUT_SHAPE
        conv1 = conv2d_cost(N, C, H, W, 6, 5)
        pool1 = pool2d_cost(N, 6, 44, 44, 2, 2)
        out: dict[str, Cost] = {}
        if self.variant == "fused":
            out["conv1 + tanh + pool (fused)"] = Cost(conv1.flops + pool1.flops,
                                                      conv1.bytes - 4 * N * 6 * 44 * 44 + 4 * N * 6 * 22 * 22,
                                                      pool1.out_shape)
        else:
            out[f"conv1 + tanh ({self.variant})"] = conv1
            out["max-pool 2x2"] = pool1
        out[f"conv2 + tanh ({self.v2})"] = conv2d_cost(N, 6, 22, 22, 16, 5)
        out["dense 5184->140 + tanh"] = dense_cost(N, 5184, 140)
        out["dense 140->10"] = dense_cost(N, 140, 10)
        out["softmax"] = softmax_cost(N, 10)
        return out

    def _check(self, x) -> int:
        _check_model_input(x)
        check_array(x, "x", "NCHW", 4, self.backend)
        return int(x.shape[0])

    def layers(self, x) -> list[tuple[str, object]]:
        """The forward pass as (name, zero-argument callable) steps, in order, reading x (copied into
        the plan's input buffer once, here) and writing the plan's buffers."""
        p = self.plan(self._check(x))
        p.x[...] = x
        return list(p.steps)

    def logits(self, x):
        """Pre-softmax scores (N, 10) on the backend (runs every layer but the softmax)."""
        return self.plan(self._check(x)).eager(x, stop="softmax")

    def __call__(self, x):
        """Class probabilities (N, 10) on the backend.  The array is the plan's, reused by the next
        call with the same batch size: copy it (``.copy()``) to keep it."""
        return self.plan(self._check(x)).eager(x)


def _check_model_input(x) -> None:
    shape = tuple(int(v) for v in getattr(x, "shape", ()))
    if len(shape) != 4 or shape[1:] != (1, 48, 48):
        raise ValueError(f"the model takes float32 (N, 1, 48, 48) images, got shape {shape}: "
                         "preprocess(images_uint8) resizes Fashion-MNIST's 28x28 to 48x48")
    if str(x.dtype) != "float32":
        raise TypeError(f"the model takes float32 images, got {x.dtype}: x.astype(numpy.float32)")
