"""The small ResNet's convolution kernels, pass by pass: every tile of the direct kernels
(labkit.ops.conv_small) checked and timed, beside cuDNN's fastest algorithm (through PyTorch) and
the pass's floor.

    tiles = candidates("forward", 16, 16, 28, 28)          # every tile that fits
    rows = sweep_pass("weight", layer, 256, tiles)           # checked against float64, then timed
    ms = cudnn_pass_ms("data", layer, 256)                   # cuDNN (cudnn.benchmark) on the same pass

A pass is "forward" (y = conv(x)), "data" (dL/dx) or "weight" (dL/dw) of a 3x3 layer, stride 1,
padding 1.  Its floor is the larger of its multiply-adds at the device's FP32 rate and its bytes
(the two tensors it reads, the one it writes, once) at the copy bandwidth.
"""
from __future__ import annotations


import numpy as np

from .. import backends, measure, peers, reference
from ..backends.parallel import run_parallel
from ..checks import rel_error, to_numpy
from ..device_query import device
from ..measure.sweep import progress_bar
from ..models.resnet_small import to_ckkm, to_mckk
from ..ops.conv3x3_auto import Auto3x3, AutoWeightGrad3x3
from ..ops.conv_small import (SmallConv3x3, SmallWeightGrad, direct_candidates, tile_for, weight_candidates,
                               weight_tile_for)
from ..ops.conv_winograd import (WinogradConv3x3, WinogradTile, winograd_candidates,
                                 winograd_tile_for)
from ..ops.conv_winograd_wgrad import (WinogradWeightGrad, WinogradWeightTile, winograd_weight_candidates,
                                      winograd_weight_tile_for)
from ..reference import backward as rb
from ..shapes import ConvLayer
from .harness import agrees

__all__ = ["PASSES", "candidates", "sweep_pass", "cudnn_pass_ms", "pass_cost", "kernel_shape", "make_pass",
           "network_pass"]

PASSES = ("forward", "data", "weight")
CHECK_BATCH = 3


def kernel_shape(kind: str, layer: ConvLayer) -> tuple[int, int, int, int]:
    """(input channels, output channels, H, W) as the pass's kernel sees them (data swaps C and M)."""
    return (layer.M, layer.C, layer.H, layer.W) if kind == "data" else (layer.C, layer.M, layer.H, layer.W)


def network_pass(kind: str, layer: ConvLayer, N: int):
    """(the pass's op, "winograd" or "direct") as the network chooses it at a batch of N on this GPU:
    through the autotuner (labkit.ops.conv3x3_auto: its disk cache, a search, the tuned table or the
    defaults), as ResNetSmall's layers do.  The weights and bias are make_pass's."""
    wt, b = _pass_weights(kind, layer)
    if kind == "weight":
        op = AutoWeightGrad3x3(layer).layer_at(N)
    else:
        op = Auto3x3(wt, b, layer, activation="relu" if kind == "forward" else None,
                     transpose=kind == "data").layer_at(N)
    return op, "winograd" if isinstance(op, (WinogradConv3x3, WinogradWeightGrad)) else "direct"


def _pass_weights(kind: str, layer: ConvLayer) -> tuple:
    """(weights in the CKKM layout, the forward's bias or None): seeded, the same for every pass object."""
    xp = backends.xp()
    rng = np.random.default_rng(1)
    wt = xp.asarray(to_ckkm(rng.standard_normal((layer.M, layer.C, 3, 3)) / np.sqrt(9 * layer.C)).astype(np.float32))
    b = xp.asarray(rng.standard_normal(layer.M).astype(np.float32)) if kind == "forward" else None
    return wt, b


def candidates(kind: str, C: int, M: int, H: int, W: int, algorithm: str = "direct") -> list:
    """Every tile of the pass's kernel (``algorithm`` "direct" or "winograd") that fits the layer
    (C -> M as the kernel sees it), within the bounds that can win (labkit.ops: direct_candidates,
    weight_candidates, winograd_candidates, winograd_weight_candidates)."""
    if algorithm == "winograd":
        return (winograd_weight_candidates if kind == "weight" else winograd_candidates)(C, M, H, W)
    return (weight_candidates if kind == "weight" else direct_candidates)(C, M, H, W)


def make_pass(kind: str, layer: ConvLayer, tile=None, algorithm: str = "direct"):
    """The pass's labkit object: SmallConv3x3 or, with algorithm="winograd" (or a WinogradTile),
    WinogradConv3x3 (forward, ReLU and bias as in the network; data, as the transposed convolution),
    or SmallWeightGrad (WinogradWeightGrad), with ``tile`` or the tuned/default one."""
    wt, b = _pass_weights(kind, layer)
    if kind == "weight":
        winograd = algorithm == "winograd" or isinstance(tile, WinogradWeightTile)
        return (WinogradWeightGrad if winograd else SmallWeightGrad)(layer, tile=tile), wt
    cls = WinogradConv3x3 if algorithm == "winograd" or isinstance(tile, WinogradTile) else SmallConv3x3
    return cls(wt, b, layer, activation="relu" if kind == "forward" else None, transpose=kind == "data", tile=tile), wt


