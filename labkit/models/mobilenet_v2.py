"""MobileNetV2 (torchvision's layout: width 1.0, 1000 classes) on labkit's kernels, with batch
normalization folded into the convolutions, and its float64 reference.

    weights = mobilenet_v2.synthetic_weights()            # torchvision state_dict names, NumPy float32
    net = mobilenet_v2.MobileNetV2(weights)               # folds BN, prepares every layer once
    probs = net(labkit.xp.asarray(x))                     # x (N, 3, 224, 224) -> (N, 1000) softmax
    ref = mobilenet_v2.reference_logits(weights, x)       # float64 NumPy, BN applied as BN

Network (NCHW; an inverted residual block "t, c, s" expands its input t times with a 1x1
convolution, filters each channel with a 3x3 depthwise convolution of stride s, and projects back
to c channels with a linear 1x1 convolution, adding its input when the shapes allow)::

    stem        conv 3x3 stride 2, 3 -> 32, BN, ReLU6                     (N, 32, 112, 112)
    features.1  t=1: depthwise 3x3, BN, ReLU6; project 1x1 -> 16, BN       (N, 16, 112, 112)
    features.2-17  blocks of (t, c, n, s) = (6, 24, 2, 2) (6, 32, 3, 2) (6, 64, 4, 2) (6, 96, 3, 1)
                (6, 160, 3, 2) (6, 320, 1, 1): n blocks each, the first of stride s; a block whose
                stride is 1 and whose input has c channels adds its input (the skip)
    head        conv 1x1, 320 -> 1280, BN, ReLU6                          (N, 1280, 7, 7)
    pool        global average                                            (N, 1280)
    classifier  dense 1280 -> 1000 (the dropout of training is the identity at inference)

Folding (what an inference engine does when it loads the model): a convolution followed by batch
normalization y = gamma * (conv(x) - mean) / sqrt(var + eps) + beta is the convolution with weights
w * s and bias beta - mean * s, s = gamma / sqrt(var + eps), per output channel: no BN kernel runs.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import backends, layers, reference
from ..backends.parallel import run_parallel
from ..checks import check_array, fast_input
from ..layers import DepthwiseConv2d, DepthwiseProject
from ..measure.roofline import Cost, conv2d_cost, dense_cost, global_avg_pool_cost, softmax_cost
from ..ops.depthwise import depthwise_layer
from ..ops.dw_project import ProjectTiles
from ..shapes import ConvLayer, out_size
from .plan import Plan, PlannedModel

__all__ = ["SETTINGS", "BN_EPS", "INPUT_HW", "Block", "blocks", "parameter_shapes", "parameter_count",
           "synthetic_weights", "check_weights", "tensor_names", "fold_batch_norm", "reference_logits", "MobileNetV2",
           "Plan", "STEM", "HEAD_CHANNELS", "DEPTHWISE"]

SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
            (6, 320, 1, 1))   # (expansion t, channels c, blocks n, stride s of the first)
STEM = 32
HEAD_CHANNELS = 1280
BN_EPS = 1e-5                 # torch.nn.BatchNorm2d's default, as torchvision's MobileNetV2 uses
INPUT_HW = (224, 224)
BN_PARTS = ("weight", "bias", "running_mean", "running_var")
DEPTHWISE = ("tiled", "naive", "auto")                 # the depthwise layers' kernels (MobileNetV2's depthwise=)
# depthwise="auto" chooses between depthwise.cu and depthwise_any.cu (labkit.conv2d auto's families)
DEPTHWISE_FAMILIES = ("depthwise3x3", "depthwise")


class Block(NamedTuple):
    """One inverted residual: ``name`` (torchvision's, ``features.<i>``), channels in, expanded and
    out, stride, the input plane, and whether it adds its input."""
    name: str
    cin: int
    hidden: int
    cout: int
    stride: int
    H: int
    W: int

    @property
    def expand(self) -> bool:
        return self.hidden != self.cin

    @property
    def residual(self) -> bool:
        return self.stride == 1 and self.cin == self.cout

    @property
    def out_hw(self) -> tuple[int, int]:
        return out_size(self.H, 3, self.stride, 1), out_size(self.W, 3, self.stride, 1)

    def convs(self) -> dict[str, tuple[str, ConvLayer]]:
        """Its convolutions: short name -> (torchvision prefix, ConvLayer), in order."""
        ho, wo = self.out_hw
        out = {}
        j = 0
        if self.expand:
            out["expand"] = (f"{self.name}.conv.0", ConvLayer(self.cin, self.H, self.W, self.hidden, 1))
            j = 1
        out["dw"] = (f"{self.name}.conv.{j}" if j else f"{self.name}.conv.0",
                     depthwise_layer(self.hidden, self.H, self.W, self.stride))
        proj = f"{self.name}.conv.{j + 1}" if j else f"{self.name}.conv.1"
        out["project"] = (proj, ConvLayer(self.hidden, ho, wo, self.cout, 1))
        return out


def blocks(input_hw: tuple[int, int] = INPUT_HW) -> list[Block]:
    """The 17 inverted residual blocks for an input of ``input_hw`` (the stem halves it)."""
    h, w = out_size(input_hw[0], 3, 2, 1), out_size(input_hw[1], 3, 2, 1)
    cin, out, i = STEM, [], 1
    for t, c, n, s in SETTINGS:
        for k in range(n):
            stride = s if k == 0 else 1
            b = Block(f"features.{i}", cin, cin * t, c, stride, h, w)
            out.append(b)
            h, w = b.out_hw
            cin, i = c, i + 1
    return out


def _conv_names(bs: list[Block]) -> list[tuple[str, tuple]]:
    """(torchvision prefix of each convolution, its weight shape), in order."""
    names = [("features.0", (STEM, 3, 3, 3))]
    for b in bs:
        for prefix, L in b.convs().values():
            names.append((prefix, (L.M, L.C // L.groups, L.K, L.K)))
    names.append((f"features.{len(bs) + 1}", (HEAD_CHANNELS, bs[-1].cout, 1, 1)))
    return names


def tensor_names(conv_prefix: str) -> tuple[str, str]:
    """torchvision's names of a conv's weight and its BN: ``<p>.0.weight`` and ``<p>.1.*`` for a
    Conv-BN-ReLU6 unit, but ``<p>.weight`` and ``<p+1>.*`` for a block's bare projection (the names
    do not depend on the input plane)."""
    if conv_prefix in _PROJECTIONS:
        head, j = conv_prefix.rsplit(".", 1)
        return f"{conv_prefix}.weight", f"{head}.{int(j) + 1}"
    return f"{conv_prefix}.0.weight", f"{conv_prefix}.1"


_PROJECTIONS = frozenset(b.convs()["project"][0] for b in blocks())


def parameter_shapes(num_classes: int = 1000) -> dict[str, tuple[int, ...]]:
    """Every tensor of torchvision's ``mobilenet_v2().state_dict()`` but ``num_batches_tracked``, by name."""
    shapes: dict[str, tuple[int, ...]] = {}
    for prefix, wshape in _conv_names(blocks()):
        wname, bn = tensor_names(prefix)
        shapes[wname] = wshape
        for part in BN_PARTS:
            shapes[f"{bn}.{part}"] = (wshape[0],)
    shapes["classifier.1.weight"] = (num_classes, HEAD_CHANNELS)
    shapes["classifier.1.bias"] = (num_classes,)
    return shapes


