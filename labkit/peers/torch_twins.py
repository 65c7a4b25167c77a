"""PyTorch's twins of labkit's layers and networks: cuDNN and cuBLAS, through PyTorch, in the same run.

    if peers.cudnn_available():
        run = peers.cudnn_conv2d(x, w, b, activation="tanh")   # x, w, b: CuPy arrays (shared, no copy)
        t = measure.time_fn(run)                               # timed like labkit's kernels

PyTorch is optional: on a machine without it (or without a GPU) ``cudnn_available()`` says
why, and notebooks and benchmarks print that instead of a comparison.  cuDNN runs in plain FP32
(TF32 off) unless ``tf32=True``, with ``cudnn.benchmark`` on, so it picks its fastest algorithm
for the shape, as a PyTorch user's deployed model would.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import backends
from ..measure import time_fn
from ..models.alexnet import LRN, LRN_AFTER, POOL_AFTER
from ..models import resnet18_onnx
from ..models.mobilenet_v2 import BN_EPS, blocks, tensor_names
from ..shapes import ALEXNET_CONVS


def cudnn_available() -> str | None:
    """None if PyTorch can run cuDNN on the GPU labkit uses; else the reason it cannot."""
    if backends.current() != "cuda":
        return "the CPU executor is running: cuDNN needs a GPU"
    try:
        import torch
    except Exception as exc:
        return f"PyTorch is not importable here ({type(exc).__name__}); install it to compare with cuDNN"
    if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
        return "PyTorch sees no CUDA device or no cuDNN"
    return None


def _setup_torch(tf32: bool) -> None:
    """cuDNN as a deployed model runs it: its fastest algorithm per shape; TF32 only if asked."""
    import torch
    why = cudnn_available()
    if why:
        raise RuntimeError(why)
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = bool(tf32)
    torch.backends.cuda.matmul.allow_tf32 = bool(tf32)


def tf32_gemm_TFLOPs(n: int = 8192) -> float:
    """The TF32 tensor-core ceiling: an n^3 TF32 matmul through PyTorch (cuBLAS), in TFLOP/s."""
    import torch
    why = cudnn_available()
    if why:
        raise RuntimeError(why)
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        a = torch.randn(n, n, device="cuda")
        t = time_fn(lambda: a @ a, warmup=3, repeat=10, sync=False)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    return 2 * n**3 / (t.median_ms * 1e-3) / 1e12


def as_torch(a):
    """A CuPy array as a torch tensor on the same memory (DLPack, no copy)."""
    import torch
    return torch.from_dlpack(a)


def cudnn_conv2d(x, w, b=None, *, activation: str | None = None, stride: int = 1, pad: int = 0,
                 groups: int = 1, tf32: bool = False, out=None) -> Callable[[], object]:
    """A zero-argument callable running torch.nn.functional.conv2d (cuDNN) on CuPy arrays.

    ``out`` (a CuPy array of the output's shape) receives the result when given, so the peer
    can be checked against the reference like labkit's kernels.
    """
    import torch
    import torch.nn.functional as F
    _setup_torch(tf32)
    xt, wt = as_torch(x), as_torch(w)
    bt = None if b is None else as_torch(b)
    outt = None if out is None else as_torch(out)
    act = {None: None, "tanh": torch.tanh, "relu": torch.relu}[activation]

    def run():
        # The TF32 switch is process-wide: set it on every call, so that peers made with either
        # setting can be timed one after the other.
        torch.backends.cudnn.allow_tf32 = bool(tf32)
        with torch.no_grad():
            y = F.conv2d(xt, wt, bt, stride=stride, padding=pad, groups=groups)
            if act is not None:
                y = act(y)
            if outt is not None:
                outt.copy_(y)
            return y
    return run


def cudnn_fashion_net(weights: dict, *, tf32: bool = False) -> Callable[[object], object]:
    """The seed's Fashion-MNIST network in PyTorch (cuDNN, cuBLAS) with labkit's weights.

    ``weights``: the dict of labkit.models.fashion_mnist.load_weights (NumPy, labkit's layouts:
    MCKK convolutions, (in, out) dense).  Returns ``run(x)``: x a CuPy float32 (N, 1, 48, 48)
    array; the softmax probabilities as a torch tensor on the GPU.  Written as a PyTorch user
    would: conv2d, tanh, max_pool2d, conv2d, tanh, flatten, linear, tanh, linear, softmax.
    """
    import torch
    import torch.nn.functional as F
    _setup_torch(tf32)
    # np.require: a writable array (a copy of a read-only one): torch warns on read-only NumPy arrays
    t = {k: torch.as_tensor(np.require(v, requirements="W"), device="cuda") for k, v in weights.items()}
    fc1_t, fc2_t = t["fc1_w"].t().contiguous(), t["fc2_w"].t().contiguous()   # linear takes (out, in)

    def forward(h):
        """The network on a torch tensor (N, 1, 48, 48) on the GPU."""
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        with torch.no_grad():
            h = torch.tanh(F.conv2d(h, t["conv1_w"], t["conv1_b"]))
            h = F.max_pool2d(h, 2)
            h = torch.tanh(F.conv2d(h, t["conv2_w"], t["conv2_b"]))
            h = torch.tanh(F.linear(h.flatten(1), fc1_t, t["fc1_b"]))
            return torch.softmax(F.linear(h, fc2_t, t["fc2_b"]), dim=1)

    def run(x):
        return forward(as_torch(x))
    run.forward = forward
    return run


def torch_alexnet(weights: dict, *, device: str = "cuda", tf32: bool = False) -> Callable[[object], object]:
    """AlexNet in PyTorch with labkit's weights (labkit.models.alexnet layouts), as a PyTorch user
    writes it: conv2d (groups), relu, local_response_norm, max_pool2d, linear, softmax.

    ``device="cuda"``: cuDNN and cuBLAS, ``run(x)`` takes a CuPy array (shared, no copy);
    ``device="cpu"``: PyTorch's CPU kernels, ``run(x)`` takes a NumPy array.  Returns the softmax
    probabilities as a torch tensor.  PyTorch's LRN divides alpha by the window size (Caffe's
    convention), so alpha is passed as 5 * 2e-5 to compute TensorFlow's LRN, which labkit uses.
    """
    import torch
    import torch.nn.functional as F
    if device == "cuda":
        _setup_torch(tf32)
    t = {k: torch.as_tensor(np.require(v, requirements="W"), device=device) for k, v in weights.items()}
    fc = {n: t[f"{n}_w"].t().contiguous() for n in ("fc6", "fc7", "fc8")}   # linear takes (out, in)
    size = 2 * LRN["depth_radius"] + 1

    def forward(h):
        """The network on a torch tensor ``h`` (N, 3, 227, 227) on ``device``."""
        if device == "cuda":
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        with torch.no_grad():
            for name, L in ALEXNET_CONVS.items():
                h = F.relu(F.conv2d(h, t[f"{name}_w"], t[f"{name}_b"], stride=L.stride, padding=L.pad,
                                    groups=L.groups))
                if name in LRN_AFTER:
                    h = F.local_response_norm(h, size, alpha=LRN["alpha"] * size, beta=LRN["beta"], k=LRN["bias"])
                if name in POOL_AFTER:
                    h = F.max_pool2d(h, 3, 2)
            h = h.flatten(1)
            h = F.relu(F.linear(h, fc["fc6"], t["fc6_b"]))
            h = F.relu(F.linear(h, fc["fc7"], t["fc7_b"]))
            return torch.softmax(F.linear(h, fc["fc8"], t["fc8_b"]), dim=1)

    def run(x):
        return forward(as_torch(x) if device == "cuda" else torch.as_tensor(x))
    run.forward = forward
    return run


def torch_graph(forward: Callable[[object], object], x) -> Callable[[], object]:
    """``forward`` (a function of a torch tensor) captured as one CUDA graph (torch.cuda.CUDAGraph) on the
    fixed input ``x``: the peer of labkit's plan.run(), with no Python between the kernels.  Returns
    ``replay()``, which runs the graph and returns its output tensor; ``replay.x`` is the graph's input
    (fill it with ``replay.x.copy_(...)`` to run other data).  Warmed up on a side stream before the
    capture, so that cuDNN has chosen its algorithms (they are frozen into the graph)."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            forward(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = forward(x)

    def replay():
        graph.replay()
        return out
    replay.x = x
    return replay


