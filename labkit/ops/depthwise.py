"""Depthwise 3x3 convolution (labkit/kernels/depthwise.cu): MobileNetV2's per-channel filters, stride 1
or 2, zero padding 1, bias and activation (None, ReLU, ReLU6) fused.

    layer = ConvLayer(C=144, H=56, W=56, M=144, K=3, stride=2, pad=1, groups=144)
    dw = DepthwiseConv2d(w, b, layer, activation="relu6")      # w (C, 1, 3, 3), b (C,)
    y = dw(x)                                                   # (N, 144, 56, 56) -> (N, 144, 28, 28)
    y = depthwise_conv2d(x, w, b, stride=2, activation="relu6") # the same in one call

Two rungs: ``variant="naive"`` (one thread per output, 9 global loads) and ``"tiled"`` (a tile of
input rows in shared memory, the 9 weights in registers, a sliding window down each column).  The
plane's geometry is a compile-time constant of the kernel (``Tiling``), channels and batch are
arguments: one module per plane size and tiling serves every layer of that size.  The tiling is
this GPU's tuned one for the layer (``labkit/tuned/depthwise.json``, written by
``benchmarks/tune_depthwise.py``), else ``default_tiling``.

A layer's bias goes to constant memory once, as in the seed (``bias_memory="constant"``, the
default): a run of the module's ``dw_bias`` array of its own (labkit.ops.constant_slots), or global
memory when no run is free (``layer.bias_memory`` says which).  ``depthwise_conv2d``, which makes a
layer per call, reads the bias from global memory.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import zip_longest

from .. import autotune, backends
from ..backends.limits import SHARED_MEM_PER_BLOCK
from ..checks import (BASIC_ACTIVATIONS, array_module, array_type, check_activation, check_array, check_int,
                      fast_input, output, to_numpy)
from ..loader import load
from ..shapes import ConvLayer
from ..tuned import DEPTHWISE, lookup
from .constant_slots import slots_of
from ..reference.samples import conv_samples, sample_positions
from .plans import PlanCache, cdiv, ints, sampled_mismatch

__all__ = ["DepthwiseConv2d", "depthwise_conv2d", "Tiling", "default_tiling", "tiling_for", "tiling_candidates", "depthwise_layer",
           "VARIANTS", "ACTIVATIONS", "BIAS_MEMORIES", "NAIVE_THREADS", "floor_bytes"]

VARIANTS = ("naive", "tiled")
ACTIVATIONS = tuple(a for a in BASIC_ACTIVATIONS if a != "tanh") + ("relu6",)   # depthwise.cu's activate
BIAS_MEMORIES = ("constant", "global")
NAIVE_THREADS = 256
_PLANS = PlanCache()


@dataclass(frozen=True)
class Tiling:
    """The tiled rung's compile-time tile: ``rows`` output rows of ``planes`` planes per block, each
    thread a column of ``rpt`` of them; ``threads`` per block; ``stage`` (whole planes only): the
    outputs gathered in shared memory and stored as one flat run of float4s.  ``by_rows``: the
    small-plane kernel instead (depthwise_planes: whole planes, copied unpadded, a thread per output
    row; planes up to 32x32, ``rows`` = the output's rows, ``rpt`` = 1, ``threads`` = planes * rows
    for a row each)."""
    rows: int
    planes: int
    rpt: int
    threads: int
    stage: bool = False
    by_rows: bool = False

    @property
    def kernel(self) -> str:
        return "depthwise_planes" if self.by_rows else "depthwise_tiled"

    def staged(self, layer: ConvLayer) -> bool:
        return bool(self.stage) and self.rows == layer.out_hw[0]

    def shared_bytes(self, layer: ConvLayer) -> int:
        ho, wo = layer.out_hw
        if self.by_rows:
            return 4 * (cdiv(self.planes * layer.H * layer.W, 4) * 4 + self.planes * ho * wo)
        tiles = self.planes * (((self.rows - 1) * layer.stride + 3) * (layer.W + 2) + 31)   # + the skew
        return 4 * (cdiv(tiles, 4) * 4 + (self.planes * ho * wo if self.staged(layer) else 0))

    def check(self, layer: ConvLayer) -> None:
        ho = layer.out_hw[0]
        for name in ("rows", "planes", "rpt", "threads"):
            check_int(getattr(self, name), name)
        if not self.rpt <= self.rows <= ho:
            raise ValueError(f"need 1 <= rpt <= rows <= {ho} (the output's rows): {self}")
        if not (isinstance(self.stage, bool) and isinstance(self.by_rows, bool)):
            raise ValueError(f"stage and by_rows must be True or False: {self}")
        if self.by_rows and not (self.rows == ho and self.rpt == 1 and layer.H <= 32 and layer.W <= 32):
            raise ValueError(f"by_rows takes whole planes of at most 32x32 (rows = {ho}) and rpt = 1: {self}")
        if self.threads > 1024 or self.threads % self.planes:
            raise ValueError(f"threads must be at most 1024 and a multiple of planes: {self}")
        if self.shared_bytes(layer) > SHARED_MEM_PER_BLOCK:
            raise ValueError(f"{self} needs {self.shared_bytes(layer)} bytes of shared memory for "
                             f"{layer.W}-wide planes, over {SHARED_MEM_PER_BLOCK // 1024} KiB: fewer rows or planes")

    def defines(self) -> dict:
        return {"DW_ROWS": self.rows, "DW_PLANES": self.planes, "DW_RPT": self.rpt, "DW_THREADS": self.threads,
                "DW_STAGE": int(self.stage)}

    def capped(self, planes_available: int) -> "Tiling":
        """The same tile with at most ``planes_available`` planes a block (a batch with fewer planes)."""
        if self.planes <= planes_available:
            return self
        planes = max(1, planes_available)
        return Tiling(self.rows, planes, self.rpt, self.threads // self.planes * planes, self.stage, self.by_rows)


def default_tiling(layer: ConvLayer, planes_available: int | None = None) -> Tiling:
    """A tile of about 7-8 outputs per thread and ~224-256 threads: whole planes up to 32 rows (16-row
    strips of taller ones), one thread per column of ``rpt`` rows, as many planes per block as fill
    256 threads (fewer where the batch has fewer planes, or shared memory runs out)."""
    ho, wo = layer.out_hw
    rows = ho if ho <= 32 else 16
    rpt = cdiv(rows, cdiv(rows, 8))
    per_plane = min(1024, wo * cdiv(rows, rpt))
    planes = max(1, 256 // per_plane)
    if planes_available is not None:
        planes = max(1, min(planes, planes_available))
    while planes > 1 and Tiling(rows, planes, rpt, planes * per_plane).shared_bytes(layer) > SHARED_MEM_PER_BLOCK:
        planes //= 2
    t = Tiling(rows, planes, rpt, planes * per_plane)
    while t.shared_bytes(layer) > SHARED_MEM_PER_BLOCK and t.rows > 1:   # very wide planes: shorter strips
        rows = max(1, t.rows // 2)
        t = Tiling(rows, 1, min(t.rpt, rows), min(1024, wo * cdiv(rows, min(t.rpt, rows))))
    return t


def tiling_for(layer: ConvLayer, planes_available: int | None = None, device_name: str | None = None) -> Tiling:
    """This GPU's tuned tiling of the layer (capped to the planes there are), else default_tiling."""
    entry = lookup(DEPTHWISE, layer.key, device_name)
    if entry:
        t = Tiling(*(int(entry[k]) for k in ("rows", "planes", "rpt", "threads")), bool(entry.get("stage", False)),
                   bool(entry.get("by_rows", False)))
        return t.capped(planes_available) if planes_available is not None else t
    return default_tiling(layer, planes_available)