def parameter_count(num_classes: int = 1000) -> int:
    """Trainable parameters (BN's running statistics aside): 3,504,872 for 1000 classes."""
    return sum(int(np.prod(s)) for k, s in parameter_shapes(num_classes).items() if "running" not in k)


def synthetic_weights(seed: int = 2018, num_classes: int = 1000) -> dict[str, np.ndarray]:
    """Deterministic weights of the right shapes: convolutions Kaiming-normal (fan out, as torchvision
    initializes them), BN with random scales, shifts and running statistics (so that folding them is
    tested), a small random classifier.  They classify nothing."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in parameter_shapes(num_classes).items():
        if name.endswith("running_var"):
            v = rng.uniform(0.5, 2.0, shape)
        elif name.endswith("running_mean"):
            v = rng.normal(0.0, 0.2, shape)
        elif name.startswith("classifier"):
            v = rng.normal(0.0, 0.01 if name.endswith("weight") else 0.1, shape)
        elif len(shape) == 4:
            groups = shape[0] if shape[1] == 1 else 1          # depthwise: one input channel per filter
            fan_out = shape[0] * shape[2] * shape[3] // groups
            v = rng.normal(0.0, np.sqrt(2.0 / fan_out), shape)
        elif name.endswith(".weight"):
            v = rng.uniform(0.5, 1.5, shape)      # BN's gamma
        else:
            v = rng.normal(0.0, 0.1, shape)       # BN's beta
        out[name] = v.astype(np.float32)
    return out


def check_weights(weights: dict[str, np.ndarray], num_classes: int = 1000) -> None:
    """ValueError naming the first tensor that is missing, of the wrong shape, or not finite float32."""
    for name, shape in parameter_shapes(num_classes).items():
        if name not in weights:
            raise ValueError(f"MobileNetV2 weights: {name!r} is missing (torchvision state_dict names)")
        v = weights[name]
        if not isinstance(v, np.ndarray) or v.dtype != np.float32 or v.shape != shape:
            got = f"{v.dtype} {v.shape}" if isinstance(v, np.ndarray) else type(v).__name__
            raise ValueError(f"MobileNetV2 weights: {name!r} must be float32 {shape}, got {got}")
        if not np.isfinite(v).all():
            raise ValueError(f"MobileNetV2 weights: {name!r} holds NaN or infinity")


def _scale(weights, bn: str) -> tuple[np.ndarray, np.ndarray]:
    """BN as a per-channel affine map in float64: (s, t) with BN(v) = s * v + t."""
    g, beta, mean, var = (weights[f"{bn}.{p}"].astype(np.float64) for p in BN_PARTS)
    s = g / np.sqrt(var + BN_EPS)
    return s, beta - mean * s


def fold_batch_norm(weights: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each convolution with its BN folded in: torchvision conv prefix -> (w, b) float32, plus
    ``"classifier"`` -> (w (1280, classes) as labkit's Dense takes it, b).  Computed in float64."""
    check_weights(weights, len(weights["classifier.1.bias"]))
    out = {}
    for prefix, _shape in _conv_names(blocks()):
        wname, bn = tensor_names(prefix)
        s, t = _scale(weights, bn)
        w = weights[wname].astype(np.float64) * s[:, None, None, None]
        out[prefix] = (w.astype(np.float32), t.astype(np.float32))
    out["classifier"] = (np.ascontiguousarray(weights["classifier.1.weight"].T), weights["classifier.1.bias"])
    return out


