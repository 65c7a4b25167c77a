"""The direct convolution rungs: one call, any of four kernels, on the backend in use.

    y = conv2d(x, w, b, variant="tiled", activation="tanh")     # x, w, b on the backend (labkit.xp)
    layer = Conv2d(w, b, variant="tuned", activation="tanh")    # weights prepared once
    y = layer(x)
    grid, block, shared_mem = conv_launch_config("tiled", N, C, H, W, M, K, tile_width=16)

The layer is a valid convolution (stride 1, no padding) followed by the bias and an optional
activation: x float32 NCHW (N, C, H, W), w float32 MCKK (M, C, K, K), b float32 (M,), and
y float32 (N, M, H - K + 1, W - K + 1).  Each variant is one kernel family in labkit/kernels/:

    naive      conv_naive.cu     one thread per output element, global memory only
    tiled      conv_tiled.cu     the input tile (halo included) staged in shared memory
    constant   conv_constant.cu  tiled, with the weights and bias in __constant__ memory
    tuned      conv_tuned.cu     specialised at compile time for the layer's shape, whole images in
                                 shared memory, all M channels per thread; launch parameters per GPU
                                 from labkit/tuned/conv_tuned.json (labkit.ops.tuned_config)

What never changes for a shape (the compiled function, grid, block, shared memory, the int32
arguments) is resolved once into a plan: ``conv2d`` keeps one per shape and options, a ``Conv2d``
one per input shape, with its weights (and, for the constant-memory kernels, its constant memory)
uploaded once.  A call checks its new input, and launches.  Every argument is checked before
anything is compiled or launched, and each error says how to fix it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import numpy as np

from dataclasses import asdict
from itertools import zip_longest

from .. import autotune, backends
from ..backends.cpu import parse_checks
from ..backends.limits import CONSTANT_MEMORY, SHARED_MEM_PER_BLOCK
from ..checks import array_type, check_activation, check_array, fast_input, output
from ..errors import ConstantMemoryError, check_int
from ..loader import constant_uploader, load
from ..reference.samples import conv_samples, sample_positions
from ..shapes import ConvLayer
from ..tuned import CONV_TUNED, lookup
from .plans import PlanCache, cdiv, ints, sampled_mismatch
from .tuned_config import TunedConfig, candidates, check_config, layer_key, tuned_config

__all__ = ["conv2d", "Conv2d", "conv_launch_config", "kernel_resources", "format_resources", "VARIANTS",
           "CONST_WEIGHT_FLOATS", "CONST_BIAS_FLOATS"]

# Sizes of conv_constant.cu's __constant__ arrays, passed to it as defines so that this module and
# the kernel agree: 15872 weights + 256 biases = 64,512 bytes of the GPU's 64 KiB.
CONST_WEIGHT_FLOATS = 15872
CONST_BIAS_FLOATS = 256

Dim3 = tuple[int, int, int]


# --- launch configuration --------------------------------------------------------------------
def _tile_grid(N: int, M: int, H: int, W: int, K: int, tile_width: int) -> tuple[Dim3, Dim3]:
    """The ECE408 mapping: grid (N, M, tiles of the output plane), block (TILE_WIDTH, TILE_WIDTH)."""
    Ho, Wo = H - K + 1, W - K + 1
    tiles = cdiv(Ho, tile_width) * cdiv(Wo, tile_width)
    # Only grid x may exceed 65535 blocks; the batch sits there.
    if M > 65535:
        raise ValueError(f"M={M} output channels: grid y holds at most 65535 blocks")
    if tiles > 65535:
        raise ValueError(f"the {Ho}x{Wo} output plane needs {tiles} tiles of {tile_width}x{tile_width}, "
                         "but grid z holds at most 65535 blocks: use a larger tile_width")
    return (N, M, tiles), (tile_width, tile_width, 1)


def _config_naive(N, C, H, W, M, K, tile_width, tuned=None):
    grid, block = _tile_grid(N, M, H, W, K, tile_width)
    return grid, block, 0


def _config_tiled(N, C, H, W, M, K, tile_width, tuned=None):
    grid, block = _tile_grid(N, M, H, W, K, tile_width)
    shared = (tile_width + K - 1) ** 2 * 4   # one input channel's tile with its halo
    if shared > SHARED_MEM_PER_BLOCK:
        raise ValueError(
            f"the input tile of TILE_WIDTH {tile_width} and K={K} takes "
            f"({tile_width}+{K}-1)^2 * 4 = {shared} bytes of shared memory, over the "
            f"{SHARED_MEM_PER_BLOCK} bytes a block may have: use a smaller tile_width or variant='naive'")
    return grid, block, shared


def _config_tuned(N, C, H, W, M, K, tile_width, tuned=None):
    """conv_tuned.cu: a 1-D grid of ceil(N / imgs) blocks of `threads`; static shared memory only."""
    cfg = tuned or tuned_config(C, H, W, M, K)
    check_config(cfg, C, H, W, M, K)
    return (cdiv(N, cfg.imgs), 1, 1), (cfg.threads, 1, 1), 0


class _Variant(NamedTuple):
    config: Callable[..., tuple[Dim3, Dim3, int]]  # (N, C, H, W, M, K, tile_width, tuned) -> launch config
    constants: bool                                 # weights and bias in __constant__ memory?


_VARIANTS: dict[str, _Variant] = {
    "naive": _Variant(_config_naive, False),
    "tiled": _Variant(_config_tiled, False),
    "constant": _Variant(_config_tiled, True),
    "tuned": _Variant(_config_tuned, False),   # conv_tuned_const: see _kernel
}
VARIANTS: tuple[str, ...] = tuple(_VARIANTS)


def conv_launch_config(variant: str, N: int, C: int, H: int, W: int, M: int, K: int,
                       tile_width: int = 16, config: TunedConfig | None = None) -> tuple[Dim3, Dim3, int]:
    """(grid, block, shared_mem bytes) with which ``conv2d`` launches a variant on this layer.

    Every variant so far uses the ECE408 mapping: grid (N, M, ceil(Ho/T) * ceil(Wo/T)),
    block (T, T, 1) with T = tile_width; "tiled" and "constant" add (T + K - 1)^2 * 4 bytes of
    dynamic shared memory for one input channel's tile.  "tuned" ignores tile_width: its grid is
    (ceil(N / imgs),) blocks of (threads,), from ``config`` or the tuned table.
    """
    _check_variant(variant)
    _check_tile_width(tile_width)
    for name, v in zip("NCHWMK", (N, C, H, W, M, K)):
        check_int(v, name)
    if K > H or K > W:
        raise ValueError(f"kernel size K={K} is larger than the {H}x{W} input plane; a valid "
                         "convolution needs K <= H and K <= W")
    sizes = tuple(int(v) for v in (N, C, H, W, M, K))
    return _VARIANTS[variant].config(*sizes, int(tile_width), config)


def _kernel(variant: str, sizes, tile_width: int, tuned: TunedConfig | None, check=None, own=False):
    """(module, kernel name) a variant launches for a layer: compiled for the backend (cached;
    ``own``: a module of the caller's own, for constant memory it fills once)."""
    C, H, W, M, K = sizes[1:]
    if variant in ("naive", "tiled"):
        return load(f"conv_{variant}", defines={"TILE_WIDTH": tile_width}, check=check), f"conv_{variant}"
    if variant == "constant":
        return load("conv_constant", check=check, own=own,
                    defines={"TILE_WIDTH": tile_width, "CONST_WEIGHT_FLOATS": CONST_WEIGHT_FLOATS,
                             "CONST_BIAS_FLOATS": CONST_BIAS_FLOATS}), "conv_constant"
    cfg = tuned or tuned_config(C, H, W, M, K)
    own = own and cfg.kernel() == "conv_tuned_const"      # only a kernel with constants needs its own module
    return load("conv_tuned", check=check, own=own, defines=cfg.defines(C, H, W, M, K)), cfg.kernel()


# --- the plan of one shape ---------------------------------------------------------------------
@dataclass
class _Plan:
    """A checked convolution shape, ready to launch: what ``conv2d`` and ``Conv2d`` keep per shape."""
    module: object
    kernel: str
    fn: object                 # the kernel (CUDAFunction or CPUFunction)
    config: tuple              # (grid, block, shared memory bytes)
    tail: tuple                # the int32 arguments after the arrays
    out_shape: tuple
    constants: bool            # weights and bias travel to __constant__ memory, not as arguments
    zero_bias: object          # the bias when the caller gives none (never written)

    def __post_init__(self) -> None:
        grid, block, shared = self.config
        arrays = (None, None) if self.constants else (None, None, None, None)
        self.launch = self.fn.launcher(grid, block, arrays + self.tail, shared)
        self._uploads = None

    def bind(self, w, b):
        """``launch(x, y)`` with these weights fixed (a layer's)."""
        if self.constants:
            return self.launch
        grid, block, shared = self.config
        return self.fn.launcher(grid, block, (None, w, b, None) + self.tail, shared)

    def upload(self, w, b) -> None:
        if self._uploads is None:
            self._uploads = (constant_uploader(self.module, "c_weights"), constant_uploader(self.module, "c_bias"))
        self._uploads[0](w.reshape(-1))
        self._uploads[1](b)

    def run(self, x, w, b, y) -> None:
        if self.constants:
            self.launch(x, y)
        else:
            self.launch(x, w, b, y)


def _check_layer(x, w, b, variant, activation, tile_width, config, backend, xp) -> tuple:
    """Every check of conv2d's arguments, before anything is compiled: the layer's sizes."""
    _check_variant(variant)
    check_activation(activation)
    _check_tile_width(tile_width)
    check_array(x, "x", "NCHW", 4, backend, xp)
    check_array(w, "w", "MCKK", 4, backend, xp)
    N, C, H, W = (int(v) for v in x.shape)
    M, Cw, KH, KW = (int(v) for v in w.shape)
    if Cw != C:
        raise ValueError(f"channels differ: x has C={C} (shape {tuple(x.shape)}) but w has {Cw} "
                         f"(shape {tuple(w.shape)}); w must be MCKK (M, C, K, K) -- check the "
                         "layout (MCKK, not KKCM or CMKK)")
    if KH != KW:
        hint = (f"; w looks like KKCM (kh, kw, C, M), TensorFlow's layout: pass "
                f"w.transpose(3, 2, 0, 1).copy()" if M == Cw and KH == C else
                "; labkit.conv2d's variant='auto' runs any kernel")
        raise ValueError(f"variant {variant!r} takes square kernels only: w has {KH}x{KW} kernels "
                         f"(shape {tuple(w.shape)}){hint}")
    K = KH
    if K > H or K > W:
        raise ValueError(f"kernel size K={K} is larger than the {H}x{W} input plane; a valid "
                         "convolution needs K <= H and K <= W")
    if b is not None:
        check_array(b, "b", "(M,)", 1, backend, xp)
        if tuple(b.shape) != (M,):
            raise ValueError(f"b must have shape ({M},), one value per output channel of w, "
                             f"got {tuple(b.shape)}")
    if variant == "constant" and (M * C * K * K > CONST_WEIGHT_FLOATS or M > CONST_BIAS_FLOATS):
        need = (M * C * K * K + M) * 4
        raise ConstantMemoryError(
            f"variant='constant' keeps weights and bias in __constant__ memory: this layer needs "
            f"{need} bytes ({M}*{C}*{K}*{K} weights + {M} biases, 4 bytes each), but "
            f"conv_constant.cu has room for {CONST_WEIGHT_FLOATS} weights and "
            f"{CONST_BIAS_FLOATS} biases ({(CONST_WEIGHT_FLOATS + CONST_BIAS_FLOATS) * 4} "
            f"bytes; a GPU has 64 KiB = {CONSTANT_MEMORY} bytes of constant memory in "
            "all). Use variant='tiled', which reads the weights from global memory")
    if config is not None and not isinstance(config, TunedConfig):
        raise TypeError(f"config must be a labkit.ops.tuned_config.TunedConfig, got {type(config).__name__}")
    return N, C, H, W, M, K


def _make_plan(sizes, variant, activation, tile_width, config, check, xp, own, w=None, b=None) -> _Plan:
    N, C, H, W, M, K = sizes
    if variant == "tuned" and config is None:
        config = tuned_conv_config(sizes, activation, w, b)      # chosen once per plan
    grid, block, shared = _VARIANTS[variant].config(*sizes, tile_width, config)  # limits, before compiling
    mod, name = _kernel(variant, sizes, tile_width, config, check, own=own)
    act = check_activation(activation)
    if variant == "tuned":
        tail, constants = ints(N, act), name == "conv_tuned_const"
    else:
        tail, constants = ints(*sizes, act), _VARIANTS[variant].constants
    return _Plan(mod, name, mod.get_function(name), (grid, block, shared), tail,
                 (N, M, H - K + 1, W - K + 1), constants, xp.zeros(M, dtype=xp.float32))


# --- conv_tuned.cu's configuration, autotuned ------------------------------------------------------
def tuned_conv_config(sizes, activation=None, w=None, b=None) -> TunedConfig:
    """conv_tuned.cu's configuration for a batch of N on this GPU: the autotuner's (labkit.autotune)
    among ``tuned_config.candidates``, the table's (or the default) first; ``w``, ``b``: a layer's own
    weights for the search (random ones where None).  On the CPU executor, the table's or the default."""
    N, C, H, W, M, K = sizes
    first = tuned_config(C, H, W, M, K)
    if backends.current() != "cuda":
        return first
    # The grid interleaved across where the weights live (and their chunks): a search cut short by
    # its budget still tries both places.
    groups: dict = {}
    for c in candidates(C, H, W, M, K):
        if c != first:
            groups.setdefault((c.weights, c.m_chunk), []).append(c)
    cands = [first] + [c for rank in zip_longest(*groups.values()) for c in rank if c is not None]
    configs = [asdict(c) for c in cands]
    problem = autotune.Problem("conv_tuned", ("conv_tuned",), f"{layer_key(C, H, W, M, K)}_N{N}_{activation}",
                               configs, lambda: _TunedBench(sizes, activation, w, b),
                               lookup(CONV_TUNED, layer_key(C, H, W, M, K)) is not None)
    return cands[configs.index(autotune.choose(problem))]


class _TunedBench:
    """The autotuner's data for conv_tuned.cu on one shape (labkit.autotune.search.Bench)."""

    def __init__(self, sizes, activation, w, b):
        xp = backends.xp()
        rng = xp.random.default_rng()
        N, C, H, W, M, K = self.sizes = sizes
        self.activation = activation
        self.x = rng.standard_normal((N, C, H, W), dtype=xp.float32)
        self.w = w if w is not None else rng.standard_normal((M, C, K, K), dtype=xp.float32)
        self.b = b if b is not None else rng.standard_normal(M, dtype=xp.float32)
        self.y = xp.empty((N, M, H - K + 1, W - K + 1), dtype=xp.float32)
        self.idx = sample_positions(xp, self.y.size)
        self.ref, self.terms = conv_samples(xp, self.x, self.w, self.b, ConvLayer(C, H, W, M, K), self.idx,
                                            activation)

    def build(self, config: dict):
        cfg = TunedConfig(**config)
        # The cached module of the configuration, not one of its own (that would compile anew each
        # time): its constants are the bench's until a caller uploads its own, as conv2d() does per call.
        p = _make_plan(self.sizes, "tuned", self.activation, 16, cfg, None, backends.xp(), own=False)
        if p.constants:
            p.upload(self.w, self.b)
        launch, x, y = p.bind(self.w, self.b), self.x, self.y
        return lambda: launch(x, y)

    def check(self, launch) -> str | None:
        return sampled_mismatch(self.y, launch, self.idx, self.ref, self.terms, 1e-4)


# --- the two ways to call it ---------------------------------------------------------------------
_PLANS = PlanCache()


def conv2d(x, w, b=None, *, variant: str = "naive", activation: str | None = None,
           tile_width: int = 16, out=None, check: str | Iterable[str] | None = None,
           config: TunedConfig | None = None):
    """Valid convolution (stride 1, no padding), plus bias and activation, on the backend in use.

    Args:
        x: float32 NCHW ``(N, C, H, W)``, C-contiguous, on the backend (``labkit.xp`` array:
            cupy on a GPU, numpy on the CPU executor).
        w: float32 MCKK ``(M, C, K, K)``, square kernels, K <= H and K <= W.
        b: float32 ``(M,)``, or None for no bias.
        variant: one of ``VARIANTS``: "naive", "tiled", "constant", "tuned".
        activation: None, "tanh" or "relu", applied after the bias inside the kernel.
        tile_width: the kernels' TILE_WIDTH (compile time; each value is compiled once, then cached).
        out: optional preallocated float32 ``(N, M, H-K+1, W-K+1)`` array on the backend to write;
            it must not overlap x, w or b.
        check: the CPU executor's checking modes, as for ``labkit.load``: "memory", "barrier",
            "shuffle", a list of them, or "all" (None: from $LABKIT_CHECK).  Ignored on a GPU,
            where compute-sanitizer does that work.
        config: for variant "tuned", a ``TunedConfig`` to use instead of the tuned table's choice
            for this layer and GPU (a sweep passes each candidate here).

    Returns:
        y, float32 ``(N, M, H-K+1, W-K+1)`` (``out`` itself when given).

    The plan of each shape (and options) is made once; the constant-memory kernels upload w and b
    on every call, since the next call may bring other weights (a ``Conv2d`` uploads them once).
    """
    backend = backends.current()
    kind = array_type(backend)
    ok = fast_input(x, kind) and fast_input(w, kind) and (b is None or fast_input(b, kind))
    checks = None if backend == "cuda" else parse_checks(check)
    key = (backend, variant, getattr(x, "shape", None), getattr(w, "shape", None),
           None if b is None else getattr(b, "shape", None), activation, tile_width, config, checks)
    try:
        plan = _PLANS.get(key) if ok else None
    except TypeError:      # an unhashable option: the checks below name it
        plan = None
    if plan is None:
        xp = backends.xp()
        sizes = _check_layer(x, w, b, variant, activation, tile_width, config, backend, xp)
        plan = _PLANS[key] = _make_plan(sizes, variant, activation, int(tile_width), config, check, xp,
                                        own=False)
    if b is None:
        b = plan.zero_bias
    y = output(out, plan.out_shape, "NCHW", (x, w, b), backend=backend)
    if plan.constants:
        plan.upload(w, b)   # the cached module may have served another layer since: every call
    plan.run(x, w, b, y)
    return y


class Conv2d:
    """One direct-convolution layer with its weights on the backend, prepared per input shape.

        layer = Conv2d(w, b, variant="constant", activation="tanh")
        y = layer(x)                         # x float32 (N, C, H, W); a plan per N, H, W

    The layer copies w and b (it owns them: changing the caller's arrays later changes nothing).
    The constant-memory kernels get a module of the layer's own, its weights uploaded when the plan
    is made, not on every call.
    """

    def __init__(self, w, b=None, *, variant: str = "naive", activation: str | None = None,
                 tile_width: int = 16, check: str | Iterable[str] | None = None,
                 config: TunedConfig | None = None):
        self.backend, xp = backends.current(), backends.xp()
        _check_variant(variant)
        check_activation(activation)
        _check_tile_width(tile_width)
        check_array(w, "w", "MCKK", 4, self.backend, xp)
        M = int(w.shape[0])
        if b is not None:
            check_array(b, "b", "(M,)", 1, self.backend, xp)
            if tuple(b.shape) != (M,):
                raise ValueError(f"b must have shape ({M},), one value per output channel of w, got {tuple(b.shape)}")
        self.w = xp.array(w)
        self.b = xp.array(b) if b is not None else xp.zeros(M, dtype=xp.float32)
        self.variant, self.activation, self.tile_width, self.check, self.config = \
            variant, activation, int(tile_width), check, config
        self._kind = array_type(self.backend)
        self._plans: dict[tuple, tuple] = {}      # x.shape -> (plan, launch(x, y))

    def plan(self, x) -> _Plan:
        """The plan of x's shape, made (and the constants uploaded) on first use."""
        return self._entry(x)[0]

    def _entry(self, x) -> tuple:
        entry = self._plans.get(x.shape)
        if entry is None:
            xp = backends.xp()
            sizes = _check_layer(x, self.w, self.b, self.variant, self.activation, self.tile_width,
                                 self.config, self.backend, xp)
            p = _make_plan(sizes, self.variant, self.activation, self.tile_width, self.config, self.check, xp,
                           own=True, w=self.w, b=self.b)
            if p.constants:
                p.upload(self.w, self.b)
            entry = self._plans[x.shape] = (p, p.bind(self.w, self.b))
        return entry

    def __call__(self, x, out=None):
        """y = act(conv(x, w) + b); ``out``: an array of y's shape to write (not overlapping x)."""
        if not fast_input(x, self._kind):
            check_array(x, "x", "NCHW", 4, self.backend)
        p, launch = self._plans.get(x.shape) or self._entry(x)
        y = output(out, p.out_shape, "NCHW", (x, self.w, self.b), backend=self.backend)
        launch(x, y)
        return y


# --- what the kernel uses --------------------------------------------------------------------------
def kernel_resources(variant: str, N: int, C: int, H: int, W: int, M: int, K: int,
                     tile_width: int = 16, config: TunedConfig | None = None) -> dict:
    """What the kernel a variant launches on this layer uses, and how many of its blocks fit an SM.

    On a GPU: registers per thread, static and dynamic shared memory, local memory (spills), the
    block size, and the theoretical occupancy with its limiting resource.  On the CPU executor
    those are GPU notions: the dict says so and gives the launch configuration only.
    """
    grid, block, shared = conv_launch_config(variant, N, C, H, W, M, K, tile_width, config)
    mod, name = _kernel(variant, (N, C, H, W, M, K), tile_width, config)
    fn = mod.get_function(name)
    threads = block[0] * block[1] * block[2]
    info = {"kernel": name, "grid": grid, "block": block, "threads_per_block": threads,
            "dynamic_shared_bytes": shared, "backend": mod.backend}
    if mod.backend != "cuda":
        info["note"] = "registers, spills and occupancy are GPU notions: run on a GPU to see them"
        return info
    a = fn.attributes
    occ = fn.occupancy(threads, shared)
    info.update(registers_per_thread=a["num_regs"], static_shared_bytes=a["shared_size_bytes"],
                local_bytes_per_thread=a["local_size_bytes"], blocks_per_sm=occ["blocks_per_sm"],
                occupancy=occ["occupancy"], occupancy_limited_by=occ["limited_by"])
    return info


def format_resources(info: dict) -> str:
    """kernel_resources() as a few lines for a notebook."""
    head = (f"{info['kernel']}: grid {info['grid']}, block {info['block']}, "
            f"{info['dynamic_shared_bytes']} bytes of dynamic shared memory")
    if info["backend"] != "cuda":
        return head + f"\n  ({info['note']})"
    return (head + f"\n  {info['registers_per_thread']} registers/thread, "
            f"{info['static_shared_bytes']} bytes static shared, "
            f"{info['local_bytes_per_thread']} bytes local (spills) per thread"
            f"\n  {info['blocks_per_sm']} blocks/SM, theoretical occupancy "
            f"{100 * info['occupancy']:.0f}% (limited by {info['occupancy_limited_by']})")


# --- argument checks of this module ------------------------------------------------------------------
def _check_variant(variant) -> None:
    if not isinstance(variant, str) or variant not in _VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")


def _check_tile_width(tile_width) -> None:
    if isinstance(tile_width, (bool, np.bool_)) or not isinstance(tile_width, (int, np.integer)):
        raise TypeError(f"tile_width must be an int, got {tile_width!r}")
    if not 1 <= tile_width <= 32:
        raise ValueError(f"tile_width must be 1 to 32 (a block of tile_width^2 threads holds at most "
                         f"1024), got {tile_width}")
