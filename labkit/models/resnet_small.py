"""The seed's small ResNet for Fashion-MNIST, trained with labkit's kernels only (no framework).

    net = ResNetSmall(channels=16, seed=0)          # Kaiming init; parameters in one flat buffer
    loss = net.train_step(x, labels, lr=0.05)       # forward, backward, SGD with momentum
    logits = net.logits(x)

The network: 28x28x1 -> conv 3x3 (c channels, pad 1) + ReLU -> 2 residual blocks [conv 3x3 + ReLU,
conv 3x3, + the block's input, ReLU] -> global average pool -> dense c -> 10.

Parameters (weights, biases) live in one flat float32 buffer, their gradients in a second of the same
layout, SGD's velocity in a third: the optimizer is one launch over all of them.  A convolution's
weights are kept as (C*K*K, M), the layout the implicit GEMM's forward kernel reads in place
(``ImplicitConv2d(weights_layout="CKKM")``) and the backward kernels write their gradient in, so
nothing is transposed during training.  The dense layer's weights are (c, 10).

Initialization (what PyTorch's ``kaiming_normal_`` does, fan-in, ReLU gain): each convolution's
weights are normal with std sqrt(2 / (C K K)); the dense layer's normal with std sqrt(1 / c); biases
zero.  Drawn in float64 from ``numpy.random.default_rng(seed)`` in a fixed order, so another framework
can start from the same numbers (``state()`` gives them in the usual layouts).

``reference_loss_and_grads`` is the same network in float64 NumPy: every gradient of the labkit
step is checked against it, and it is checked against central differences.
"""
from __future__ import annotations

import numpy as np

from .. import backends, reference
from ..backends.parallel import run_parallel
from ..checks import array_module, check_array, check_int, is_cupy, to_numpy
from ..loader import load
from ..measure.roofline import (Cost, conv2d_backward_data_cost, conv2d_backward_weight_cost, conv2d_cost,
                                dense_backward_cost, dense_cost, global_avg_pool_cost,
                                sgd_momentum_cost, softmax_cross_entropy_cost)
from ..ops import conv_backward as cb
from ..ops import training as tr
from ..layers import (Auto3x3, AutoWeightGrad3x3, ImplicitConv2d, SmallConv3x3, SmallWeightGrad, WinogradConv3x3,
                      WinogradWeightGrad)
from ..ops.pool_softmax import global_avg_pool
from ..reference import backward as rb
from ..shapes import ConvLayer

__all__ = ["ResNetSmall", "Parameters", "BACKWARDS", "parameter_shapes", "init_parameters", "reference_loss_and_grads",
           "reference_pre_activations", "CONVS", "CLASSES", "checked_state"]

CLASSES = 10
BACKWARDS = ("small", "gemm", "direct")
CONVS = ("stem", "block1.conv1", "block1.conv2", "block2.conv1", "block2.conv2")


def parameter_shapes(channels: int, in_channels: int = 1) -> dict[str, tuple]:
    """Name -> shape of every parameter, in the buffer's order (convolution weights (C*K*K, M))."""
    shapes = {}
    for name in CONVS:
        cin = in_channels if name == "stem" else channels
        shapes[f"{name}.w"] = (cin * 9, channels)
        shapes[f"{name}.b"] = (channels,)
    shapes["fc.w"] = (channels, CLASSES)
    shapes["fc.b"] = (CLASSES,)
    return shapes


