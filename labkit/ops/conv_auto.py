"""``labkit.conv2d(variant="auto")``: the fastest correct kernel for a convolution's shape, on this GPU.

    conv = AutoConv2d(w, b, ConvLayer.of(64, 512, 512, 128, (5, 7), pad=(2, 3)), activation="relu")
    y = conv(x)              # the first call of a batch size picks the kernel (a search, or the disk cache)
    conv.choice(N)           # {"family": "implicit", "tiles": {...}, "splits": 1}

Every kernel family that can run the shape offers its candidates (tiles, tilings, split-K slices):

    implicit     conv_implicit.cu: the implicit GEMM, any kernel, stride, padding, dilation, groups
    depthwise    depthwise_any.cu: groups = C (M a multiple of C), any kernel, stride, padding, dilation
    depthwise3x3 depthwise.cu: MobileNetV2's 3x3, padding 1, stride 1 or 2
    winograd     conv_winograd.cu: 3x3, stride 1, padding 1, one group (F(2x2,3x3) or F(4x4,3x3), its
                 tiles: winograd_auto_tiles), and conv_small.cu's direct kernel for the same shapes
    winograd_gemm conv_winograd_gemm.cu: windows up to 7x7 (square or not), stride 1, any padding,
                 groups: F(2, r) each way ((r+1)^2 GEMMs of the whole batch, gemm.cu's batched kernel,
                 between transforms in global memory), for many channels on small planes; its
                 candidates are GEMM tiles; a batch whose workspace (V and Mx) would pass its
                 workspace_limit (1/64 of the GPU's memory) runs in chunks of images (none offered
                 where one image's would)
    phased       conv_winograd.cu on dilated 3x3 layers padded by their dilation, on unpadded 3x3
                 layers and on 3x3 layers of a few groups (stride 1): the input's phases as a batch,
                 the output cropped, a launch a group (labkit.ops.conv_phased)
    tuned        conv_tuned.cu: the seed's valid convolutions (stride 1, no padding, one group)

and labkit.autotune times them all in one search per (shape, batch size): on a GPU the winner is
cached on disk for this GPU and kernel sources, and later processes only look it up.  Untuned (the
CPU executor, LABKIT_AUTOTUNE=0, inside a CUDA graph capture) the first candidate runs: the
depthwise kernel for depthwise shapes, else the implicit GEMM with its default tiles.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Callable, NamedTuple

from .. import autotune, backends
from ..checks import array_module, check_activation, check_conv_arguments, check_input, fast_input
from ..reference.samples import conv_samples, sample_positions
from ..shapes import ConvLayer
from . import conv as direct
from .conv_phased import PhasedWinograd, phased_geometry
from .conv_small import SmallConv3x3
from .conv_winograd import WinogradConv3x3, WinogradTile, winograd_auto_tiles
from . import conv_winograd_gemm as wgemm
from .depthwise import ACTIVATIONS as DEPTHWISE_3X3_ACTIVATIONS, DepthwiseConv2d, Tiling, tiling_candidates
from .depthwise_any import (ACTIVATIONS as DEPTHWISE_ACTIVATIONS, DepthwiseAnyConv2d, Tiling as AnyTiling,
                            tiling_candidates as any_tiling_candidates)
from .implicit import ACTIVATIONS, TOLERANCE, ImplicitConv2d, Tiles, prepare_weights
from .plans import sampled_mismatch
from .tuned_config import check_config, tuned_config

__all__ = ["AutoConv2d", "FAMILIES", "families_for"]

Runner = Callable  # run(x, out) -> y


class Family(NamedTuple):
    """A kernel family as ``auto`` sees it: can it run the layer, its candidates at a batch of N
    (JSON-able dicts, its untuned choice first), and a runner made from one candidate; ``residual``:
    its epilogue can add a residual (a skip connection)."""
    name: str
    kernels: tuple                                   # labkit/kernels/ files whose source decides
    applies: Callable[[ConvLayer, str | None], bool]
    candidates: Callable[["AutoConv2d", int], list]
    make: Callable[["AutoConv2d", dict], Runner]
    residual: bool = False


def _dense_3x3_same(L: ConvLayer) -> bool:
    return L.square and L.K == 3 and L.stride == 1 and L.pad == 1 and L.groups == 1


# --- the families ------------------------------------------------------------------------------------
def _runner(layer, prepare: Callable[[int], object] | None = None, **call) -> Runner:
    """run(x, out=None, residual=None) -> layer(x, out=out, **call) (and ``residual=`` where given),
    with ``run.prepare(N)``: the layer's plan for a batch of N made (its kernels compiled) without
    launching.  The search builds candidates side by side in threads and checks and times them one
    at a time; a kernel compiled at its first launch would compile inside that one-at-a-time part
    (2 to 3 s each on a large layer)."""
    def run(x, out=None, residual=None):
        if residual is not None:
            return layer(x, out=out, residual=residual, **call)
        return layer(x, out=out, **call)
    run.prepare = prepare or (lambda N: layer.plan(N))
    return run


def _implicit_candidates(conv: "AutoConv2d", N: int) -> list:
    base = ImplicitConv2d(conv.w, conv.b, conv.layer, activation=conv.activation, residual=conv.residual)
    return [{"tiles": asdict(t), "splits": n} for t, n in base.tuning_candidates(N)]


def _implicit_make(conv: "AutoConv2d", config: dict) -> Runner:
    layer = ImplicitConv2d(conv.w, conv.b, conv.layer, activation=conv.activation, tiles=Tiles(**config["tiles"]),
                           residual=conv.residual)
    splits = int(config["splits"])
    # A batch past the 32-bit offsets runs as sub-batches, planned at the call.
    return _runner(layer, lambda N: layer.plan(N, splits) if N <= layer.max_batch else None, splits=splits)


def _depthwise_make(conv: "AutoConv2d", config: dict) -> Runner:
    layer = DepthwiseAnyConv2d(conv.w, conv.b, conv.layer, activation=conv.activation,
                               tiling=AnyTiling(**config["tiling"]))
    return _runner(layer)


def _depthwise3x3_make(conv: "AutoConv2d", config: dict) -> Runner:
    layer = DepthwiseConv2d(conv.w, conv.b, conv.layer, activation=conv.activation, tiling=Tiling(**config["tiling"]),
                            bias_memory="global")
    return _runner(layer)


def _winograd_candidates(conv: "AutoConv2d", N: int) -> list:
    L = conv.layer
    return [{"kernel": "winograd", "tile": asdict(t)} for t in winograd_auto_tiles(L.C, L.M, L.H, L.W)] + \
        [{"kernel": "small"}]


def _winograd_make(conv: "AutoConv2d", config: dict) -> Runner:
    L = conv.layer
    wt = prepare_weights(conv.w, 1).reshape(L.C * 9, L.M)   # (C*9, M): the forward layer's layout
    if config["kernel"] == "winograd":
        layer = WinogradConv3x3(wt, conv.b, L, activation=conv.activation, tile=WinogradTile(**config["tile"]),
                                residual=conv.residual)
    else:
        layer = SmallConv3x3(wt, conv.b, L, activation=conv.activation, residual=conv.residual)
    return _runner(layer)


WGEMM_TILES = 4     # GEMM tiles the search times for winograd_gemm: the default and the likeliest others


def _wgemm_candidates(conv: "AutoConv2d", N: int) -> list:
    L = conv.layer
    n = wgemm.chunk(L, N)          # a batch over its workspace bound runs in chunks of n images
    if n < 1:
        return []
    return [{"tiles": t} for t in wgemm.gemm_tiles(L, wgemm.tiles_of(L, n), WGEMM_TILES)]


def _wgemm_make(conv: "AutoConv2d", config: dict) -> Runner:
    layer = wgemm.WinogradGemmConv2d(conv.w, conv.b, conv.layer, activation=conv.activation,
                                     residual=conv.residual, tiles=config["tiles"])
    return _runner(layer)


def _phased_candidates(conv: "AutoConv2d", N: int) -> list:
    _, _, h, w, _ = phased_geometry(conv.layer)
    L = conv.layer
    return [{"tile": asdict(t)} for t in winograd_auto_tiles(L.C // L.groups, L.M // L.groups, h, w)]


def _phased_make(conv: "AutoConv2d", config: dict) -> Runner:
    return _runner(PhasedWinograd(conv.w, conv.b, conv.layer, activation=conv.activation,
                                  tile=WinogradTile(**config["tile"])))


def _tuned_fits(L: ConvLayer) -> bool:
    """Whether conv_tuned.cu's configuration for the layer fits a block: it stages whole images (and
    maybe the weights) in shared memory, which a large plane of many channels does not fit.  Checked
    here, so that such a layer is never offered to it (nothing compiled to find out)."""
    try:
        check_config(tuned_config(L.C, L.H, L.W, L.M, L.K), L.C, L.H, L.W, L.M, L.K)
    except ValueError:
        return False
    return True


def _tuned_make(conv: "AutoConv2d", config: dict) -> Runner:
    layer = direct.Conv2d(conv.w, conv.b, variant="tuned", activation=conv.activation)
    return lambda x, out=None, residual=None: layer(x, out=out)     # never asked for a residual (not its family)


FAMILIES: tuple[Family, ...] = (
    Family("depthwise", ("depthwise_any",),
           lambda L, a: L.groups == L.C and L.M % L.C == 0 and a in DEPTHWISE_ACTIVATIONS,
           lambda conv, N: [{"tiling": asdict(t)} for t in any_tiling_candidates(conv.layer, N)],
           _depthwise_make),
    Family("depthwise3x3", ("depthwise",),
           lambda L, a: (L.groups == L.C == L.M and L.square and L.K == 3 and L.pad == 1 and L.stride in (1, 2)
                         and a in DEPTHWISE_3X3_ACTIVATIONS),
           lambda conv, N: [{"tiling": asdict(t)} for t in tiling_candidates(conv.layer, N)],
           _depthwise3x3_make),
    Family("implicit", ("conv_implicit",), lambda L, a: a in ACTIVATIONS, _implicit_candidates, _implicit_make,
           residual=True),
    Family("winograd", ("conv_winograd", "conv_small"),
           lambda L, a: _dense_3x3_same(L) and a in (None, "relu"),
           _winograd_candidates, _winograd_make, residual=True),
    Family("winograd_gemm", ("conv_winograd_gemm", "gemm"),
           lambda L, a: wgemm.applies(L) and a in ACTIVATIONS, _wgemm_candidates, _wgemm_make, residual=True),
    Family("phased", ("conv_winograd",),
           lambda L, a: phased_geometry(L) is not None and a in (None, "relu"),
           _phased_candidates, _phased_make),
    Family("tuned", ("conv_tuned",),
           lambda L, a: (L.square and (L.stride, L.pad, L.groups) == (1, 0, 1) and a in (None, "tanh", "relu")
                         and _tuned_fits(L)),
           lambda conv, N: [{}], _tuned_make),
)


def families_for(layer: ConvLayer, activation: str | None, residual: bool = False) -> list[Family]:
    """The families that can run ``layer`` with ``activation`` (and a residual added before it), in the
    order of their untuned preference."""
    return [f for f in FAMILIES if f.applies(layer, activation) and (f.residual or not residual)]


def _interleave(lists: list[list]) -> list:
    """The families' candidates taken in turn (each family's first ones in the search's first round)."""
    out, i = [], 0
    while any(i < len(c) for c in lists):
        out += [c[i] for c in lists if i < len(c)]
        i += 1
    return out


