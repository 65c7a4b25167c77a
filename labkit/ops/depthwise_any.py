"""Depthwise convolution of any geometry (labkit/kernels/depthwise_any.cu): one KH x KW filter a channel,
any stride, zero padding (wider than the kernel too) and dilation per axis, bias and activation (None,
ReLU, ReLU6; NaN kept, as in PyTorch) fused.

    layer = ConvLayer.of(64, 128, 128, 64, (5, 3), stride=(2, 1), pad=(4, 1), dilation=2, groups=64)
    dw = DepthwiseAnyConv2d(w, b, layer, activation="relu6")     # w (C, 1, KH, KW), b (C,) or None
    y = dw(x)                                                     # (N, 64, 128, 128) -> (N, 64, 64, 126)
    y = depthwise_any_conv2d(x, w, b, stride=(2, 1), pad=(4, 1), dilation=2, activation="relu6")

A block copies a tile of input rows (halo and zero padding included) of one or a few (n, c) planes into
shared memory once, and each thread computes a block of RY x RX outputs from registers (see the kernel
file).  The layer's geometry and the tile (``Tiling``) are compile-time constants of the kernel: one
module per geometry and tile; batch and channels are arguments.

The tiling: the one given, else on a GPU the autotuner's (labkit.autotune) among ``tiling_candidates``,
``default_tiling`` first (what runs untuned, and on the CPU executor).  For a chooser across kernel
families, a layer object lists its candidates as JSON-able configurations (``configs``) and builds any of
them as a launch on given buffers (``build_launch``).
"""
from __future__ import annotations

import functools
from collections import Counter
from dataclasses import asdict, dataclass, replace

from .. import autotune, backends
from ..backends.limits import MAX_GRID, MAX_THREADS_PER_BLOCK, SHARED_MEM_PER_BLOCK, WARP_SIZE
from ..checks import array_module, array_type, check_activation, check_array, check_int, check_shape, fast_input, output
from ..loader import load
from ..reference.samples import conv_samples, sample_positions
from ..shapes import ConvLayer
from .plans import PlanCache, cdiv, ints, sampled_mismatch

__all__ = ["DepthwiseAnyConv2d", "depthwise_any_conv2d", "Tiling", "default_tiling", "tiling_candidates",
           "floor_bytes", "depthwise_any_layer", "module_defines", "config_of", "tiling_of", "check_layer",
           "ACTIVATIONS", "FAMILY", "TOLERANCE", "REGISTER_BUDGET"]

FAMILY = "depthwise_any"                 # the kernel file, and the autotuner's family
ACTIVATIONS = (None, "relu", "relu6")    # depthwise_any.cu's activate
TOLERANCE = 1e-4                         # the autotuner's check: sampled outputs against float64, over their terms
# Values a thread keeps in registers (sums, a row segment, the weights), at most: past ~160 the compiler
# spills to local memory (255 registers a thread, addresses and indices besides).
REGISTER_BUDGET = 160
INDEX_LIMIT = 2**31                      # offsets within a plane are 32-bit
_PLANS = PlanCache()                     # plans by (backend, layer, tiling, N), shared by every layer object
_CHOSEN = PlanCache()                    # the tiling chosen per (layer, N), for the one-call function's layers too


