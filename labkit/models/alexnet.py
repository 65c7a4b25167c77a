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

import numpy as np

from .. import backends, layers, reference
from ..backends.parallel import run_parallel
from ..checks import check_array, fast_input
from ..measure.roofline import Cost, conv2d_cost, dense_cost, lrn_cost, lrn_max_pool_cost, pool2d_cost, softmax_cost
from ..results import DATA_DIR
from ..shapes import ALEXNET_CONVS
from .alexnet_weights import WEIGHTS_ENV, read_bvlc_npy, synthetic_weights, to_labkit
from .plan import Plan, PlannedModel

__all__ = ["CONVS", "POOL_AFTER", "LRN", "MEAN_BGR", "INPUT_SHAPE", "IMAGES_DIR", "CLASSES_PATH",
           "load_weights", "class_names", "load_photos", "preprocess", "reference_logits", "AlexNet",
           "weight_bytes", "Plan"]

_DATA = DATA_DIR
IMAGES_DIR = _DATA / "images"
CLASSES_PATH = _DATA / "imagenet" / "imagenet_1k_wnid_lemma.tsv"
INPUT_SHAPE = (3, 227, 227)
MEAN_BGR = (103.939, 116.779, 123.68)
LRN = dict(depth_radius=2, bias=1.0, alpha=2e-5, beta=0.75)
CONVS = ("implicit", "auto")    # the convolutions' kernels: the implicit GEMM, or labkit.conv2d's auto choice
POOL_AFTER = ("conv1", "conv2", "conv5")     # a 3x3/2 max-pool follows these
LRN_AFTER = ("conv1", "conv2")
# TF32: the dense layers too run on the tensor cores (DenseTF32, a 1x1 convolution) from this many
# images up.  On an H200 at 1,024: fc6 0.54 against 1.89 ms in FP32, fc7 0.25 against 0.88, fc8 0.13
# against 0.27.  With 64 images or fewer the FP32 kernels, bound by reading the weights, were faster
# (fc7 at 8 images aside: 0.065 against 0.072 ms); between, fc8 was still slower in TF32 (0.12 against
# 0.08 ms at 256).
TF32_DENSE_ROWS = 512


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


