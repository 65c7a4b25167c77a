"""A 3x3 convolution (stride 1, any zero padding, one group) by Winograd's F(2x2, 3x3) in three passes:
the input transform, 16 GEMMs on the tuned GEMM kernel, the output transform with the epilogue
(labkit/kernels/conv_winograd_gemm.cu; cuDNN calls this WINOGRAD_NONFUSED).

    conv = WinogradGemmConv2d(w, b, ConvLayer.of(256, 14, 14, 256, 3, pad=1), activation="relu")
    y = conv(x)                          # x (N, 256, 14, 14) -> y (N, 256, 14, 14)
    conv.workspace_bytes(N)              # V and Mx, the layer's own, made when a batch size is planned

Where conv_winograd.cu (the fused kernel) keeps a block's GEMMs small (16-32 output channels by one
row of tiles), these GEMMs are the whole batch's: M x C by C x T for T tiles, at the GEMM kernel's
speed.  They win on layers of many channels and small planes (ResNet-18's 256 and 512 channels on
14 x 14 and 7 x 7, AlexNet's conv3-5 on 13 x 13) and lose where the transforms' traffic (V and Mx,
16 values per channel and tile each way) outweighs the 2.25x fewer multiply-adds: few channels on
large planes.  ``labkit.conv2d(variant="auto")`` times it beside the other kernels.

The weights' transform U = G g G^T is made once, on the host in float64: the layer's weights are
fixed (inference).  Its GEMM tiles: ``tiles``, else gemm.cu's defaults for the product's shape.

``WinogradGemm3x3`` is the same three passes for a training step's 3x3 layers (stride 1, padding 1),
with conv_small's interface (``Conv3x3Layer``): forward, or backward data (``transpose=True``), its
epilogue's residual and ReLU gate; the weights, which every step changes, transformed on the GPU at
each call (wgg_weights: 16 x C x M values, a few microseconds).  ``labkit.ops.conv3x3_auto`` times it
beside conv_small's direct kernel and the fused Winograd kernel.
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..device_query import device
from ..checks import (array_module, check_activation, check_conv_arguments, check_input, check_residual, fast_input,
                      output, to_numpy)
from ..loader import load
from ..shapes import ConvLayer
from .conv_small import Conv3x3Layer
from .gemm import batched_launcher, default_config, gemm_candidates
from .implicit import ACTIVATIONS
from .plans import cdiv, ints

__all__ = ["WinogradGemmConv2d", "WinogradGemm3x3", "applies", "workspace_bytes", "workspace_limit", "check_workspace",
           "fits", "gemm_tiles", "transform_weights", "tiles_of", "POSITIONS"]

POSITIONS = 16                     # F(2x2, 3x3): 4 x 4 transform positions, one GEMM each
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def workspace_limit() -> int:
    """Bytes of V and Mx one layer may hold: 1/64 of the GPU's memory, between 128 MiB and 2 GiB (an
    8 GiB card 128 MiB, an 80 GiB H100 1.25 GiB, a 141 GiB H200 2 GiB); 512 MiB on the CPU executor.
    Each layer that runs this kernel keeps its own (two layers may run at once on two streams), and
    an autotuner's search holds a few candidates' at once: the bound keeps a network's share small."""
    dev = device()
    if not dev.is_gpu or not dev.total_memory_bytes:
        return 2 ** 29
    return max(2 ** 27, min(2 ** 31, dev.total_memory_bytes // 64))


def applies(layer: ConvLayer) -> bool:
    """Can conv_winograd_gemm.cu run ``layer``: a 3x3 window, stride 1, no dilation, one group."""
    return (layer.kernel_hw == (3, 3) and layer.stride_hw == (1, 1) and layer.dilation_hw == (1, 1)
            and layer.groups == 1)


def tiles_of(layer: ConvLayer, N: int) -> int:
    """T: the 2x2 output tiles of a batch of N (the GEMMs' columns)."""
    ho, wo = layer.out_hw
    return N * cdiv(ho, 2) * cdiv(wo, 2)


def workspace_bytes(layer: ConvLayer, N: int) -> int:
    """V (16, C, T) and Mx (16, M, T), float32: what a batch of N needs besides x and y."""
    return 4 * POSITIONS * (layer.C + layer.M) * tiles_of(layer, N)


def check_workspace(layer: ConvLayer, N: int, fix: str) -> None:
    """ValueError, saying how much and what to use instead (``fix``), where a batch of N would need more
    V and Mx than ``workspace_limit()``: said before anything is compiled or allocated."""
    need, limit = workspace_bytes(layer, N), workspace_limit()
    if need > limit:
        raise ValueError(f"{layer.key} at batch {N} needs {need / 2**20:.0f} MiB of Winograd workspace (V and Mx), "
                         f"over this device's {limit // 2**20} MiB: {fix}")


def fits(layer: ConvLayer, N: int) -> bool:
    """Whether a batch of N of ``layer`` keeps its V and Mx within ``workspace_limit()``."""
    return workspace_bytes(layer, N) <= workspace_limit()


def gemm_tiles(layer: ConvLayer, T: int, limit: int) -> list[dict]:
    """gemm.cu's block tiles an autotuner times for the GEMMs (M x C by C x T): its default for the
    shape first, then its sweep's likeliest, at most ``limit``."""
    out = [t for t in [default_config(layer.M, T, layer.C)[1]] if t]     # None: few rows, not a block tile
    out += [t for t in gemm_candidates(layer.M, T) if t not in out]
    return out[:limit]


def _passes(G: ConvLayer, N: int, tiles: dict | None, epilogue: dict, fix: str, xp) -> tuple:
    """What both layers share at a batch of N of the pass ``G`` (as a forward layer): (module, Mx, the
    input transform's launch(x) into V, the GEMMs' launch(u) from V into Mx), V and Mx allocated here
    (before any CUDA graph captures the pass).  ``epilogue``: the output transform's flags
    (WGG_BIAS, WGG_ADD, WGG_GATE, WGG_FLIP); ``fix``: what to use instead where the workspace is too large."""
    check_workspace(G, N, fix)
    T = tiles_of(G, N)
    ph, pw = G.pad_hw
    mod = load("conv_winograd_gemm", defines={"WGG_C": G.C, "WGG_H": G.H, "WGG_W": G.W, "WGG_M": G.M,
                                              "WGG_PH": ph, "WGG_PW": pw, **epilogue})
    v = xp.empty((POSITIONS, G.C, T), dtype=xp.float32)
    mx = xp.empty((POSITIONS, G.M, T), dtype=xp.float32)
    to_v = mod.get_function("wgg_input").launcher((cdiv(G.C * T, 256),), (256,), (None, v) + ints(N))
    gemms = batched_launcher(G.M, T, G.C, POSITIONS, tiles or default_config(G.M, T, G.C)[1])
    return mod, mx, to_v, lambda u: gemms(u, v, mx)


def _output_launch(mod, G: ConvLayer, N: int, mx, b, addend, gate, act: int):
    """wgg_output's launch from Mx: None among b, addend, gate where each call passes one, then y."""
    return mod.get_function("wgg_output").launcher(
        (cdiv(G.M * tiles_of(G, N), 256),), (256,), (mx, b, addend, gate, None) + ints(N, act))


def transform_weights(w) -> np.ndarray:
    """U = G g G^T of each (m, c) filter, float64 on the host: (16, M, C), position 4 a + b first."""
    g = to_numpy(w).astype(np.float64)
    u = np.einsum("ai,mcij,bj->abmc", _G, g, _G)
    return u.reshape(POSITIONS, g.shape[0], g.shape[1])


class WinogradGemmConv2d:
    """One 3x3 convolution layer on conv_winograd_gemm.cu and gemm.cu's batched GEMM.

    Args: ``w`` float32 (M, C, 3, 3) on the backend, ``b`` (M,) or None, ``layer`` its ConvLayer (3x3,
    stride 1, any padding, no dilation, one group), ``activation`` None, "tanh", "relu" or "relu6",
    ``residual``: y = act(conv(x) + b + residual), each call passing ``residual=``; ``tiles``: gemm.cu's
    block tile (GEMM_BM, GEMM_BN, GEMM_BK, GEMM_TM, GEMM_TN) for the GEMMs, else its defaults.
    Per batch size ``plan`` makes the three launches and the layer's V and Mx once; a call checks x
    and launches."""

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, residual: bool = False,
                 tiles: dict | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        layer = ConvLayer(*layer).canonical()
        layer.check()
        if not applies(layer):
            raise ValueError(f"conv_winograd_gemm.cu runs 3x3 windows at stride 1, without dilation, one group; "
                             f"got {layer.key}: use labkit.conv2d(variant='auto')")
        self._act = check_activation(activation, ACTIVATIONS)
        check_conv_arguments(w, b, layer, residual, backend, xp)
        self.layer, self.activation, self.residual, self.tiles = layer, activation, bool(residual), tiles
        self.w, self.b = w, b
        self.u = xp.asarray(transform_weights(w).astype(np.float32))
        self._kind, self._x_shape = xp.ndarray, (layer.C, layer.H, layer.W)
        self._plans: dict[int, tuple] = {}

    def workspace_bytes(self, N: int) -> int:
        return workspace_bytes(self.layer, N)

    def plan(self, N: int) -> tuple:
        """(run(x, y, res), y's shape) of a batch of N, made once: the three launches on the layer's V
        and Mx.  ValueError, before anything is compiled or allocated, where V and Mx would pass
        ``workspace_limit()``."""
        entry = self._plans.get(N)
        if entry is not None:
            return entry
        L = self.layer
        mod, mx, to_v, gemms = _passes(L, N, self.tiles, {"WGG_BIAS": int(self.b is not None),
                                                          "WGG_ADD": int(self.residual)},
                                       "a smaller batch, or another kernel (labkit.conv2d(variant='auto') picks one "
                                       "that fits)", array_module(self.backend))
        bias = self.b if self.b is not None else self.u      # not read without a bias (nor the gate)
        from_mx = _output_launch(mod, L, N, mx, bias, None, bias, self._act)

        def run(x, y, res):
            to_v(x)
            gemms(self.u)
            from_mx(res, y)
        entry = self._plans[N] = (run, (N, L.M) + L.out_hw)
        return entry

    def __call__(self, x, out=None, *, residual=None):
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_input(x, self._x_shape, self.layer.key, self.backend)
        run, out_shape = self._plans.get(x.shape[0]) or self.plan(int(x.shape[0]))
        res = check_residual(residual, out_shape, self.residual, self._kind, self.backend, "WinogradGemmConv2d")
        y = output(out, out_shape, "NCHW", (x, self.w, self.b) + res, backend=self.backend)
        run(x, y, res[0] if res else y)      # without a residual the kernel reads none (y stands in)
        return y


class WinogradGemm3x3(Conv3x3Layer):
    """A 3x3 pass of a training step on conv_winograd_gemm.cu: ``Conv3x3Layer``'s arguments and calls
    (wt the forward layer's weights (C*9, M), read at every call; ``transpose`` for backward data), and
    ``tiles``: gemm.cu's block tile for the GEMMs (None: its defaults).  A batch size's plan holds U, V
    and Mx, made with it (before any CUDA graph captures the pass); ValueError, before anything is
    compiled or allocated, where V and Mx would pass ``workspace_limit()``."""

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False, tiles: dict | None = None):
        super().__init__(wt, b, layer, activation=activation, residual=residual, gate=gate, transpose=transpose)
        L = self.layer
        self.tiles = tiles
        self.geometry = ConvLayer.of(self.c_in, L.H, L.W, self.c_out, 3, 1, 1)   # the pass, as a forward layer

    def workspace_bytes(self, N: int) -> int:
        return workspace_bytes(self.geometry, N)

    def make_plan(self, N: int):
        G, xp = self.geometry, array_module(self.backend)
        mod, mx, to_v, gemms = _passes(G, N, self.tiles, self.epilogue_defines("WGG"),
                                       "conv_small's or conv_winograd's kernels (labkit.ops.conv3x3_auto picks one "
                                       "that fits)", xp)
        u = xp.empty((POSITIONS, G.M, G.C), dtype=xp.float32)
        to_u = mod.get_function("wgg_weights").launcher((cdiv(G.M * G.C, 256),), (256,), (self.wt, u))
        from_mx = _output_launch(mod, G, N, mx, *self.fixed_pointers(), 2 if self.relu else 0)

        def run(x, *per_call):     # per_call: (residual,) (gate,) as the layer was made, then y
            to_u()
            to_v(x)
            gemms(u)
            from_mx(*per_call)
        return run