def tiling_candidates(layer: ConvLayer, N: int) -> list[Tiling]:
    """The tilings a sweep tries on a layer at batch N: whole planes (up to 32 rows) or strips of 16, 8
    or 4 rows; 1, 2, 4 or 8 rows a thread (or the whole strip); 1-64 planes a block; 64-1024 threads;
    whole-plane tiles also with their outputs staged in shared memory; planes up to 32x32 also by
    rows (depthwise_planes); every one within shared memory and the layer's planes; and
    default_tiling's, first.  The row-per-thread tilings are interleaved with the others, not put
    last: a search with a small budget (several layers searching at once, their compiles sharing the
    host's cores) times the front of the list, and on 14x14 and 7x7 planes they win (an H200 at batch
    256: MobileNetV2's features.8 0.044 ms by rows against 0.062 for the tiling a contended search had
    reached)."""
    ho, wo = layer.out_hw
    first = default_tiling(layer, N * layer.C)
    out = [first]
    for rows in sorted({r for r in (ho if ho <= 32 else 0, 16, 8, 4) if 1 <= r <= ho}):
        for rpt in sorted({r for r in (1, 2, 4, 8, rows) if r <= rows}):
            per_plane = wo * cdiv(rows, rpt)
            for planes in (1, 2, 4, 8, 16, 32, 64):
                for stage in (False, True) if rows == ho else (False,):
                    t = Tiling(rows, planes, rpt, planes * per_plane, stage)
                    if t not in out and 64 <= t.threads <= 1024 and planes <= N * layer.C and \
                            t.shared_bytes(layer) <= SHARED_MEM_PER_BLOCK:
                        out.append(t)
    rows = []
    if ho <= 32 and layer.W <= 32:       # small planes: the row-per-thread kernel too
        for planes in (2, 4, 8, 16, 32, 64):
            t = Tiling(ho, planes, 1, planes * ho, by_rows=True)
            if t != first and 64 <= t.threads <= 1024 and planes <= N * layer.C and \
                    t.shared_bytes(layer) <= SHARED_MEM_PER_BLOCK:
                rows.append(t)
    tiles = out[1:]
    mixed = [t for pair in zip_longest(rows, tiles) for t in pair if t is not None]
    return [first] + mixed