def reference_logits(weights: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """The network in float64 NumPy with BN applied as BN (not folded): the oracle."""
    bs = blocks(tuple(x.shape[2:]))

    def conv_bn(h, prefix, stride=1, pad=0, groups=1, act=True):
        wname, bn = tensor_names(prefix)
        h = reference.conv2d(h, weights[wname], None, stride=stride, pad=pad, groups=groups)
        s, t = _scale(weights, bn)
        h = h * s[None, :, None, None] + t[None, :, None, None]
        return reference.relu6(h) if act else h

    h = conv_bn(np.asarray(x, dtype=np.float64), "features.0", stride=2, pad=1)
    for b in bs:
        skip = h
        for kind, (prefix, L) in b.convs().items():
            h = conv_bn(h, prefix, stride=L.stride, pad=L.pad, groups=L.groups, act=kind != "project")
        if b.residual:
            h = h + skip
    h = conv_bn(h, f"features.{len(bs) + 1}")
    h = reference.global_avg_pool(h)
    return reference.dense(h, weights["classifier.1.weight"].T, weights["classifier.1.bias"])


class MobileNetV2(PlannedModel):
    """The network on the backend in use: the stem, expansions, projections and head as implicit
    GEMMs (1x1: plain GEMMs) with bias and ReLU6 (or nothing) fused and each skip added in the
    projection's epilogue; depthwise 3x3 kernels with bias and ReLU6 fused; a global-average-pool
    kernel, a dense layer and softmax.  BN is folded into the weights when the network is made.

        probs = net(x)                                   # eager, x read in place
        plan = net.plan(N); plan.x[...] = x; plan.run()  # one CUDA graph; probs in plan.out

    ``input_hw``: the input plane (224 x 224 as trained; smaller ones for the CPU executor).
    ``depthwise``: "tiled" or "naive" (depthwise.cu's rungs), or "auto": per layer and batch size the
    autotuner's choice between depthwise.cu's tiled kernel and depthwise_any.cu's (labkit.conv2d's auto,
    its two depthwise families; untuned, depthwise_any's default tile).  On an H200 at batch 256
    depthwise_any wins on the 112-28 pixel planes and depthwise.cu on the 14 and 7 pixel ones.
    ``fuse_below``: blocks whose depthwise output plane is at most this many pixels on a side run
    depthwise and projection as one kernel (dw_project.cu, ``fuse_tiles``); 0: none (the default: on an
    H100 the fused kernel is 1.8-6.8x slower than the two it replaces,
    benchmarks/results/mobilenet_fused_h100.json).  ``precision``: "fp32" or "tf32" (the GEMMs on the
    tensor cores; GPU only).  The arrays returned are the plan's buffers, overwritten by
    the next call of the same batch size.
    """

    def __init__(self, weights: dict[str, np.ndarray], *, input_hw: tuple[int, int] = INPUT_HW,
                 depthwise: str = "tiled", precision: str = "fp32", fuse_below: int = 0,
                 fuse_tiles: ProjectTiles | None = None):
        self.backend = backends.current()
        xp = backends.xp()
        self.host_weights, self.input_hw = weights, tuple(int(v) for v in input_hw)
        if depthwise not in DEPTHWISE:
            raise ValueError(f"depthwise must be one of {DEPTHWISE}, got {depthwise!r}")
        self.depthwise, self.precision = depthwise, precision
        self.fuse_below, self.fuse_tiles = int(fuse_below), fuse_tiles
        folded = fold_batch_norm(weights)
        self.num_classes = int(folded["classifier"][1].shape[0])
        self.blocks = blocks(self.input_hw)
        dev = {k: (xp.asarray(w), xp.asarray(b)) for k, (w, b) in folded.items()}
        H, W = self.input_hw
        self.stem = layers.ImplicitConv2d(*dev["features.0"], ConvLayer(3, H, W, STEM, 3, 2, 1),
                                          activation="relu6", precision=precision)
        self.convs: dict[str, object] = {}
        # A block of a small enough plane runs depthwise and projection as one layer (self.fused);
        # the others as two (self.convs, like every expansion).
        self.fused: dict[str, DepthwiseProject] = {}
        for b in self.blocks:
            convs = b.convs()
            if max(b.out_hw) <= self.fuse_below:
                (dw_name, L), (proj_name, _) = convs.pop("dw"), convs.pop("project")
                self.fused[b.name] = DepthwiseProject(*dev[dw_name], *dev[proj_name], L, residual=b.residual,
                                                      tiles=fuse_tiles)
            for kind, (prefix, L) in convs.items():
                w, bias = dev[prefix]
                if kind == "dw" and depthwise == "auto":
                    self.convs[f"{b.name}.dw"] = layers.AutoConv2d(w, bias, L, activation="relu6",
                                                                   families=DEPTHWISE_FAMILIES)
                elif kind == "dw":
                    self.convs[f"{b.name}.dw"] = DepthwiseConv2d(w, bias, L, activation="relu6", variant=depthwise)
                else:
                    self.convs[f"{b.name}.{kind}"] = layers.ImplicitConv2d(
                        w, bias, L, activation="relu6" if kind == "expand" else None, precision=precision,
                        residual=kind == "project" and b.residual)
        last = self.blocks[-1]
        ho, wo = last.out_hw
        head_name = f"features.{len(self.blocks) + 1}"
        self.head = layers.ImplicitConv2d(*dev[head_name], ConvLayer(last.cout, ho, wo, HEAD_CHANNELS, 1),
                                          activation="relu6", precision=precision)
        self.pool, self.classifier = layers.GlobalAvgPool(), layers.Dense(*dev["classifier"])
        self.softmax = layers.Softmax()
        self._kind = xp.ndarray
        self._x_shape = (3,) + self.input_hw
        self._plans: dict[int, Plan] = {}

    def replica(self) -> "MobileNetV2":
        return MobileNetV2(self.host_weights, input_hw=self.input_hw, depthwise=self.depthwise,
                           precision=self.precision, fuse_below=self.fuse_below, fuse_tiles=self.fuse_tiles)

    def compile(self, N: int) -> None:
        """Every convolution's kernels for a batch of N compiled (or loaded from the cache) and its
        launches prepared, side by side in threads (run_parallel): ~40 kernels, a few seconds each
        with g++ or NVRTC the first time.  ``plan(N)`` does this first."""
        parts = [self.stem, self.head, *self.convs.values(), *self.fused.values()]
        run_parallel([lambda c=c: c.plan(N) for c in parts])

    def _make_plan(self, N: int) -> Plan:
        self.compile(N)
        p = Plan(N, self._x_shape, self.backend)

        def conv_step(name, conv, **extra):
            ws = p.add_workspace(name, conv.workspace_shape(N))
            L = conv.layer
            return p.add(name, (N, L.M) + L.out_hw,
                         lambda src, out, conv=conv, ws=ws: conv(src, out, workspace=ws, **extra))

        h = conv_step("stem", self.stem)
        for b in self.blocks:
            skip = h
            for kind in b.convs():
                name = f"{b.name}.{kind}"
                if b.name in self.fused and kind != "expand":
                    if kind == "dw":   # depthwise and projection in one step, one kernel
                        f = self.fused[b.name]
                        extra = {"residual": skip} if f.residual else {}
                        h = p.add(f"{b.name}.dw_project", (N, f.M) + f.layer.out_hw,
                                  lambda src, out, f=f, extra=extra: f(src, out, **extra))
                    continue
                conv = self.convs[name]
                if kind == "dw":
                    L = conv.layer
                    h = p.add(name, (N, L.C) + L.out_hw, conv)
                else:
                    h = conv_step(name, conv, **({"residual": skip} if conv.residual else {}))
        conv_step("head", self.head)
        h = p.add("pool", (N, HEAD_CHANNELS), self.pool)
        ws = p.add_workspace("classifier", self.classifier.workspace_shape(N))
        p.add("classifier", (N, self.num_classes),
              lambda src, out, fc=self.classifier, ws=ws: fc(src, out, workspace=ws))
        p.add("softmax", (N, self.num_classes), self.softmax)
        return p

    def step_costs(self, N: int) -> dict[str, Cost]:
        """Each step of ``plan(N)`` by name -> its FLOPs and least bytes (labkit.measure.roofline).  A
        projection that adds its block's input reads it once more; a fused depthwise + projection
        moves the block's expanded activations in only (its depthwise output stays on the chip)."""
        def conv(L: ConvLayer, residual: bool = False) -> Cost:
            return conv2d_cost(N, L.C, L.H, L.W, L.M, L.K, stride=L.stride, pad=L.pad, groups=L.groups,
                               residual=residual)

        out = {"stem": conv(self.stem.layer)}
        for b in self.blocks:
            layers_ = {kind: L for kind, (_prefix, L) in b.convs().items()}
            if "expand" in layers_:
                out[f"{b.name}.expand"] = conv(layers_["expand"])
            dw, proj = conv(layers_["dw"]), conv(layers_["project"], residual=b.residual)
            if b.name in self.fused:
                between = 4 * N * b.hidden * b.out_hw[0] * b.out_hw[1]    # dw's output, written and read
                out[f"{b.name}.dw_project"] = Cost(dw.flops + proj.flops, dw.bytes + proj.bytes - 2 * between,
                                                   proj.out_shape)
            else:
                out[f"{b.name}.dw"], out[f"{b.name}.project"] = dw, proj
        out["head"] = conv(self.head.layer)
        out["pool"] = global_avg_pool_cost(*out["head"].out_shape)
        out["classifier"] = dense_cost(N, HEAD_CHANNELS, self.num_classes)
        out["softmax"] = softmax_cost(N, self.num_classes)
        return out

    def _check(self, x) -> int:
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, 3, {self.input_hw[0]}, {self.input_hw[1]}) for this network "
                                 f"(input_hw={self.input_hw}), got {tuple(x.shape)}")
        return int(x.shape[0])

    def logits(self, x):
        """The classifier's output (N, classes) of float32 (N, 3, H, W) x on the backend."""
        return self.plan(self._check(x)).eager(x, stop="softmax")

    def __call__(self, x):
        """Class probabilities (N, classes) of float32 (N, 3, H, W) x on the backend, step by step."""
        return self.plan(self._check(x)).eager(x)