def init_parameters(channels: int, seed: int = 0, in_channels: int = 1) -> dict[str, np.ndarray]:
    """Kaiming-normal float64 parameters in the usual layouts: conv weights (M, C, 3, 3), dense (c, 10)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in CONVS:
        cin = in_channels if name == "stem" else channels
        out[f"{name}.w"] = rng.standard_normal((channels, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))
        out[f"{name}.b"] = np.zeros(channels)
    out["fc.w"] = rng.standard_normal((channels, CLASSES)) * np.sqrt(1.0 / channels)
    out["fc.b"] = np.zeros(CLASSES)
    return out


def to_ckkm(w: np.ndarray) -> np.ndarray:
    """(M, C, K, K) -> (C*K*K, M)."""
    return np.ascontiguousarray(w.reshape(w.shape[0], -1).T)


def to_mckk(wt: np.ndarray, k: int = 3) -> np.ndarray:
    """(C*K*K, M) -> (M, C, K, K)."""
    return np.ascontiguousarray(wt.T.reshape(wt.shape[1], -1, k, k))


def _checked_plane(hw) -> tuple[int, int]:
    """``hw`` as (H, W), two ints >= 1; else ValueError."""
    if not isinstance(hw, (tuple, list)) or len(hw) != 2:
        raise ValueError(f"input_hw must be (H, W), two ints >= 1, got {hw!r}")
    return check_int(hw[0], "input_hw's H"), check_int(hw[1], "input_hw's W")


def _usual_shape(name: str, shape: tuple) -> tuple:
    """The shape of parameter ``name`` in the usual layouts (``state()``'s) from its shape in the
    buffer: a convolution's (C*3*3, M) is (M, C, 3, 3)."""
    return (shape[1], shape[0] // 9, 3, 3) if _is_conv_weight(name) else tuple(shape)


def checked_state(state, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Every parameter of ``state`` (the usual layouts) as float32 in the buffer's layout, or an error
    naming the first tensor that is missing, unknown, not a float array of its shape, or not finite
    (in float32: a float64 beyond float32's range would load as infinity).  It writes nothing, so that
    ``load_state`` refuses a bad state before changing a single weight."""
    if not isinstance(state, dict):
        raise TypeError(f"the state must be a dict of arrays (name -> array), got {type(state).__name__}")
    missing = [repr(n) for n in shapes if n not in state]
    extra = sorted(repr(n) for n in state if n not in shapes)
    if missing or extra:
        raise ValueError(f"the state must name exactly this network's {len(shapes)} parameters (those of "
                         f"state()): missing {', '.join(missing) or 'none'}; unknown {', '.join(extra) or 'none'}")
    out = {}
    for name, shape in shapes.items():
        v = state[name]
        v = to_numpy(v) if is_cupy(v) else np.asarray(v)
        if not np.issubdtype(v.dtype, np.floating):
            raise TypeError(f"{name} must be a float array (float16, float32 or float64), got {v.dtype}")
        want = _usual_shape(name, shape)
        if v.shape != want:
            axes = " (M, C, 3, 3)" if _is_conv_weight(name) else ""
            raise ValueError(f"{name} must be {want}{axes}, got shape {v.shape}")
        with np.errstate(over="ignore"):          # an overflow is refused just below, by name
            v32 = v.astype(np.float32)
        if not np.isfinite(v32).all():
            beyond = " (beyond float32's range)" if np.isfinite(v).all() else ""
            raise ValueError(f"{name} holds {int((~np.isfinite(v32)).sum())} NaN or infinite value(s){beyond}")
        out[name] = to_ckkm(v32) if _is_conv_weight(name) else v32
    return out


def _is_conv_weight(name: str) -> bool:
    return name.endswith(".w") and name != "fc.w"


def _usual_layouts(buffer: "Parameters") -> dict[str, np.ndarray]:
    """A buffer's arrays as NumPy copies, conv weights back to (M, C, K, K)."""
    flat = to_numpy(buffer.flat)               # one copy from the device for all of them
    out, at = {}, 0
    for name, shape in buffer.shapes.items():
        n = int(np.prod(shape))
        v = flat[at:at + n].reshape(shape)
        out[name] = to_mckk(v) if _is_conv_weight(name) else v.copy()
        at += n
    return out


class Parameters:
    """Named views into one flat float32 buffer on the backend (``flat``), in ``shapes``' order."""

    def __init__(self, shapes: dict[str, tuple], xp):
        self.shapes = dict(shapes)
        self.size = sum(int(np.prod(s)) for s in shapes.values())
        self.flat = xp.zeros(self.size, dtype=xp.float32)
        self.views, at = {}, 0
        for name, shape in self.shapes.items():
            n = int(np.prod(shape))
            self.views[name] = self.flat[at:at + n].reshape(shape)
            at += n

    def __getitem__(self, name: str):
        return self.views[name]


def _conv_layer(name: str, channels: int, in_channels: int, hw: tuple) -> ConvLayer:
    cin = in_channels if name == "stem" else channels
    return ConvLayer(cin, hw[0], hw[1], channels, 3, 1, 1)


class ResNetSmall:
    """The network, its parameters, gradients and velocity on the backend, and one training step.

    Args:
        channels: c, the width of every convolution (the seed: 16 and 64).
        seed: the initialization's seed (``init_parameters``).
        input_hw: the input plane (28x28 for Fashion-MNIST; tests use smaller ones).
        backward: the kernels' rung: "small" (default: conv_small.cu's direct kernels for few channels,
            forward and backward, the ReLUs' backward and the skips' gradients fused into the backward
            data's store), "gemm" (the implicit GEMM forward; backward weight as a tiled GEMM split over
            the pixels, backward data as the implicit GEMM's forward kernel on flipped weights) or
            "direct" (the implicit GEMM forward; a thread per dx element, a block per dw element).
        winograd: on the "small" rung, which convolutions run Winograd's F(2x2, 3x3) (conv_winograd.cu;
            for dL/dw F(3x3, 2x2), conv_winograd_wgrad.cu) instead of the direct kernels: None
            (default) as this GPU's tuned table says (labkit/tuned/conv_small.json), or on a GPU the
            table does not know as the autotuner finds per pass and batch size (labkit.ops.conv3x3_auto;
            the direct kernels untuned, as on the CPU executor), True everywhere, False nowhere.
    """

    def __init__(self, channels: int = 16, *, seed: int = 0, input_hw: tuple = (28, 28), in_channels: int = 1,
                 backward: str = "small", winograd: bool | None = None):
        if backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {BACKWARDS}, got {backward!r}")
        # Sizes checked here, not where they are used: a width of 0 would divide by zero in the
        # initialization, and a plane of 0 pixels would fail only at the first step, in a kernel.
        channels, in_channels = check_int(channels, "channels"), check_int(in_channels, "in_channels")
        check_int(seed, "seed", low=0)
        self.backend = backends.current()
        self.xp = xp = array_module(self.backend)
        self.channels, self.input_hw, self.in_channels = channels, _checked_plane(input_hw), in_channels
        shapes = parameter_shapes(self.channels, self.in_channels)
        self.params, self.grads, self.velocity = (Parameters(shapes, xp) for _ in range(3))
        self.load_state(init_parameters(self.channels, seed, self.in_channels))
        self.layers = {n: _conv_layer(n, self.channels, self.in_channels, self.input_hw) for n in CONVS}
        self.backward = backward
        w, b, layers = self.params, self.params, self.layers
        if backward == "small":
            def conv3x3(kind: str, L: ConvLayer):
                if winograd is None:   # the tuned table's choice, or on a GPU it does not know the autotuner's
                    return AutoWeightGrad3x3 if kind == "weight" else Auto3x3
                if kind == "weight":
                    return WinogradWeightGrad if winograd else SmallWeightGrad
                return WinogradConv3x3 if winograd else SmallConv3x3
            self.convs = {n: conv3x3("forward", layers[n])(w[f"{n}.w"], b[f"{n}.b"], layers[n], activation="relu",
                                                           residual=n.endswith("conv2")) for n in CONVS}
            # dL/d(input) of each block convolution, gated by its input's ReLU (the input is a ReLU's
            # output); conv1's adds the skip's gradient, the block's dL/d(output) before its ReLU.
            self.bwd_data = {n: conv3x3("data", layers[n])(w[f"{n}.w"], None, layers[n], transpose=True, gate=True,
                                                           residual=n.endswith("conv1")) for n in CONVS[1:]}
            self.wgrad = {n: conv3x3("weight", layers[n])(layers[n]) for n in CONVS}
        else:
            self.convs = {n: ImplicitConv2d(w[f"{n}.w"], b[f"{n}.b"], layers[n], activation="relu",
                                            weights_layout="CKKM", residual=n.endswith("conv2")) for n in CONVS}
            self.bwd_data = {n: cb.BackwardData(w[f"{n}.w"], layers[n]) for n in CONVS[1:]} \
                if backward == "gemm" else {}
            self.wgrad = {}
        self.sgd = tr.SGD(self.params.flat, self.grads.flat, self.velocity.flat)
        self._buffers: dict[int, dict] = {}

    # --- parameters ------------------------------------------------------------------------------
    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Set every parameter from float arrays in the usual layouts (conv weights (M, C, 3, 3)); SGD's
        velocity back to zero.  Every array is checked before the first is written
        (``checked_state``): a refused state changes nothing."""
        for name, v in checked_state(state, self.params.shapes).items():
            self.params[name][...] = self.xp.asarray(v)
        self.velocity.flat[...] = 0

    def state(self) -> dict[str, np.ndarray]:
        """Every parameter as float32 NumPy in the usual layouts (conv weights (M, C, 3, 3))."""
        return _usual_layouts(self.params)

    def gradients(self) -> dict[str, np.ndarray]:
        """The last step's gradients, as ``state()`` lays them out."""
        return _usual_layouts(self.grads)

    # --- one step --------------------------------------------------------------------------------
    def compile(self, N: int) -> None:
        """Every kernel of a step at batch N compiled (or loaded from the cache) and its launches
        prepared, side by side in threads (run_parallel): the convolutions' modules (a dozen, a few
        seconds each with g++ or NVRTC the first time) and the modules of the small kernels
        (train.cu, pooling, and conv_backward.cu on the "gemm" and "direct" rungs), which are
        the same for every layer.  The first step at a batch size does this first."""
        convs = [*self.convs.values(), *self.wgrad.values(), *self.bwd_data.values()]
        families = ["train", "pool_softmax"] + (["conv_backward"] if self.backward != "small" else [])
        run_parallel([lambda c=c: c.plan(N) for c in convs] + [lambda f=f: load(f) for f in families])

    def _bufs(self, N: int) -> dict:
        b = self._buffers.get(N)
        if b is None:
            self.compile(N)
            xp, c, (H, W) = self.xp, self.channels, self.input_hw
            act = lambda: xp.empty((N, c, H, W), dtype=xp.float32)   # noqa: E731
            b = self._buffers[N] = {
                "a0": act(), "h1": act(), "a1": act(), "h2": act(), "a2": act(),
                "g": xp.empty((N, c), dtype=xp.float32), "logits": xp.empty((N, CLASSES), dtype=xp.float32),
                "loss": xp.empty(1, dtype=xp.float32), "dz": xp.empty((N, CLASSES), dtype=xp.float32),
                "rows": xp.empty(N, dtype=xp.float32), "dg": xp.empty((N, c), dtype=xp.float32),
                "d2": act(), "d3": act(), "d4": act()}
            if self.backward != "small":   # the small rung needs no plane-sized dL/da2 (gap_relu_backward)
                b["d1"] = act()
        return b

    def _check_input(self, x) -> int:
        check_array(x, "x", "NCHW", 4, self.backend)
        want = (self.in_channels,) + self.input_hw
        if tuple(x.shape[1:]) != want:
            raise ValueError(f"x must be (N, {want[0]}, {want[1]}, {want[2]}), got {tuple(x.shape)}")
        return int(x.shape[0])

    def forward(self, x) -> dict:
        """The forward pass into this batch size's buffers; returns them (logits in b["logits"])."""
        N = self._check_input(x)
        b, cv = self._bufs(N), self.convs
        cv["stem"](x, b["a0"])
        cv["block1.conv1"](b["a0"], b["h1"])
        cv["block1.conv2"](b["h1"], b["a1"], residual=b["a0"])      # relu(conv + b + skip), fused
        cv["block2.conv1"](b["a1"], b["h2"])
        cv["block2.conv2"](b["h2"], b["a2"], residual=b["a1"])
        global_avg_pool(b["a2"], out=b["g"])
        tr.dense_forward(b["g"], self.params["fc.w"], self.params["fc.b"], out=b["logits"])
        return b

    def logits(self, x):
        return self.forward(x)["logits"]

    def loss_and_gradients(self, x, labels):
        """Forward and backward: the batch's mean loss (an array of shape (1,)); the gradients land in
        ``self.grads``."""
        b = self.forward(x)
        N = int(x.shape[0])
        g, p = self.grads, self.params
        c, (H, W) = self.channels, self.input_hw
        tr.softmax_cross_entropy(b["logits"], labels, out=(b["loss"], b["dz"], b["rows"]))
        tr.dense_backward(b["g"], p["fc.w"], b["dz"], out=(b["dg"], g["fc.w"], g["fc.b"]))
        if self.backward == "small":
            self._small_backward(x, b)
            return b["loss"]
        da = tr.gap_backward(b["dg"], (N, c, H, W), out=b["d1"])          # d1 = dL/da2
        for blk, a_in, h, a_out in (("block2", "a1", "h2", "a2"), ("block1", "a0", "h1", "a1")):
            ds = tr.relu_backward(b[a_out], da, out=b["d2"])            # through the block's last ReLU
            self._conv_backward(f"{blk}.conv2", b[h], ds, dx=b["d3"])    # d3 = dL/dh
            dh = tr.relu_backward(b[h], b["d3"], out=b["d4"])
            self._conv_backward(f"{blk}.conv1", b[a_in], dh, dx=b["d3"])  # d3 = the conv path's dL/da_in
            da = tr.add(ds, b["d3"], out=b["d1"])                        # + the skip's
        ds = tr.relu_backward(b["a0"], da, out=b["d2"])
        self._conv_backward("stem", x, ds, dx=None)
        return b["loss"]

    def _small_backward(self, x, b) -> None:
        """The backward from dL/dg (the pooled means, in dg) on conv_small's kernels: the pooling's and
        the last ReLU's backward in one pass; each block's two backward-data launches also apply the
        ReLUs' backward and add the skip's gradient."""
        ds = tr.gap_relu_backward(b["a2"], b["dg"], out=b["d2"])      # dL/d(block2's sum before its ReLU)
        spare = b["d3"]
        for blk, a_in, h in (("block2", "a1", "h2"), ("block1", "a0", "h1")):
            self._weight_grads(f"{blk}.conv2", b[h], ds)
            dh = self.bwd_data[f"{blk}.conv2"](ds, b["d4"], gate=b[h])                 # dL/d(conv1's sum)
            self._weight_grads(f"{blk}.conv1", b[a_in], dh)
            # dL/d(the previous sum before its ReLU) = (skip's + path's gradient) where a_in > 0
            ds, spare = self.bwd_data[f"{blk}.conv1"](dh, spare, residual=ds, gate=b[a_in]), ds
        self._weight_grads("stem", x, ds)

    def _weight_grads(self, name: str, x, dy) -> None:
        self.wgrad[name](x, dy, self.grads[f"{name}.w"], bias=self.grads[f"{name}.b"])

    def _conv_backward(self, name: str, x, dy, dx) -> None:
        L, g = self.layers[name], self.grads
        variant = "tiled" if self.backward == "gemm" else "direct"
        cb.conv2d_backward_weight(x, dy, L, layout="CKKM", variant=variant, out=g[f"{name}.w"])
        cb.conv2d_backward_bias(dy, out=g[f"{name}.b"])
        if dx is not None and self.backward == "gemm":
            self.bwd_data[name](dy, out=dx)
        elif dx is not None:
            cb.conv2d_backward_data(dy, self.params[f"{name}.w"], L, layout="CKKM", out=dx)

    # --- one step, kernel by kernel -----------------------------------------------------------------
    def step_list(self, x, labels, *, lr: float, momentum: float = 0.9, weight_decay: float = 0.0) -> list:
        """``train_step`` on the "small" rung as [(name, zero-argument callable)], one kernel launch each,
        in the order the step runs them (what a per-kernel breakdown times); running them all is one
        training step.  The hyperparameters are set here, once (a copy, when they change)."""
        if self.backward != "small":
            raise ValueError(f"step_list follows the 'small' rung's kernels; this network's is {self.backward!r}")
        N = self._check_input(x)
        b, cv, g, p = self._bufs(N), self.convs, self.grads, self.params
        self.sgd.set(lr=lr, momentum=momentum, weight_decay=weight_decay)
        wg = lambda n, a, dy: lambda: self._weight_grads(n, a, dy)   # noqa: E731
        steps = [("stem forward", lambda: cv["stem"](x, b["a0"])),
                 ("block1.conv1 forward", lambda: cv["block1.conv1"](b["a0"], b["h1"])),
                 ("block1.conv2 forward", lambda: cv["block1.conv2"](b["h1"], b["a1"], residual=b["a0"])),
                 ("block2.conv1 forward", lambda: cv["block2.conv1"](b["a1"], b["h2"])),
                 ("block2.conv2 forward", lambda: cv["block2.conv2"](b["h2"], b["a2"], residual=b["a1"])),
                 ("global avg pool", lambda: global_avg_pool(b["a2"], out=b["g"])),
                 ("dense forward", lambda: tr.dense_forward(b["g"], p["fc.w"], p["fc.b"], out=b["logits"])),
                 ("softmax cross-entropy",
                  lambda: tr.softmax_cross_entropy(b["logits"], labels, out=(b["loss"], b["dz"], b["rows"]))),
                 ("dense backward", lambda: tr.dense_backward(b["g"], p["fc.w"], b["dz"],
                                                              out=(b["dg"], g["fc.w"], g["fc.b"]))),
                 ("global avg pool + relu backward", lambda: tr.gap_relu_backward(b["a2"], b["dg"], out=b["d2"]))]
        # _small_backward's buffers, unrolled: block2 reads dL/ds in d2 and leaves it in d3, block1 back in d2.
        for blk, a_in, h, ds, spare in (("block2", "a1", "h2", "d2", "d3"), ("block1", "a0", "h1", "d3", "d2")):
            conv1, conv2 = f"{blk}.conv1", f"{blk}.conv2"
            steps += [(f"{conv2} backward weight", wg(conv2, b[h], b[ds])),
                      (f"{conv2} backward data",
                       lambda conv2=conv2, h=h, ds=ds: self.bwd_data[conv2](b[ds], b["d4"], gate=b[h])),
                      (f"{conv1} backward weight", wg(conv1, b[a_in], b["d4"])),
                      (f"{conv1} backward data",
                       lambda conv1=conv1, a_in=a_in, ds=ds, spare=spare:
                       self.bwd_data[conv1](b["d4"], b[spare], residual=b[ds], gate=b[a_in]))]
        steps += [("stem backward weight", wg("stem", x, b["d2"])), ("SGD update", self.sgd.step)]
        return steps

    def step_costs(self, N: int) -> dict[str, Cost]:
        """Each step of ``step_list`` by name -> its FLOPs and least bytes (labkit.measure.roofline).
        A convolution's FLOPs are the direct convolution's, whichever kernel runs it (Winograd's
        transforms do fewer multiplications)."""
        c, (H, W), cin = self.channels, self.input_hw, self.in_channels
        act = (N, c, H, W)
        out = {}
        for name in CONVS:
            out[f"{name} forward"] = conv2d_cost(N, cin if name == "stem" else c, H, W, c, 3, pad=1,
                                                 residual=name.endswith("conv2"))
        out["global avg pool"] = global_avg_pool_cost(*act)
        out["dense forward"] = dense_cost(N, c, CLASSES)
        out["softmax cross-entropy"] = softmax_cross_entropy_cost(N, CLASSES)
        out["dense backward"] = dense_backward_cost(N, c, CLASSES)
        # reads y and the (N, c) gradient of the means, writes dL/dx: one operation per element
        out["global avg pool + relu backward"] = Cost(float(N * c * H * W), float(4 * (N * c + 2 * N * c * H * W)), act)
        for blk in ("block2", "block1"):
            for conv, extra in (("conv2", 1), ("conv1", 2)):   # the ReLU's gate; conv1 also the skip's gradient
                out[f"{blk}.{conv} backward weight"] = conv2d_backward_weight_cost(N, c, H, W, c, 3, pad=1)
                out[f"{blk}.{conv} backward data"] = conv2d_backward_data_cost(N, c, H, W, c, 3, pad=1,
                                                                               extra_reads=extra)
        out["stem backward weight"] = conv2d_backward_weight_cost(N, cin, H, W, c, 3, pad=1)
        out["SGD update"] = sgd_momentum_cost(self.params.size)
        return out

    def train_step(self, x, labels, *, lr: float, momentum: float = 0.9, weight_decay: float = 0.0):
        """One SGD step on a batch (x float32 (N, 1, H, W), labels int32 (N,)); the loss before it."""
        self.sgd.set(lr=lr, momentum=momentum, weight_decay=weight_decay)   # a copy only when they change
        loss = self.loss_and_gradients(x, labels)
        self.sgd.step()
        return loss


def reference_pre_activations(state: dict[str, np.ndarray], x) -> dict[str, np.ndarray]:
    """The float64 network's five sums before their ReLUs, named by the convolution that ends each
    (a block's conv2 with its skip added). A check that compares float32 gradients with float64 ones
    keeps its random draws away from the ReLUs' kinks with them: a sum nearer 0 than float32's
    rounding may fall on the other side and route its gradient elsewhere."""
    s = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    conv = lambda name, a: reference.conv2d(a, s[f"{name}.w"], s[f"{name}.b"], pad=1)  # noqa: E731
    z = {"stem": conv("stem", np.asarray(x, dtype=np.float64))}
    a = reference.relu(z["stem"])
    for blk in ("block1", "block2"):
        z[f"{blk}.conv1"] = conv(f"{blk}.conv1", a)
        z[f"{blk}.conv2"] = conv(f"{blk}.conv2", reference.relu(z[f"{blk}.conv1"])) + a
        a = reference.relu(z[f"{blk}.conv2"])
    return z


def reference_loss_and_grads(state: dict[str, np.ndarray], x, labels) -> tuple[float, dict[str, np.ndarray]]:
    """The same network in float64 NumPy: (mean loss, gradient of every parameter), in ``state``'s
    layouts (conv weights (M, C, 3, 3), dense (c, 10))."""
    s = {k: np.asarray(v, dtype=np.float64) for k, v in state.items()}
    x = np.asarray(x, dtype=np.float64)
    a0, h1, a1, h2, a2 = (reference.relu(z) for z in reference_pre_activations(s, x).values())
    g = reference.global_avg_pool(a2)
    z = g @ s["fc.w"] + s["fc.b"]
    loss, dz = rb.softmax_cross_entropy(z, labels)
    grads = {}
    dg, grads["fc.w"], grads["fc.b"] = rb.dense_backward(g, s["fc.w"], dz)
    da = rb.global_avg_pool_backward(dg, a2.shape)
    for blk, a_in, h, a_out in (("block2", a1, h2, a2), ("block1", a0, h1, a1)):
        ds = rb.relu_backward(a_out, da)
        dh, grads[f"{blk}.conv2.w"], grads[f"{blk}.conv2.b"] = rb.conv2d_backward(h, s[f"{blk}.conv2.w"], ds, pad=1)
        dh = rb.relu_backward(h, dh)
        dpath, grads[f"{blk}.conv1.w"], grads[f"{blk}.conv1.b"] = rb.conv2d_backward(a_in, s[f"{blk}.conv1.w"], dh,
                                                                                     pad=1)
        da = ds + dpath
    ds = rb.relu_backward(a0, da)
    _, grads["stem.w"], grads["stem.b"] = rb.conv2d_backward(x, s["stem.w"], ds, pad=1)
    return float(loss), grads