def depthwise_layer(C: int, H: int, W: int, stride: int = 1) -> ConvLayer:
    """The ConvLayer of a depthwise 3x3, padding 1: C channels in and out, groups = C."""
    return ConvLayer(C, H, W, C, 3, stride, 1, C)


def floor_bytes(layer: ConvLayer, N: int) -> int:
    """The least memory traffic of the layer: x read once, y written once (weights aside)."""
    ho, wo = layer.out_hw
    return 4 * N * layer.C * (layer.H * layer.W + ho * wo)


def _check_layer(layer) -> ConvLayer:
    layer = ConvLayer(*layer)
    layer.check()
    layer.require_square("depthwise.cu")
    if not (layer.groups == layer.C == layer.M and layer.K == 3 and layer.pad == 1 and layer.stride in (1, 2)):
        raise ValueError(f"depthwise.cu runs 3x3 depthwise layers (groups = C = M, K=3, pad=1, stride 1 or 2), "
                         f"got {layer}: use labkit.layers.ImplicitConv2d for other convolutions")
    return layer


class _Plan:
    def __init__(self, layer: ConvLayer, variant: str, tiling: Tiling | None, N: int):
        ho, wo = layer.out_hw
        defines = {"DW_H": layer.H, "DW_W": layer.W, "DW_S": layer.stride}
        NC = N * layer.C
        if NC * max(layer.H * layer.W, ho * wo) >= 2**31:
            raise ValueError(f"batch {N} makes x or y over 2**31 elements: split the batch")
        if variant == "naive":
            # The module is the tiled rung's for this plane (the same defines): one compile serves both.
            defines.update(tiling_for(layer, NC).defines())
            self.module = load("depthwise", defines=defines)
            fn = self.module.get_function("depthwise_naive")
            self.grid, self.block, self.shared = (cdiv(NC * ho * wo, NAIVE_THREADS),), (NAIVE_THREADS,), 0
        else:
            tiling = tiling or tiling_for(layer, NC)
            tiling.check(layer)
            defines.update(tiling.defines())
            self.module = load("depthwise", defines=defines)
            fn = self.module.get_function(tiling.kernel)
            self.grid = (cdiv(ho, tiling.rows), cdiv(NC, tiling.planes))
            if tiling.by_rows:
                self.grid = (cdiv(NC, tiling.planes),)
            elif self.grid[1] > 65535:
                raise ValueError(f"batch {N} needs {self.grid[1]} blocks along y (at most 65535): split the batch")
            self.block, self.shared = (tiling.threads,), tiling.shared_bytes(layer)
        self.fn, self.NC, self.C, self.tiling = fn, NC, layer.C, tiling
        self.out_shape = (N, layer.C, ho, wo)

    def bind(self, w, b, has_bias: int, act: int, bias_at: int):
        """``launch(x, y)`` with the layer's weights, bias (has_bias 0 none, 1 b, 2 dw_bias[bias_at:])
        and activation fixed."""
        tail = ints(self.NC, self.C, has_bias, act, bias_at)
        return self.fn.launcher(self.grid, self.block, (None, w, b, None) + tail, self.shared)