def torch_capture(many: Callable[[], object]) -> Callable[[], object]:
    """``many()`` (PyTorch launches, no input) captured as one CUDA graph: the ``capture`` that
    ``measure.per_launch_ms`` takes to time a PyTorch callable as it times labkit's launches."""
    return torch_graph(lambda _x: many(), None)


def torch_alexnet_graph(weights: dict, batch: int, *, tf32: bool = False) -> Callable[[], object]:
    """torch_alexnet captured as one CUDA graph on a fixed input of ``batch`` images (``torch_graph``)."""
    import torch
    return torch_graph(torch_alexnet(weights, tf32=tf32).forward, torch.randn((batch, 3, 227, 227), device="cuda"))


def cudnn_fashion_net_graph(weights: dict, batch: int, *, tf32: bool = False) -> Callable[[], object]:
    """cudnn_fashion_net captured as one CUDA graph on a fixed input of ``batch`` images (``torch_graph``)."""
    import torch
    return torch_graph(cudnn_fashion_net(weights, tf32=tf32).forward, torch.rand((batch, 1, 48, 48), device="cuda"))


def torch_mobilenet_v2(weights: dict, *, tf32: bool = False) -> Callable[[object], object]:
    """MobileNetV2 in PyTorch with these weights (torchvision ``state_dict`` names, NumPy float32; see
    labkit.models.mobilenet_v2): torchvision's ``mobilenet_v2`` loaded strictly, in eval mode (BN
    from its running statistics, dropout off) on the GPU, as a PyTorch user deploys it.  Where
    torchvision is not installed, the same network in torch.nn.functional (conv2d, batch_norm,
    relu6).  Returns ``run(x)``: x a CuPy float32 (N, 3, H, W) array; the softmax probabilities as
    a torch tensor.  ``run.forward(h)`` takes a torch tensor; ``run.source`` says which network ran."""
    import torch
    import torch.nn.functional as F
    _setup_torch(tf32)
    state = {k: torch.as_tensor(np.require(v, requirements="W"), device="cuda") for k, v in weights.items()}
    try:
        from torchvision.models import mobilenet_v2
    except Exception:
        mobilenet_v2 = None
    if mobilenet_v2 is not None:
        model = mobilenet_v2(weights=None, num_classes=int(weights["classifier.1.bias"].shape[0])).cuda().eval()
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
            raise ValueError(f"the weights do not fit torchvision's mobilenet_v2: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
        net, source = model, "torchvision.models.mobilenet_v2 (eval)"
    else:
        bs = blocks()

        def unit(h, prefix, stride=1, pad=0, groups=1, act=True):
            wname, bn = tensor_names(prefix)
            h = F.conv2d(h, state[wname], None, stride, pad, 1, groups)
            h = F.batch_norm(h, state[f"{bn}.running_mean"], state[f"{bn}.running_var"], state[f"{bn}.weight"],
                             state[f"{bn}.bias"], False, 0.0, BN_EPS)
            return F.relu6(h) if act else h

        def net(h):
            h = unit(h, "features.0", 2, 1)
            for b in bs:
                skip = h
                for kind, (prefix, L) in b.convs().items():
                    h = unit(h, prefix, L.stride, L.pad, L.groups, kind != "project")
                h = h + skip if b.residual else h
            h = unit(h, f"features.{len(bs) + 1}").mean((2, 3))
            return F.linear(h, state["classifier.1.weight"], state["classifier.1.bias"])
        source = "torch.nn.functional (torchvision not installed)"

    def forward(h):
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        with torch.no_grad():
            return torch.softmax(net(h), dim=1)

    def run(x):
        return forward(as_torch(x))
    run.forward, run.source = forward, source
    return run


def torch_resnet18(weights: dict, *, tf32: bool = False) -> Callable[[object], object]:
    """The ResNet-18 of labkit.models.resnet18_onnx in PyTorch with these weights (torchvision
    ``state_dict`` names, NumPy float32): torchvision's ``resnet18`` loaded strictly, in eval mode, on
    the GPU, where torchvision is installed and the width is resnet18's (64); else the same network in
    torch.nn.functional (conv2d, batch_norm, relu, max_pool2d).  Returns ``run(x)``: x a CuPy float32
    (N, 3, H, W) array; the logits as a torch tensor.  ``run.forward(h)`` takes a torch tensor;
    ``run.source`` says which network ran."""
    import torch
    import torch.nn.functional as F
    _setup_torch(tf32)
    state = {k: torch.as_tensor(np.require(v, requirements="W"), device="cuda") for k, v in weights.items()}
    width, classes = int(weights["conv1.weight"].shape[0]), int(weights["fc.weight"].shape[0])
    try:
        from torchvision.models import resnet18
    except Exception:
        resnet18 = None
    if resnet18 is not None and width == 64:
        model = resnet18(weights=None, num_classes=classes).cuda().eval()
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
            raise ValueError(f"the weights do not fit torchvision's resnet18: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
        net, source = model, "torchvision.models.resnet18 (eval)"
    else:
        def bn(h, prefix):
            return F.batch_norm(h, state[f"{prefix}.running_mean"], state[f"{prefix}.running_var"],
                                state[f"{prefix}.weight"], state[f"{prefix}.bias"], False, 0.0, resnet18_onnx.BN_EPS)

        def net(h):
            h = F.max_pool2d(F.relu(bn(F.conv2d(h, state["conv1.weight"], None, 2, 3), "bn1")), 3, 2, 1)
            for prefix, c_in, c_out, stride in resnet18_onnx.blocks(width):
                skip = h
                h = F.relu(bn(F.conv2d(h, state[f"{prefix}.conv1.weight"], None, stride, 1), f"{prefix}.bn1"))
                h = bn(F.conv2d(h, state[f"{prefix}.conv2.weight"], None, 1, 1), f"{prefix}.bn2")
                if stride != 1 or c_in != c_out:
                    skip = bn(F.conv2d(skip, state[f"{prefix}.downsample.0.weight"], None, stride),
                              f"{prefix}.downsample.1")
                h = F.relu(h + skip)
            return F.linear(h.mean((2, 3)), state["fc.weight"], state["fc.bias"])
        source = "torch.nn.functional " + ("(torchvision not installed)" if resnet18 is None else
                                           f"(width {width}: not torchvision's resnet18)")

    def forward(h):
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        with torch.no_grad():
            return net(h)

    def run(x):
        return forward(as_torch(x))
    run.forward, run.source = forward, source
    return run


class TorchResNetSmall:
    """labkit.models.resnet_small's network in PyTorch on the GPU, from the same parameters (``state``:
    the float arrays ``ResNetSmall.state()`` gives, conv weights (M, C, 3, 3), dense (c, 10)), trained
    with torch.optim.SGD (momentum, weight decay, as labkit's step), cuDNN choosing its fastest
    algorithms (``cudnn.benchmark``), TF32 only if asked.  ``dtype`` "float64" keeps the parameters
    and the arithmetic in float64: the reference run that float32 runs are compared with
    (labkit.ladder.divergence).

    ``step(x, labels)``: one training step on torch tensors (x float32 (N, 1, H, W), labels int64),
    the loss tensor.  ``state()``: the parameters back as NumPy, in the state's layouts.
    ``graph(x, labels)``: the step captured as one CUDA graph on those fixed tensors; returns
    ``replay()`` (each call one step on them)."""

    def __init__(self, state: dict, *, lr: float, momentum: float = 0.9, weight_decay: float = 0.0,
                 tf32: bool = False, dtype: str = "float32"):
        import torch
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
        _setup_torch(tf32)
        self.names, self.dtype = list(state), np.dtype(dtype)
        self.p = {k: torch.tensor(np.asarray(v, dtype=self.dtype), device="cuda", requires_grad=True)
                  for k, v in state.items()}
        self.opt = torch.optim.SGD(list(self.p.values()), lr=lr, momentum=momentum, weight_decay=weight_decay)

    def forward(self, x):
        """The logits of a torch batch x (N, 1, H, W) on the GPU."""
        import torch.nn.functional as F
        p = self.p
        conv = lambda name, h: F.conv2d(h, p[f"{name}.w"], p[f"{name}.b"], padding=1)  # noqa: E731
        a = F.relu(conv("stem", x))
        for blk in ("block1", "block2"):
            h = F.relu(conv(f"{blk}.conv1", a))
            a = F.relu(conv(f"{blk}.conv2", h) + a)
        return a.mean((2, 3)) @ p["fc.w"] + p["fc.b"]

    def loss(self, x, labels):
        import torch.nn.functional as F
        return F.cross_entropy(self.forward(x), labels)

    def step(self, x, labels):
        self.opt.zero_grad(set_to_none=False)
        loss = self.loss(x, labels)
        loss.backward()
        self.opt.step()
        return loss

    def state(self) -> dict:
        return {k: v.detach().cpu().numpy() for k, v in self.p.items()}

    def train_batch(self, images: np.ndarray, labels: np.ndarray, rate: float):
        """One step on a NumPy batch at learning rate ``rate`` (labkit.models.training.fit_peer's
        interface); the loss as a GPU tensor (reading it would wait for the GPU)."""
        import torch
        for group in self.opt.param_groups:
            group["lr"] = rate
        x = torch.as_tensor(np.asarray(images, self.dtype)).to("cuda", non_blocking=True)
        y = torch.as_tensor(np.asarray(labels, np.int64)).to("cuda", non_blocking=True)
        return self.step(x, y).detach()

    def logits(self, images: np.ndarray) -> np.ndarray:
        import torch
        with torch.no_grad():
            return self.forward(torch.as_tensor(np.asarray(images, self.dtype), device="cuda")).cpu().numpy()

    def graph(self, x, labels) -> Callable[[], object]:
        return torch_graph(lambda h: self.step(h, labels), x)