class AlexNet(PlannedModel):
    """The network on the backend in use: implicit-GEMM convolutions with ReLU fused (FP32, or TF32
    tensor cores on a GPU), LRN and max-pooling kernels (after conv1 and conv2 one kernel for both,
    ``lrn_max_pool``, unless ``fuse_lrn_pool=False``: steps "lrn1 + pool1" and "lrn2 + pool2"), dense
    layers as GEMMs with bias and ReLU fused (the weights streamed at 1-4 images, split-K where the
    grid would leave SMs idle; in TF32 from TF32_DENSE_ROWS images on the tensor cores), softmax.
    Weights go to the backend once, when the network is made; each batch size gets a plan
    (buffers, workspaces, steps; the whole pass as one CUDA graph) made once.

        probs = net(x)                 # eager: each kernel launched from Python, x read in place
        plan = net.plan(N); plan.x[...] = x; plan.run()   # one CUDA graph; probs in plan.out

    The arrays returned are the plan's buffers, overwritten by the next call of the same batch size:
    copy them to keep them.

    ``convs="auto"`` (FP32 only) runs each convolution on ``labkit.conv2d(variant="auto")``'s kernel
    for its shape and batch size instead: on a GPU the autotuner times the implicit GEMM beside
    Winograd's F(2x2, 5x5) and F(2x2, 3x3) as GEMMs (conv_winograd_gemm.cu), which win on conv2-conv5;
    untuned (the CPU executor) it is the implicit GEMM with its default tiles.
    """

    def __init__(self, weights: dict[str, np.ndarray], *, precision: str = "fp32", fuse_lrn_pool: bool = True,
                 convs: str = "implicit"):
        if convs not in CONVS:
            raise ValueError(f"convs must be one of {CONVS}, got {convs!r}")
        if convs == "auto" and precision != "fp32":
            raise ValueError(f"convs='auto' picks among FP32 kernels: use precision='fp32' with it, got {precision!r}")
        self.backend = backends.current()
        xp = backends.xp()
        self.precision, self.conv_kernels = precision, convs
        self.fuse_lrn_pool = bool(fuse_lrn_pool)
        self.host_weights = weights          # kept (not copied) for replica()
        self.w = {k: xp.asarray(v) for k, v in weights.items()}
        if convs == "auto":
            self.convs = {name: layers.AutoConv2d(self.w[f"{name}_w"], self.w[f"{name}_b"], L, activation="relu")
                          for name, L in ALEXNET_CONVS.items()}
        else:
            self.convs = {name: layers.ImplicitConv2d(self.w[f"{name}_w"], self.w[f"{name}_b"], L, activation="relu",
                                                      precision=precision)
                          for name, L in ALEXNET_CONVS.items()}
        fc_acts = (("fc6", "relu"), ("fc7", "relu"), ("fc8", None))
        self.fcs = {name: layers.Dense(self.w[f"{name}_w"], self.w[f"{name}_b"], activation=act)
                    for name, act in fc_acts}
        self.fcs_tf32 = {name: layers.DenseTF32(self.w[f"{name}_w"], self.w[f"{name}_b"], activation=act)
                         for name, act in fc_acts} if precision == "tf32" else {}
        self.lrn, self.pool, self.softmax = layers.LRN(**LRN), layers.MaxPool2d(3, 2), layers.Softmax()
        self.lrn_pool = layers.LRNMaxPool(3, 2, **LRN)
        self._kind = xp.ndarray
        self._plans: dict[int, Plan] = {}

    def replica(self) -> "AlexNet":
        """The same network on the current device (its weights copied there from the host once)."""
        return AlexNet(self.host_weights, precision=self.precision, fuse_lrn_pool=self.fuse_lrn_pool,
                       convs=self.conv_kernels)

    def compile(self, N: int) -> None:
        """Every layer's kernels for a batch of N compiled (or loaded) and its launch planned, side by
        side in threads (run_parallel): on a GPU the layers' first searches (labkit.autotune) then
        share the host's cores instead of taking turns.  ``plan(N)`` does this first."""
        parts = [*self.convs.values(), *self.dense_layers(N).values()]
        run_parallel([lambda c=c: c.plan(N) for c in parts])

    def dense_layers(self, N: int) -> dict:
        """fc6-fc8 as a batch of N runs them: TF32 on the tensor cores from TF32_DENSE_ROWS images in a
        TF32 network, else the FP32 GEMMs."""
        return self.fcs_tf32 if self.fcs_tf32 and N >= TF32_DENSE_ROWS else self.fcs

    def _make_plan(self, N: int) -> Plan:
        self.compile(N)
        p = Plan(N, INPUT_SHAPE, self.backend)
        for name, layer in ALEXNET_CONVS.items():
            conv = self.convs[name]
            if isinstance(conv, layers.AutoConv2d):       # the chosen kernel holds its own workspace
                h = p.add(name, (N, layer.M) + layer.out_hw, lambda src, out, conv=conv: conv(src, out))
            else:
                ws = p.add_workspace(name, conv.workspace_shape(N))
                h = p.add(name, (N, layer.M) + layer.out_hw,
                          lambda src, out, conv=conv, ws=ws: conv(src, out, workspace=ws))
            c, hh, ww = h.shape[1:]
            pooled = (N, c, (hh - 3) // 2 + 1, (ww - 3) // 2 + 1)
            if name in LRN_AFTER and self.fuse_lrn_pool:
                h = p.add(f"lrn{name[-1]} + pool{name[-1]}", pooled, self.lrn_pool)
                continue
            if name in LRN_AFTER:
                h = p.add(f"lrn{name[-1]}", h.shape, self.lrn)
            if name in POOL_AFTER:
                h = p.add(f"pool{name[-1]}", pooled, self.pool)
        h = h.reshape(N, -1)          # a view: the (c, h, w) flatten, no copy
        for name, fc in self.dense_layers(N).items():
            ws = p.add_workspace(name, fc.workspace_shape(N))
            h = p.add(name, (N, fc.out_features), lambda src, out, fc=fc, ws=ws: fc(src, out, workspace=ws), source=h)
        p.add("softmax", (N, 1000), self.softmax)
        return p

    def step_costs(self, N: int) -> dict[str, Cost]:
        """Each step of ``plan(N)`` by name -> its FLOPs and least bytes (labkit.measure.roofline);
        float32 storage at either precision (TF32 rounds the operands inside the tensor cores)."""
        out: dict[str, Cost] = {}
        for name, L in ALEXNET_CONVS.items():
            c = out[name] = conv2d_cost(N, L.C, L.H, L.W, L.M, L.K, stride=L.stride, pad=L.pad, groups=L.groups)
            shape = c.out_shape
            if name in LRN_AFTER and self.fuse_lrn_pool:
                out[f"lrn{name[-1]} + pool{name[-1]}"] = lrn_max_pool_cost(*shape, LRN["depth_radius"], 3, 2)
                continue
            if name in LRN_AFTER:
                out[f"lrn{name[-1]}"] = lrn_cost(*shape, LRN["depth_radius"])
            if name in POOL_AFTER:
                out[f"pool{name[-1]}"] = pool2d_cost(*shape, 3, 2)
        for name, fc in self.fcs.items():
            out[name] = dense_cost(N, fc.in_features, fc.out_features)
        out["softmax"] = softmax_cost(N, self.fcs["fc8"].out_features)
        return out

    def _check(self, x) -> int:
        if not (fast_input(x, self._kind) and x.shape[1:] == INPUT_SHAPE):
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != INPUT_SHAPE:
                raise ValueError(f"x must be (N, 3, 227, 227), got {tuple(x.shape)}: use alexnet.preprocess")
        return int(x.shape[0])

    def logits(self, x):
        """fc8's output (N, 1000) of float32 (N, 3, 227, 227) x on the backend (all but the softmax)."""
        return self.plan(self._check(x)).eager(x, stop="softmax")

    def __call__(self, x):
        """Class probabilities (N, 1000) of float32 (N, 3, 227, 227) x on the backend, step by step."""
        return self.plan(self._check(x)).eager(x)