class DepthwiseConv2d:
    """A depthwise 3x3 layer, its weights placed once; per batch size a plan (function, grid, block,
    shared memory) made once; a call checks x and launches.

    Args:
        w: float32 (C, 1, 3, 3) on the backend;  b: float32 (C,) or None.
        layer: its ``ConvLayer`` (``depthwise_layer(C, H, W, stride)``).
        activation: None, "relu" or "relu6", fused.
        variant: "tiled" (default) or "naive".
        tiling: a ``Tiling`` instead of ``tiling_for``'s (a sweep passes each one).
        bias_memory: "constant" (default: a run of the module's constant array, uploaded once; global
            memory when none is free) or "global".  ``self.bias_memory`` says where it went (once a
            plan is made).
    """

    def __init__(self, w, b, layer: ConvLayer, *, activation: str | None = None, variant: str = "tiled",
                 tiling: Tiling | None = None, bias_memory: str = "constant"):
        self.backend = backend = backends.current()
        xp = array_module(backend)
        self.layer = layer = _check_layer(layer)
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
        if tiling is not None:
            if not isinstance(tiling, Tiling):
                raise TypeError(f"tiling must be a labkit.ops.depthwise.Tiling, got {type(tiling).__name__}")
            tiling.check(layer)
        self._act = check_activation(activation, ACTIVATIONS)
        check_array(w, "w", "(C, 1, 3, 3)", 4, backend, xp)
        if tuple(w.shape) != (layer.C, 1, 3, 3):
            raise ValueError(f"w must have shape ({layer.C}, 1, 3, 3) (C, 1, K, K), got {tuple(w.shape)}")
        if b is not None:
            check_array(b, "b", "(C,)", 1, backend, xp)
            if tuple(b.shape) != (layer.C,):
                raise ValueError(f"b must have shape ({layer.C},), got {tuple(b.shape)}")
        if bias_memory not in BIAS_MEMORIES:
            raise ValueError(f"bias_memory must be one of {BIAS_MEMORIES}, got {bias_memory!r}")
        self.activation, self.variant, self.tiling = activation, variant, tiling
        self.bias_memory = None if b is None else bias_memory
        self._bias_at: dict[int, int | None] = {}     # per module: the bias's run of dw_bias
        self._w9 = xp.ascontiguousarray(w.reshape(layer.C, 9))
        self._w, self.b = w, b
        self._kind = xp.ndarray
        self._x_shape = (layer.C, layer.H, layer.W)
        self._plans: dict[int, tuple] = {}

    def plan(self, N: int) -> _Plan:
        return self._entry(N)[0]

    def _entry(self, N: int) -> tuple:
        entry = self._plans.get(N)
        if entry is None:
            tiling = self.tiling
            if tiling is None and self.variant == "tiled" and self.backend == "cuda":
                tiling = self._tuned(N)
            key = (self.backend, self.layer, self.variant, tiling, N)
            plan = _PLANS.get_or_make(key, lambda: _Plan(self.layer, self.variant, tiling, N))
            has_bias, bias_at = self._bias_in(plan.module)
            entry = self._plans[N] = (plan, plan.bind(self._w9, self._w9 if self.b is None else self.b,
                                                      has_bias, self._act, bias_at))
        return entry

    def _tuned(self, N: int) -> Tiling:
        """The autotuner's tiling for a batch of N on this GPU (labkit.autotune), among
        ``tiling_candidates`` (the table's, or the default, first)."""
        L = self.layer
        first = tiling_for(L, N * L.C)
        cands = [first] + [t for t in tiling_candidates(L, N) if t != first]
        configs = [asdict(t) for t in cands]
        problem = autotune.Problem("depthwise", ("depthwise",), f"{L.key}_N{N}_{self.activation}", configs,
                                   lambda: _DepthwiseBench(self, N), lookup(DEPTHWISE, L.key) is not None,
                                   shape=f"{L.key}_{self.activation}")
        return cands[configs.index(autotune.choose(problem))]

    def _bias_in(self, module) -> tuple[int, int]:
        """(has_bias, bias_at) for a plan of ``module``: the bias uploaded to the module's constant
        array once (a batch size of another tiling may bring another module)."""
        if self.b is None:
            return 0, 0
        if self.bias_memory == "global":
            return 1, 0
        key = id(module)
        if key not in self._bias_at:
            self._bias_at[key] = slots_of(module, "dw_bias").take(to_numpy(self.b), owner=self)
        at = self._bias_at[key]
        if at is None:                   # every run taken: this layer reads its bias from global memory
            self.bias_memory = "global"
            return 1, 0
        return 2, at

    def __call__(self, x, out=None):
        """y = act(depthwise(x) + b) of float32 (N, C, H, W) x."""
        if not (fast_input(x, self._kind) and x.shape[1:] == self._x_shape):
            L = self.layer
            check_array(x, "x", "NCHW", 4, self.backend)
            if tuple(x.shape[1:]) != self._x_shape:
                raise ValueError(f"x must be (N, {L.C}, {L.H}, {L.W}) for this layer, got {tuple(x.shape)}")
        plan, launch = self._plans.get(x.shape[0]) or self._entry(int(x.shape[0]))
        y = output(out, plan.out_shape, "NCHW", (x, self._w, self.b), backend=self.backend)
        launch(x, y)
        return y