@dataclass(frozen=True)
class Tiling:
    """depthwise_any.cu's compile-time tile: each thread computes ``ry`` output rows x ``rx``
    neighbouring output columns; a block has ``tx`` x ``ty`` threads per plane (along the width and
    the height) and ``planes`` (n, c) planes, so its tile is ty*ry rows x tx*rx columns of each;
    ``wshared``: the weights read from shared memory instead of registers (large kernels)."""
    rx: int = 4
    ry: int = 4
    tx: int = 16
    ty: int = 16
    planes: int = 1
    wshared: bool = False

    @property
    def threads(self) -> int:
        return self.tx * self.ty * self.planes

    @property
    def tile_hw(self) -> tuple[int, int]:
        """Output rows and columns of a block's tile, per plane."""
        return self.ty * self.ry, self.tx * self.rx

    def vec(self, layer: ConvLayer) -> int:
        """Floats a shared-memory read of a thread's row segment takes at once (the kernel's VEC)."""
        step = self.rx * layer.stride_hw[1]
        return 4 if step % 4 == 0 else 2 if step % 2 == 0 else 1

    def segment(self, layer: ConvLayer) -> int:
        """Floats of a thread's row segment (the kernel's SEG): its rx windows' columns, in whole vectors."""
        (_, kw), (_, sw), (_, dw) = layer.kernel_hw, layer.stride_hw, layer.dilation_hw
        v = self.vec(layer)
        return cdiv((self.rx - 1) * sw + (kw - 1) * dw + 1, v) * v

    def input_hw(self, layer: ConvLayer) -> tuple[int, int]:
        """Rows and columns of a block's input tile of one plane (the kernel's IN_ROWS, IN_COLS)."""
        (kh, _), (sh, sw), (dh, _) = layer.kernel_hw, layer.stride_hw, layer.dilation_hw
        return (self.ty * self.ry - 1) * sh + (kh - 1) * dh + 1, (self.tx - 1) * self.rx * sw + self.segment(layer)

    def layout(self, layer: ConvLayer) -> tuple[int, int]:
        """(pitch, plane stride) in floats of the input tiles in shared memory, the fewest bank
        conflicts first (DWA_PITCH, DWA_PS)."""
        return _layout(self, layer)

    def shared_bytes(self, layer: ConvLayer) -> int:
        ps = self.layout(layer)[1]
        return 4 * self.planes * (ps + (layer.taps if self.wshared else 0))

    def registers(self, layer: ConvLayer) -> int:
        """Values a thread keeps in registers: its sums, the columns of a row segment its windows use
        (with dilation, fewer than the segment: the compiler drops the others), the weights (unless
        shared)."""
        (_, kw), (_, sw), (_, dw) = layer.kernel_hw, layer.stride_hw, layer.dilation_hw
        used = len({j * sw + k * dw for j in range(self.rx) for k in range(kw)})
        return self.rx * self.ry + used + (0 if self.wshared else layer.taps)

    def blocks(self, layer: ConvLayer, planes: int) -> int:
        """The launch's blocks for ``planes`` (n, c) planes (N * C)."""
        (th, tw), (ho, wo) = self.tile_hw, layer.out_hw
        return cdiv(planes, self.planes) * cdiv(ho, th) * cdiv(wo, tw)

    def defines(self) -> dict:
        return {"DWA_RX": self.rx, "DWA_RY": self.ry, "DWA_TX": self.tx, "DWA_TY": self.ty,
                "DWA_PLANES": self.planes, "DWA_WSHARED": int(self.wshared)}

    def check(self, layer: ConvLayer) -> None:
        """ValueError, naming the fix, for a tile the kernel cannot run on ``layer`` (or would run with
        threads that have nothing to do)."""
        for name in ("rx", "ry", "tx", "ty", "planes"):
            check_int(getattr(self, name), name)
        if not isinstance(self.wshared, bool):
            raise ValueError(f"wshared must be True or False, got {self.wshared!r}")
        if self.threads > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"tx * ty * planes = {self.threads} threads a block, over {MAX_THREADS_PER_BLOCK}: "
                             f"fewer threads or planes: {self}")
        ho, wo = layer.out_hw
        if self.tx > cdiv(wo, self.rx) or self.ty > cdiv(ho, self.ry):
            raise ValueError(f"{self} has threads with no output in a {ho}x{wo} output: at most tx = "
                             f"{cdiv(wo, self.rx)} and ty = {cdiv(ho, self.ry)} for rx = {self.rx}, ry = {self.ry}")
        if self.registers(layer) > REGISTER_BUDGET:
            raise ValueError(f"{self} keeps {self.registers(layer)} values a thread in registers for a "
                             f"{layer.kernel_hw[0]}x{layer.kernel_hw[1]} kernel (over {REGISTER_BUDGET}: they would "
                             f"spill): smaller rx or ry" + ("" if self.wshared else ", or wshared=True"))
        if self.shared_bytes(layer) > SHARED_MEM_PER_BLOCK:
            raise ValueError(f"{self} needs {self.shared_bytes(layer)} bytes of shared memory for {layer.key}, over "
                             f"{SHARED_MEM_PER_BLOCK // 1024} KiB: fewer planes, or a smaller tile (ty*ry rows, "
                             "tx*rx columns)")