class AutoConv2d:
    """A convolution layer on the fastest correct kernel for its shape and batch size.

    Args: w float32 (M, C/groups, KH, KW), b (M,) or None, on the backend; ``layer`` its ConvLayer
    (``ConvLayer.of``); ``activation`` None, "tanh", "relu" or "relu6" (what the chosen family fuses);
    ``residual``: y = act(conv(x) + b + residual), each call passing ``residual=`` an array of y's
    shape (a ResNet's skip connection, added in the chosen kernel's epilogue); ``families``: the
    names of the families the search may use (None: every one that can run the layer), e.g.
    ("implicit",) to time one family alone (its choice is cached apart from the whole search's).
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, residual: bool = False,
                 families: tuple[str, ...] | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        layer = ConvLayer(*layer).canonical()
        layer.check()
        check_activation(activation, ACTIVATIONS)
        check_conv_arguments(w, b, layer, residual, backend, xp)
        self.w, self.b, self.layer, self.activation, self.residual = w, b, layer, activation, bool(residual)
        self.families = families_for(layer, activation, self.residual)
        if families is not None:
            unknown = sorted(set(families) - {f.name for f in FAMILIES})
            if unknown:
                raise ValueError(f"no kernel family {unknown}: the families are {[f.name for f in FAMILIES]}")
            self.families = [f for f in self.families if f.name in families]
            if not self.families:
                raise ValueError(f"none of the families {list(families)} runs {layer.key} with activation "
                                 f"{activation!r}{' and a residual' if residual else ''}")
        self._kind = xp.ndarray
        self._x_shape = (layer.C, layer.H, layer.W)
        self._runners: dict[int, Runner] = {}
        self._choices: dict[int, dict] = {}

    def candidates(self, N: int) -> list[dict]:
        """Every family's candidates at a batch of N, {"family": name, ...}, interleaved, the untuned
        choice first."""
        per_family = [[{"family": f.name, **c} for c in f.candidates(self, N)] for f in self.families]
        return _interleave(per_family)

    def choice(self, N: int) -> dict:
        """The candidate a batch of N runs (chosen on first use)."""
        if N not in self._choices:
            self.plan(N)
        return self._choices[N]

    def make(self, config: dict) -> Runner:
        """The runner of one candidate: run(x, out=None) -> y."""
        family = next(f for f in self.families if f.name == config["family"])
        return family.make(self, {k: v for k, v in config.items() if k != "family"})

    def plan(self, N: int) -> Runner:
        runner = self._runners.get(N)
        if runner is None:
            configs = self.candidates(N)
            kernels = tuple(k for f in self.families for k in f.kernels)
            L = self.layer
            problem = autotune.Problem("conv2d_auto", kernels,
                                       f"{L.key}_N{N}_bias{int(self.b is not None)}_{self.activation}"
                                       f"{'_res' if self.residual else ''}",
                                       configs, lambda: _AutoBench(self, N))
            config = self._choices[N] = autotune.choose(problem)
            runner = self._runners[N] = self.make(config)
        return runner

    def __call__(self, x, out=None, *, residual=None):
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_input(x, self._x_shape, self.layer.key, self.backend)
        if (residual is None) == self.residual:      # the chosen kernel checks its shape and dtype
            raise ValueError("this layer adds a residual: pass residual= an array of y's shape" if self.residual
                             else "this layer was made without residual=True: it adds none")
        runner = self._runners.get(x.shape[0]) or self.plan(int(x.shape[0]))
        return runner(x, out, residual)


class _AutoBench:
    """The search's data: random x, a poisoned y, float64 samples of the right answer."""

    def __init__(self, conv: AutoConv2d, N: int):
        xp = backends.xp()
        L, self.conv = conv.layer, conv
        rng = xp.random.default_rng()
        self.x = rng.standard_normal((N, L.C, L.H, L.W), dtype=xp.float32)
        self.y = xp.empty((N, L.M) + L.out_hw, dtype=xp.float32)
        self.idx = sample_positions(xp, self.y.size)
        self.residual = rng.standard_normal(self.y.shape, dtype=xp.float32) if conv.residual else None
        self.ref, self.terms = conv_samples(xp, self.x, conv.w, conv.b, L, self.idx, conv.activation,
                                            residual=self.residual)
        self.tol = 4 * TOLERANCE["fp32"]

    def build(self, config: dict):
        runner = self.conv.make(config)
        prepare = getattr(runner, "prepare", None)
        if prepare is not None:
            prepare(int(self.x.shape[0]))   # compiled here, in the search's threads
        x, y, res = self.x, self.y, self.residual
        return lambda: runner(x, y, res)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, self.tol)