class _DepthwiseBench:
    """The autotuner's data for one depthwise layer at a batch of N (labkit.autotune.search.Bench);
    the bias read from global memory (a candidate takes no constant-memory run)."""

    def __init__(self, conv: DepthwiseConv2d, N: int):
        xp = backends.xp()
        L, self.conv, self.N = conv.layer, conv, N
        self.x = xp.random.default_rng().standard_normal((N, L.C, L.H, L.W), dtype=xp.float32)
        self.y = xp.empty((N, L.C) + L.out_hw, dtype=xp.float32)
        self.idx = sample_positions(xp, self.y.size)
        self.ref, self.terms = conv_samples(xp, self.x, conv._w, conv.b, L, self.idx, conv.activation)

    def build(self, config: dict):
        t = Tiling(**config)
        t.check(self.conv.layer)
        c = self.conv
        plan = _PLANS.get_or_make((c.backend, c.layer, "tiled", t, self.N), lambda: _Plan(c.layer, "tiled", t, self.N))
        launch = plan.bind(c._w9, c._w9 if c.b is None else c.b, int(c.b is not None), c._act, 0)
        x, y = self.x, self.y
        return lambda: launch(x, y)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, 1e-4)


def depthwise_conv2d(x, w, b=None, *, stride: int = 1, activation: str | None = None, variant: str = "tiled",
                     tiling: Tiling | None = None, out=None):
    """y = act(depthwise3x3(x, w) + b), padding 1, stride 1 or 2: x float32 (N, C, H, W), w (C, 1, 3, 3)."""
    backend = backends.current()
    if not (fast_input(x, array_type(backend)) and x.ndim == 4):
        check_array(x, "x", "NCHW", 4, backend)
    _, C, H, W = (int(v) for v in x.shape)
    layer = depthwise_layer(C, H, W, check_int(stride, "stride", 1, 2))
    return DepthwiseConv2d(w, b, layer, activation=activation, variant=variant, tiling=tiling,
                           bias_memory="global")(x, out=out)