def _lane_starts(t: Tiling, layer: ConvLayer, pitch: int, ps: int) -> list[int]:
    """The first warp's shared-memory addresses (floats) of its first segment read: lane l is thread l,
    plane l // (tx*ty), row (l // tx) % ty, column l % tx of the tile's threads."""
    sh, sw = layer.stride_hw
    per = t.tx * t.ty
    return [(lane // per) * ps + (lane // t.tx % t.ty) * t.ry * sh * pitch + (lane % t.tx) * t.rx * sw
            for lane in range(min(WARP_SIZE, t.threads))]


def wavefronts(starts: list[int], vec: int) -> int:
    """Shared-memory wavefronts of one warp-wide read of ``vec`` floats a lane from ``starts``: the lanes
    go in phases of 32 / vec, and in each a bank serves one distinct 4-byte word at a time (lanes on
    one word share it).  32 lanes conflict-free take ``vec`` wavefronts."""
    phase, total = WARP_SIZE // vec, 0
    for first in range(0, len(starts), phase):
        words = {a + k for a in starts[first:first + phase] for k in range(vec)}
        total += max(Counter(word % 32 for word in words).values())
    return total


@functools.lru_cache(maxsize=4096)
def _layout(t: Tiling, layer: ConvLayer) -> tuple[int, int]:
    """The pitch (the tile's columns, plus a skew of 0-31 floats), then the plane stride (a plane's
    tile, plus a skew), each the smallest with the fewest wavefronts in the first warp's reads; both
    in whole vectors, so that every segment stays aligned."""
    vec = t.vec(layer)
    rows, cols = t.input_hw(layer)
    cost = lambda pitch, ps: wavefronts(_lane_starts(t, layer, pitch, ps), vec)   # noqa: E731
    first = cdiv(cols, vec) * vec
    pitch = min(range(first, first + 32, vec), key=lambda p: (cost(p, rows * p), p))
    ps = min(range(rows * pitch, rows * pitch + 32, vec), key=lambda s: (cost(pitch, s), s))
    return pitch, ps


def _fits(t: Tiling, layer: ConvLayer) -> bool:
    try:
        t.check(layer)
    except ValueError:
        return False
    return True


def _shaped(layer: ConvLayer, rx: int, ry: int, tx: int, threads: int, wshared: bool,
            planes_available: int | None) -> Tiling:
    """A tile of about ``threads`` threads: rx x ry outputs a thread and tx threads along the width, each
    cut to the output (no thread without outputs); as many rows of threads as make ``threads`` (or
    cover the output), then as many planes (at most ``planes_available``)."""
    ho, wo = layer.out_hw
    rx, ry = min(rx, wo), min(ry, ho)
    tx = min(tx, cdiv(wo, rx))
    ty = min(cdiv(ho, ry), max(1, threads // tx))
    planes = max(1, threads // (tx * ty))
    if planes_available is not None:
        planes = max(1, min(planes, planes_available))
    return Tiling(rx, ry, tx, ty, planes, wshared)


def default_tiling(layer: ConvLayer, planes_available: int | None = None) -> Tiling:
    """4 x 4 outputs a thread, 16 threads along the width (64 columns a tile: float4 stores, whole
    128-byte lines), 256 threads a block for kernels up to 5x5 and 128 beyond (more blocks per SM, so
    that some load while others compute), the weights in registers up to 7x7; small planes several a
    block (at most ``planes_available``).  Where that does not fit shared memory or registers: fewer
    planes, then fewer threads, then fewer outputs a thread.  ValueError where nothing fits."""
    taps = layer.taps
    t = _shaped(layer, 4, 4, 16, 256 if taps <= 25 else 128, taps > 49, planes_available)
    while not _fits(t, layer):
        if t.planes > 1:
            t = replace(t, planes=t.planes // 2)
        elif t.ty > 1:
            t = replace(t, ty=cdiv(t.ty, 2))
        elif t.tx > 1:
            t = replace(t, tx=cdiv(t.tx, 2))
        elif t.ry > 1:
            t = replace(t, ry=t.ry // 2)
        elif t.rx > 1:
            t = replace(t, rx=t.rx // 2)
        elif not t.wshared:
            t = replace(t, wshared=True)
        else:
            try:
                t.check(layer)
            except ValueError as e:
                raise ValueError(f"no tile of depthwise_any.cu fits {layer.key}, not even one output a thread: "
                                 f"{e}; use labkit.ops.implicit.ImplicitConv2d") from None
    return t


def tiling_candidates(layer: ConvLayer, N: int) -> list[Tiling]:
    """The tilings the autotuner tries on a layer at batch N, ``default_tiling`` first, then the likelier
    winners first (a search with a small budget times only its first round): 4, 2 or 1 output columns
    a thread (4 and 2: vector reads and stores; 1: lanes on neighbouring columns, conflict-free scalar
    reads) with 8-16, 16-32 or 32 threads along the width; 4, 2 or 8 rows a thread; blocks of about
    256 or 128 threads (small planes several a block: smaller tiles make more blocks, fewer idle SMs in
    the last wave); kernels past 5x5 with the weights in registers and in shared memory.  Only valid
    ones, each once."""
    planes = N * layer.M
    out = [default_tiling(layer, planes)]
    for rx, widths in ((4, (16, 8)), (2, (32, 16)), (1, (32,))):
        for ry in (4, 2, 8):
            for threads in (256, 128):
                for tx in widths:
                    for wshared in (False, True) if layer.taps > 25 else (False,):
                        t = _shaped(layer, rx, ry, tx, threads, wshared, planes)
                        if t not in out and _fits(t, layer):
                            out.append(t)
    return out


def config_of(tiling: Tiling) -> dict:
    """A tiling as the autotuner's JSON-able configuration."""
    return {"tiling": asdict(tiling)}


def tiling_of(config: dict) -> Tiling:
    return Tiling(**config["tiling"])


def floor_bytes(layer: ConvLayer, N: int) -> int:
    """The least memory traffic of the layer at batch N: x read once, y written once (weights aside)."""
    ho, wo = layer.out_hw
    return 4 * N * (layer.C * layer.H * layer.W + layer.M * ho * wo)


def depthwise_any_layer(C: int, H: int, W: int, kernel, stride=1, pad=0, dilation=1) -> ConvLayer:
    """The ConvLayer of a depthwise convolution: C channels in and out, groups = C; kernel, stride, pad,
    dilation each an int or an (h, w) pair."""
    return ConvLayer.of(C, H, W, C, kernel, stride, pad, dilation, C)


def check_layer(layer) -> ConvLayer:
    """``layer`` as a canonical ConvLayer that depthwise_any.cu runs, or ValueError naming the fix."""
    layer = ConvLayer(*layer).canonical()
    layer.check()
    if not (layer.groups == layer.C and layer.M % layer.C == 0):
        raise ValueError(f"depthwise_any.cu runs depthwise layers (groups = C, M a multiple of C: each channel's "
                         f"M/C filters of its own), got "
                         f"C={layer.C}, M={layer.M}, groups={layer.groups}: use labkit.ops.implicit.ImplicitConv2d "
                         "for other convolutions")
    ho, wo = layer.out_hw
    if max(layer.H * layer.W, ho * wo) >= INDEX_LIMIT:
        raise ValueError(f"a plane of {layer.key} has 2**31 elements or more (the kernel's offsets within a "
                         "plane are 32-bit): split the plane")
    return layer


def module_defines(layer: ConvLayer, tiling: Tiling) -> dict:
    """depthwise_any.cu's compile-time parameters: the layer's geometry, the tile, its shared layout."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = layer.kernel_hw, layer.stride_hw, layer.pad_hw, layer.dilation_hw
    pitch, ps = tiling.layout(layer)
    return {"DWA_H": layer.H, "DWA_W": layer.W, "DWA_KH": kh, "DWA_KW": kw, "DWA_SH": sh, "DWA_SW": sw,
            "DWA_PH": ph, "DWA_PW": pw, "DWA_DH": dh, "DWA_DW": dw, **tiling.defines(),
            "DWA_PITCH": pitch, "DWA_PS": ps, **({"DWA_MULT": layer.M // layer.C} if layer.M > layer.C else {})}


@dataclass(frozen=True)
class _Plan:
    """One layer at one batch size, weights aside: the function, its launch, its int32 arguments."""
    tiling: Tiling
    fn: object
    grid: tuple
    block: tuple
    shared: int
    planes: int          # N * M: output planes
    C: int               # M: output channels (filters)
    out_shape: tuple

    def bind(self, taps, b, has_bias: int, act: int):
        """``launch(x, y)`` with the weights (C, KH*KW), the bias (read only if has_bias) and the
        activation fixed."""
        args = (None, taps, b, None) + ints(self.planes, self.C, has_bias, act)
        return self.fn.launcher(self.grid, self.block, args, self.shared)


def _make_plan(layer: ConvLayer, tiling: Tiling, N: int) -> _Plan:
    planes = N * layer.M
    if planes >= INDEX_LIMIT:
        raise ValueError(f"batch {N} makes {planes} planes (N * M), over the kernel's int32 count: split the batch")
    blocks = tiling.blocks(layer, planes)
    if blocks > MAX_GRID[0]:
        raise ValueError(f"batch {N} needs {blocks} blocks of {tiling} (at most {MAX_GRID[0]}): split the batch")
    fn = load(FAMILY, defines=module_defines(layer, tiling)).get_function("depthwise_any")
    return _Plan(tiling, fn, (blocks,), (tiling.threads,), tiling.shared_bytes(layer), planes, layer.M,
                 (N, layer.M) + layer.out_hw)


class DepthwiseAnyConv2d:
    """A depthwise layer of any geometry, its weights placed once; per batch size a plan (function,
    grid, block, shared memory) made once; a call checks x cheaply and launches.

    Args:
        w: float32 (C, 1, KH, KW) on the backend;  b: float32 (C,) or None.
        layer: its ``ConvLayer`` (groups = C = M: ``depthwise_any_layer(C, H, W, kernel, ...)``).
        activation: None, "relu" or "relu6", fused (NaN stays NaN).
        tiling: a ``Tiling`` for every batch size; None: the autotuner's per batch size on a GPU,
            ``default_tiling`` on the CPU executor.
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, tiling: Tiling | None = None):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        self.layer = layer = check_layer(layer)
        self._act = check_activation(activation, ACTIVATIONS)
        if tiling is None:
            default_tiling(layer)        # ValueError now, before anything compiles, where no tile fits
        elif not isinstance(tiling, Tiling):
            raise TypeError(f"tiling must be a labkit.ops.depthwise_any.Tiling, got {type(tiling).__name__}")
        else:
            tiling.check(layer)
        C, M, (kh, kw) = layer.C, layer.M, layer.kernel_hw
        check_array(w, "w", "(M, 1, KH, KW)", 4, backend, xp)
        check_shape(w, "w", (M, 1, kh, kw), "M, 1, KH, KW: M/C filters a channel")
        if b is not None:
            check_array(b, "b", "(M,)", 1, backend, xp)
            check_shape(b, "b", (M,), "M")
        self.activation, self.tiling = activation, tiling
        self._w, self.b = w, b
        self._taps = w.reshape(M, kh * kw)      # a view: the kernel reads w as (M, KH*KW)
        self._kind = xp.ndarray
        self._x_shape, self._y_shape = (C, layer.H, layer.W), (M,) + layer.out_hw
        self._plans: dict[int, tuple] = {}

    # --- plans --------------------------------------------------------------------------------------
    def plan(self, N: int) -> _Plan:
        """The plan of a batch of N, made once: tiling, function, grid, block, shared memory."""
        return self._entry(N)[0]

    def _entry(self, N: int) -> tuple:
        entry = self._plans.get(N)
        if entry is None:
            N = check_int(N, "N")
            tiling = self.tiling if self.tiling is not None else \
                _CHOSEN.get_or_make((self.layer, N), lambda: self._tuned(N))
            plan = self._plan_of(tiling, N)
            entry = self._plans[N] = (plan, self._bind(plan))
        return entry

    def _plan_of(self, tiling: Tiling, N: int) -> _Plan:
        return _PLANS.get_or_make((self.backend, self.layer, tiling, N), lambda: _make_plan(self.layer, tiling, N))

    def _bind(self, plan: _Plan):
        return plan.bind(self._taps, self._taps if self.b is None else self.b, int(self.b is not None), self._act)

    def candidates(self, N: int) -> list[Tiling]:
        """The tilings the autotuner tries at a batch of N (the given tiling alone, if one was)."""
        return [self.tiling] if self.tiling is not None else tiling_candidates(self.layer, N)

    def configs(self, N: int) -> list[dict]:
        """``candidates(N)`` as JSON-able configurations (``config_of``), what runs untuned first."""
        return [config_of(t) for t in self.candidates(N)]

    def _tuned(self, N: int) -> Tiling:
        """The autotuner's tiling for a batch of N (labkit.autotune; on the CPU executor the first
        candidate, ``default_tiling``)."""
        cands = tiling_candidates(self.layer, N)
        configs = [config_of(t) for t in cands]
        problem = autotune.Problem(FAMILY, (FAMILY,), f"{self.layer.key}_N{N}", configs,
                                   lambda: _DepthwiseAnyBench(self, N))
        return cands[configs.index(autotune.choose(problem))]

    def launcher(self, tiling: Tiling, N: int):
        """``launch(x, y)`` of ``tiling`` at a batch of N with this layer's weights, bias and activation:
        no checks of x and y (a caller that made them checks them once: ``build_launch``)."""
        if not isinstance(tiling, Tiling):
            raise TypeError(f"tiling must be a labkit.ops.depthwise_any.Tiling, got {type(tiling).__name__}")
        tiling.check(self.layer)
        return self._bind(self._plan_of(tiling, check_int(N, "N")))

    def build_launch(self, tiling: Tiling | dict, N: int, x, y):
        """A launch() of ``tiling`` (or its configuration) on x (N, C, H, W) and y (N, C, Ho, Wo), both
        checked now: what a search times (labkit.autotune.Bench.build)."""
        t = tiling_of(tiling) if isinstance(tiling, dict) else tiling
        self._check_x(x)
        check_shape(x, "x", (N,) + self._x_shape, "N, C, H, W")
        output(y, (N,) + self._y_shape, "NCHW", (x, self._w, self.b), backend=self.backend)
        launch = self.launcher(t, N)
        return lambda: launch(x, y)

    # --- calls --------------------------------------------------------------------------------------
    def _check_x(self, x) -> None:
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            check_array(x, "x", "NCHW", 4, self.backend)
            L = self.layer
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {L.C}, {L.H}, {L.W}) for this layer, got {tuple(x.shape)}")

    def __call__(self, x, out=None):
        """y = act(depthwise(x) + b) of float32 (N, C, H, W) x."""
        self._check_x(x)
        y = output(out, (x.shape[0],) + self._y_shape, "NCHW", (x, self._w, self.b), backend=self.backend)
        launch = (self._plans.get(x.shape[0]) or self._entry(int(x.shape[0])))[1]
        launch(x, y)
        return y


class _DepthwiseAnyBench:
    """The autotuner's data for one layer at a batch of N (labkit.autotune.search.Bench): random x, an
    output to poison, float64 samples of the right answer."""

    def __init__(self, conv: DepthwiseAnyConv2d, N: int):
        xp = backends.xp()
        L, self.conv, self.N = conv.layer, conv, N
        self.x = xp.random.default_rng().standard_normal((N, L.C, L.H, L.W), dtype=xp.float32)
        self.y = xp.empty((N, L.M) + L.out_hw, dtype=xp.float32)    # M = C * the channel multiplier
        self.idx = sample_positions(xp, self.y.size)
        self.ref, self.terms = conv_samples(xp, self.x, conv._w, conv.b, L, self.idx, conv.activation)

    def build(self, config: dict):
        return self.conv.build_launch(tiling_of(config), self.N, self.x, self.y)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, TOLERANCE)


def depthwise_any_conv2d(x, w, b=None, *, stride=1, pad=0, dilation=1, activation: str | None = None,
                         tiling: Tiling | None = None, out=None):
    """y = act(depthwise(x, w) + b): x float32 (N, C, H, W), w (C, 1, KH, KW), b (C,) or None; stride,
    pad, dilation each an int or an (h, w) pair.  The plans are shared with the layer objects of the
    same geometry; keep a ``DepthwiseAnyConv2d`` to run a layer many times."""
    backend = backends.current()
    kind = array_type(backend)
    if not (fast_input(x, kind) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    if not (fast_input(w, kind) and w.ndim == 4):
        check_array(w, "w", "(C, 1, KH, KW)", 4, backend)
    _, C, H, W = (int(v) for v in x.shape)
    if tuple(w.shape[:2]) != (C, 1):
        raise ValueError(f"w must be (C, 1, KH, KW) with C = {C} (x's channels; depthwise: groups = C, one "
                         f"filter a channel), got {tuple(w.shape)}")
    layer = depthwise_any_layer(C, H, W, (int(w.shape[2]), int(w.shape[3])), stride, pad, dilation)
    return DepthwiseAnyConv2d(w, b, layer, activation=activation, tiling=tiling)(x, out=out)
