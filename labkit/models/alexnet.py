"""AlexNet (the original grouped network) on labkit's kernels, its float64 reference, its weights and
its input pipeline.

    weights = alexnet.load_weights()                 # $LABKIT_ALEXNET_WEIGHTS, else synthetic (seeded)
    net = alexnet.AlexNet(weights, precision="fp32") # prepares every layer once
    x = alexnet.preprocess(alexnet.load_photos())    # (N, 3, 227, 227) float32, BGR, mean subtracted
    probs = net(labkit.xp.asarray(x))                # (N, 1000) softmax, on the backend
    ref = alexnet.reference_logits(weights, x)       # float64 NumPy

Network (NCHW activations)::

    x      (N, 3, 227, 227)
    conv1  (N, 96, 55, 55)    11x11, stride 4, ReLU, LRN, max-pool 3x3/2 -> (N, 96, 27, 27)
    conv2  (N, 256, 27, 27)   5x5, pad 2, 2 groups, ReLU, LRN, max-pool 3x3/2 -> (N, 256, 13, 13)
    conv3  (N, 384, 13, 13)   3x3, pad 1, ReLU
    conv4  (N, 384, 13, 13)   3x3, pad 1, 2 groups, ReLU
    conv5  (N, 256, 13, 13)   3x3, pad 1, 2 groups, ReLU, max-pool 3x3/2 -> (N, 256, 6, 6)
    fc6    (N, 4096)          flatten (c, h, w) -> dense, ReLU
    fc7    (N, 4096)          dense, ReLU
    fc8    (N, 1000)          dense -> logits, softmax

LRN: TensorFlow's local_response_normalization, depth radius 2, alpha 2e-5, beta 0.75, bias 1.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import backends, reference
from .alexnet_weights import WEIGHTS_ENV, read_bvlc_npy, synthetic_weights, to_labkit

__all__ = ["POOL_AFTER", "LRN", "MEAN_BGR", "INPUT_SHAPE", "IMAGES_DIR", "CLASSES_PATH",
           "load_weights", "class_names", "load_photos", "preprocess", "reference_logits", "AlexNet",
           "weight_bytes"]

_DATA = Path(__file__).resolve().parent.parent.parent / "data"
IMAGES_DIR = _DATA / "images"
CLASSES_PATH = _DATA / "imagenet" / "imagenet_1k_wnid_lemma.tsv"
INPUT_SHAPE = (3, 227, 227)
MEAN_BGR = (103.939, 116.779, 123.68)
LRN = dict(depth_radius=2, bias=1.0, alpha=2e-5, beta=0.75)
POOL_AFTER = ("conv1", "conv2", "conv5")     # a 3x3/2 max-pool follows these
LRN_AFTER = ("conv1", "conv2")


def load_weights(path: str | os.PathLike | None = None) -> tuple[dict[str, np.ndarray], str]:
    """(weights in labkit's layouts, where they came from).

    ``path``, else ``$LABKIT_ALEXNET_WEIGHTS``, names a real ``bvlc_alexnet.npy`` (read safely:
    labkit.models.alexnet_weights); with neither, deterministic synthetic weights of the same
    shapes, and the source says so."""
    path = path or os.environ.get(WEIGHTS_ENV)
    if path:
        return to_labkit(read_bvlc_npy(path)), f"bvlc_alexnet.npy ({path})"
    return to_labkit(synthetic_weights()), "synthetic weights (seed 2012): they classify nothing"


def weight_bytes(weights: dict[str, np.ndarray]) -> dict[str, int]:
    """Bytes of each layer's weights and bias, float32."""
    out: dict[str, int] = {}
    for k, v in weights.items():
        layer = k.rsplit("_", 1)[0]
        out[layer] = out.get(layer, 0) + int(v.nbytes)
    return out


def class_names() -> list[str]:
    """The 1000 ImageNet class names, in AlexNet's output order (the first name of each class)."""
    names = []
    for line in CLASSES_PATH.read_text().splitlines():
        idx, _wnid, lemma = line.split("\t", 2)
        if int(idx) != len(names):
            raise ValueError(f"{CLASSES_PATH}: row {len(names)} has index {idx}")
        names.append(lemma.split(",")[0].strip())
    if len(names) != 1000:
        raise ValueError(f"{CLASSES_PATH}: {len(names)} classes, expected 1000")
    return names


def load_photos(names: list[str] | None = None, size: int = 227) -> tuple[np.ndarray, list[str]]:
    """The shipped photos (data/images), each resized to size x size (bilinear), as uint8 RGB
    (N, size, size, 3), and their file names."""
    from PIL import Image
    files = sorted(p for p in IMAGES_DIR.iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg"))
    if names is not None:
        files = [IMAGES_DIR / n for n in names]
    out = []
    for p in files:
        with Image.open(p) as im:
            out.append(np.asarray(im.convert("RGB").resize((size, size), Image.BILINEAR), dtype=np.uint8))
    return np.stack(out), [p.name for p in files]


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """uint8 or float RGB images (N, 227, 227, 3) -> float32 (N, 3, 227, 227): channels in BGR order,
    the per-channel mean of the training set subtracted (the Caffe model's convention, 0-255 scale)."""
    rgb = np.asarray(rgb)
    if rgb.ndim != 4 or rgb.shape[1:] != (227, 227, 3):
        raise ValueError(f"images must be (N, 227, 227, 3) RGB, got {rgb.shape}: resize with load_photos")
    bgr = rgb[..., ::-1].astype(np.float32) - np.asarray(MEAN_BGR, dtype=np.float32)
    return np.ascontiguousarray(bgr.transpose(0, 3, 1, 2))


def reference_logits(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The network in float64 NumPy (labkit.reference): the oracle every backend is checked against."""
    from ..implicit import ALEXNET_CONVS
    h = np.asarray(x, dtype=np.float64)
    for name, L in ALEXNET_CONVS.items():
        h = reference.relu(reference.conv2d(h, weights[f"{name}_w"], weights[f"{name}_b"], stride=L.stride,
                                            pad=L.pad, groups=L.groups))
        if name in LRN_AFTER:
            h = reference.lrn(h, **LRN)
        if name in POOL_AFTER:
            h = reference.max_pool2d(h, 3, 2)
    h = h.reshape(h.shape[0], -1)
    h = reference.relu(reference.dense(h, weights["fc6_w"], weights["fc6_b"]))
    h = reference.relu(reference.dense(h, weights["fc7_w"], weights["fc7_b"]))
    return reference.dense(h, weights["fc8_w"], weights["fc8_b"])


# The dense layers: a (batch x 9216) @ (9216 x 4096) product has as many rows as images.  Up to
# FEW_ROWS images the layer is bound by reading its weights once, and gemm_few_rows streams them
# (on the H100 its time grows with the rows: past 4 the tiled GEMM is as fast).  Above, gemm_dbuf
# with 16-row blocks up to 16 images, 64-row ones beyond, K split among blocks (splits="auto")
# until every SM has work.
FEW_ROWS = 4
DENSE_PARAMS = {"GEMM_BM": 64, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 8, "GEMM_TN": 8}
DENSE_PARAMS_16_ROWS = {"GEMM_BM": 16, "GEMM_BN": 128, "GEMM_BK": 8, "GEMM_TM": 4, "GEMM_TN": 8}


class AlexNet:
    """The network on the backend in use: implicit-GEMM convolutions with ReLU fused (FP32, or TF32
    tensor cores on a GPU), LRN and max-pooling kernels, dense layers as GEMMs with bias and ReLU
    fused, softmax.  Weights go to the backend once, when the network is made; activations stay
    there.  ``layers`` maps each step's name to a callable (for per-layer timing)."""

    def __init__(self, weights: dict[str, np.ndarray], *, precision: str = "fp32"):
        from .. import gemm, layers
        from ..implicit import ALEXNET_CONVS, ImplicitConv2d
        xp = backends.xp()
        self.precision = precision
        self.w = {k: xp.asarray(v) for k, v in weights.items()}
        self.convs = {name: ImplicitConv2d(self.w[f"{name}_w"], self.w[f"{name}_b"], L, activation="relu",
                                           precision=precision)
                      for name, L in ALEXNET_CONVS.items()}
        self._gemm, self._gemm_few_rows, self._layers = gemm.gemm, gemm.gemm_few_rows, layers

    def dense_config(self, rows: int, name: str) -> tuple[str, int, tuple[int, int, int] | None]:
        """(kernel, K slices, workspace shape or None) of a dense layer on `rows` images: kernel
        "few_rows" (gemm_few_rows) up to FEW_ROWS rows, else "dbuf"."""
        from ..gemm import few_rows_slices, splits_for, splitk_slices
        K, N = (int(v) for v in self.w[f"{name}_w"].shape)
        if rows <= FEW_ROWS:
            slices = few_rows_slices(rows, N, K)[0]
            return "few_rows", slices, (slices, rows, N)
        params = self.dense_params(rows)
        splits = splits_for(rows, N, K, params)
        return "dbuf", splits, ((splitk_slices(K, splits, params), rows, N) if splits > 1 else None)

    @staticmethod
    def dense_params(rows: int) -> dict:
        return DENSE_PARAMS_16_ROWS if rows <= 16 else DENSE_PARAMS

    def dense(self, h, name: str, relu: bool, out=None, workspace=None):
        kernel, splits, _ = self.dense_config(int(h.shape[0]), name)
        w, b, act = self.w[f"{name}_w"], self.w[f"{name}_b"], "relu" if relu else None
        if kernel == "few_rows":
            return self._gemm_few_rows(h, w, b, activation=act, out=out, workspace=workspace)
        return self._gemm(h, w, b, variant="dbuf", params=self.dense_params(int(h.shape[0])), activation=act,
                          out=out, splits=splits, workspace=workspace)

    def plan(self, N: int) -> "Plan":
        """Every activation buffer of a batch of N, allocated now, and the forward pass as a list of
        zero-argument steps writing into them (what a per-kernel breakdown times)."""
        return Plan(self, N)

    def _check(self, x) -> int:
        from ..conv import _check_array
        _check_array(x, "x", "NCHW", 4, backends.current(), backends.xp())
        if tuple(x.shape[1:]) != INPUT_SHAPE:
            raise ValueError(f"x must be (N, 3, 227, 227), got {tuple(x.shape)}: use alexnet.preprocess")
        return int(x.shape[0])

    def logits(self, x):
        """fc8's output (N, 1000) of float32 (N, 3, 227, 227) x on the backend."""
        p = self.plan(self._check(x))
        p.x[...] = x
        for name, fn in p.steps[:-1]:   # all but the softmax
            fn()
        return p.buffers["fc8"]

    def __call__(self, x):
        """Class probabilities (N, 1000) of float32 (N, 3, 227, 227) x on the backend."""
        p = self.plan(self._check(x))
        p.x[...] = x
        for _name, fn in p.steps:
            fn()
        return p.buffers["softmax"]


class Plan:
    """A batch's buffers and steps: ``x`` (the input buffer), ``buffers`` (name -> output of that
    step), ``steps`` [(name, fn)] in order, and the bytes of each buffer (``activation_bytes``).
    ``workspace``: split-K's partial products per layer (no column matrix: the implicit GEMMs never
    write one)."""

    def __init__(self, net: "AlexNet", N: int):
        from .. import layers as L
        from ..implicit import ALEXNET_CONVS
        xp = backends.xp()
        self.N = N
        self.x = xp.empty((N,) + INPUT_SHAPE, dtype=xp.float32)
        self.buffers: dict[str, object] = {}
        self.steps: list[tuple[str, object]] = []
        h = self.x
        # Partial products over slices of K, per layer: split-K in the convolutions at small
        # batches and in the dense layers (None where a layer needs none).
        self.workspace: dict[str, object] = {}

        def add(name, shape, fn):
            out = xp.empty(shape, dtype=xp.float32)
            self.buffers[name] = out
            self.steps.append((name, (lambda src=h, out=out: fn(src, out))))
            return out

        for name, layer in ALEXNET_CONVS.items():
            conv = net.convs[name]
            shape = conv.workspace_shape(N)
            ws = self.workspace[name] = None if shape is None else xp.empty(shape, dtype=xp.float32)
            h = add(name, (N, layer.M) + layer.out_hw,
                    lambda src, out, conv=conv, ws=ws: conv(src, out=out, workspace=ws))
            if name in LRN_AFTER:
                h = add(f"lrn{name[-1]}", h.shape, lambda src, out: L.lrn(src, **LRN, out=out))
            if name in POOL_AFTER:
                c, hh, ww = h.shape[1:]
                h = add(f"pool{name[-1]}", (N, c, (hh - 3) // 2 + 1, (ww - 3) // 2 + 1),
                        lambda src, out: L.max_pool2d(src, 3, 2, out=out))
        h = h.reshape(N, -1)          # a view: the (c, h, w) flatten, no copy
        for name, width, relu in (("fc6", 4096, True), ("fc7", 4096, True), ("fc8", 1000, False)):
            shape = net.dense_config(N, name)[2]
            ws = self.workspace[name] = None if shape is None else xp.empty(shape, dtype=xp.float32)
            h = add(name, (N, width), lambda src, out, name=name, relu=relu, ws=ws:
                    net.dense(src, name, relu, out=out, workspace=ws))
        add("softmax", (N, 1000), lambda src, out: L.softmax(src, out=out))
        self._graph = None

    def run(self) -> None:
        """The forward pass on the plan's buffers (x in, buffers["softmax"] out): on a GPU as one
        CUDA graph, captured on the first call after a first plain run, so a batch costs one launch
        from Python instead of one per kernel; on the CPU executor, step by step."""
        if backends.current() != "cuda":
            for _name, fn in self.steps:
                fn()
            return
        import cupy
        if self._graph is None:
            for _name, fn in self.steps:      # compiles and loads everything before the capture
                fn()
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture()
                try:
                    for _name, fn in self.steps:
                        fn()
                finally:
                    self._graph = stream.end_capture()
            self._stream = stream
        self._graph.launch(cupy.cuda.get_current_stream())

    @property
    def activation_bytes(self) -> dict[str, int]:
        return {"input": int(self.x.nbytes), **{k: int(v.nbytes) for k, v in self.buffers.items()}}

    @property
    def workspace_bytes(self) -> dict[str, int]:
        return {k: (0 if v is None else int(v.nbytes)) for k, v in self.workspace.items()}