def _check(kind: str, layer: ConvLayer, op, wt, rng) -> float:
    """The relative error of ``op`` against the float64 reference at batch CHECK_BATCH."""
    xp = backends.xp()
    w = to_mckk(to_numpy(wt).astype(np.float64))
    x = rng.standard_normal((CHECK_BATCH, layer.C, layer.H, layer.W))
    dy = rng.standard_normal((CHECK_BATCH, layer.M, layer.H, layer.W))
    f32 = lambda a: xp.asarray(a.astype(np.float32))  # noqa: E731
    if kind == "forward":
        b = to_numpy(op.b).astype(np.float64)
        return rel_error(op(f32(x)), reference.relu(reference.conv2d(x, w, b, pad=1)))
    dx, dw, _ = rb.conv2d_backward(x, w, dy, pad=1)
    if kind == "data":
        return rel_error(op(f32(dy)), dx)
    return rel_error(op(f32(x), f32(dy)), to_ckkm(dw))


def sweep_pass(kind: str, layer: ConvLayer, N: int, tiles, *, repeat: int = 10, algorithm: str = "direct",
               progress: bool = True) -> list[dict]:
    """Each tile of the pass's kernel: checked against float64 at batch 3 (a wrong kernel never wins),
    then GPU ms per launch at batch N (a CUDA graph of launches, inputs L2-warm as in the network).
    A bar over the tiles shows progress unless ``progress=False`` (the compiles before it run in
    parallel, with no bar)."""
    xp = backends.xp()
    rng = np.random.default_rng(0)
    ops = [make_pass(kind, layer, t, algorithm) for t in tiles]
    shape = kernel_shape(kind, layer)
    default = (winograd_weight_tile_for(*shape) if kind == "weight" and algorithm == "winograd" else
               weight_tile_for(*shape) if kind == "weight" else
               winograd_tile_for(kind, *shape) if algorithm == "winograd" else tile_for(kind, *shape))
    run_parallel([lambda o=o: _compile(kind, o[0]) for o in ops])
    a = xp.asarray(rng.standard_normal((N,) + ((layer.M,) if kind == "data" else (layer.C,)) + (layer.H, layer.W),
                                       dtype=np.float32))
    dy = xp.asarray(rng.standard_normal((N, layer.M, layer.H, layer.W), dtype=np.float32))
    rows, floor = [], measure.floor_ms(pass_cost(kind, layer, N), device().ceilings())
    for t, (op, wt) in progress_bar(list(zip(tiles, ops)), desc=f"{kind} pass tiles, batch {N}", show=progress):
        err = agrees(f"{kind} pass of {layer} with {t}", _check(kind, layer, op, wt, rng), 1e-5)
        run = (lambda op=op: op(a, dy)) if kind == "weight" else (lambda op=op: op(a))
        ms = measure.per_launch_ms(run, repeat=repeat)
        rows.append({"pass": kind, "algorithm": algorithm, "layer": layer.key, "batch": N, "tile": t.__dict__,
                     "median_ms": ms,
                     "floor_ms": floor, "rel_error": err, "default": t == default, "device": device().label})
    return rows


def _compile(kind: str, op) -> None:
    """Load the module of ``op``'s tile for batch 1 (the compile is the slow part; it is cached)."""
    op.plan(1)


def pass_cost(kind: str, layer: ConvLayer, N: int) -> measure.Cost:
    """The work of one pass (``kind``: forward, data or weight) of a 3x3 block convolution: its FP32
    multiply-adds and its bytes; ``measure.floor_ms(pass_cost(...), ceilings)`` is its floor."""
    flops = 2.0 * N * layer.H * layer.W * layer.C * layer.M * 9
    # Every pass moves one activation of C channels and one of M (x and y, dy and dx, x and dy) and the weights.
    nbytes = 4 * (N * layer.H * layer.W * (layer.C + layer.M) + layer.C * layer.M * 9)
    out = {"forward": (N, layer.M, layer.H, layer.W), "data": (N, layer.C, layer.H, layer.W),
           "weight": (layer.C, 3, 3, layer.M)}[kind]
    return measure.Cost(flops, float(nbytes), out)


def cudnn_pass_ms(kind: str, layer: ConvLayer, N: int, *, repeat: int = 10) -> float | None:
    """GPU ms of the same pass on cuDNN through PyTorch (cudnn.benchmark: its fastest algorithm for
    the shape, FP32 without TF32), timed as labkit's are; None without PyTorch and cuDNN."""
    if peers.cudnn_available() is not None:
        return None
    import torch
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, layer.C, layer.H, layer.W, device="cuda", generator=g)
    w = torch.randn(layer.M, layer.C, 3, 3, device="cuda", generator=g)
    dy = torch.randn(N, layer.M, layer.H, layer.W, device="cuda", generator=g)
    mask = {"forward": None, "data": [True, False, False], "weight": [False, True, False]}[kind]
    if kind == "forward":
        run = lambda: torch.nn.functional.conv2d(x, w, padding=1)  # noqa: E731
    else:
        run = lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0],  # noqa: E731
                                                          1, mask)
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    return measure.per_launch_ms(run, repeat=repeat, capture=peers.torch_capture)
