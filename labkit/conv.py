"""The convolution ladder from Python: one call, any variant, on the backend in use.

    from labkit.conv import conv2d, conv_launch_config, VARIANTS
    y = conv2d(x, w, b, variant="tiled", activation="tanh")     # x, w, b on the backend (labkit.xp)
    grid, block, shared_mem = conv_launch_config("tiled", N, C, H, W, M, K, tile_width=16)

The layer is a valid convolution (stride 1, no padding) followed by the bias and an optional
activation: x float32 NCHW (N, C, H, W), w float32 MCKK (M, C, K, K), b float32 (M,), and
y float32 (N, M, H - K + 1, W - K + 1).  Each variant is one kernel family in labkit/kernels/:

    naive      conv_naive.cu     one thread per output element, global memory only
    tiled      conv_tiled.cu     the input tile (halo included) staged in shared memory
    constant   conv_constant.cu  tiled, with the weights and bias in __constant__ memory
    tuned      conv_tuned.cu     specialised at compile time for the layer's shape, whole images in
                                 shared memory, all M channels per thread; launch parameters per GPU
                                 from labkit/tuned/conv_tuned.json (see labkit.tuning)

Every argument is checked before anything is compiled or launched, and each error says how to fix
it.  A variant is one entry in ``_VARIANTS``: its launch configuration and its launcher.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple

import numpy as np

from . import backends
from .backends.kernel_source import ConstantMemoryError
from .loader import load, set_constant
from .tuning import TunedConfig, check_config, tuned_config

__all__ = ["conv2d", "conv_launch_config", "kernel_resources", "format_resources", "VARIANTS", "ACTIVATIONS",
           "CONST_WEIGHT_FLOATS", "CONST_BIAS_FLOATS", "SHARED_MEM_LIMIT"]

# The activation's code, the kernels' `int act` parameter.
ACTIVATIONS: dict[str | None, int] = {None: 0, "tanh": 1, "relu": 2}

# Sizes of conv_constant.cu's __constant__ arrays, passed to it as defines so that this module and
# the kernel agree: 15872 weights + 256 biases = 64,512 bytes of the GPU's 64 KiB.
CONST_WEIGHT_FLOATS = 15872
CONST_BIAS_FLOATS = 256
CONSTANT_MEMORY_LIMIT = 64 * 1024

# Dynamic shared memory a block may ask for without opting in (on a GPU and on the CPU executor).
SHARED_MEM_LIMIT = 48 * 1024

Dim3 = tuple[int, int, int]


# --- launch configuration --------------------------------------------------------------------
def _tile_grid(N: int, M: int, H: int, W: int, K: int, tile_width: int) -> tuple[Dim3, Dim3]:
    """The ECE408 mapping: grid (N, M, tiles of the output plane), block (TILE_WIDTH, TILE_WIDTH)."""
    Ho, Wo = H - K + 1, W - K + 1
    tiles = -(-Ho // tile_width) * -(-Wo // tile_width)
    # Only grid x may exceed 65535 blocks; the batch sits there.
    if M > 65535:
        raise ValueError(f"M={M} output channels: grid y holds at most 65535 blocks")
    if tiles > 65535:
        raise ValueError(f"the {Ho}x{Wo} output plane needs {tiles} tiles of {tile_width}x{tile_width}, "
                         "but grid z holds at most 65535 blocks: use a larger tile_width")
    return (N, M, tiles), (tile_width, tile_width, 1)


def _halo_bytes(K: int, tile_width: int) -> int:
    """One input channel's tile with its halo, (TILE_WIDTH + K - 1)^2 floats."""
    return (tile_width + K - 1) ** 2 * 4


def _config_naive(N, C, H, W, M, K, tile_width, tuned=None):
    grid, block = _tile_grid(N, M, H, W, K, tile_width)
    return grid, block, 0


def _config_tiled(N, C, H, W, M, K, tile_width, tuned=None):
    grid, block = _tile_grid(N, M, H, W, K, tile_width)
    shared = _halo_bytes(K, tile_width)
    if shared > SHARED_MEM_LIMIT:
        raise ValueError(
            f"the input tile of TILE_WIDTH {tile_width} and K={K} takes "
            f"({tile_width}+{K}-1)^2 * 4 = {shared} bytes of shared memory, over the "
            f"{SHARED_MEM_LIMIT} bytes a block may have: use a smaller tile_width or variant='naive'")
    return grid, block, shared


def _config_tuned(N, C, H, W, M, K, tile_width, tuned=None):
    """conv_tuned.cu: a 1-D grid of ceil(N / imgs) blocks of `threads`; static shared memory only."""
    cfg = tuned or tuned_config(C, H, W, M, K)
    check_config(cfg, C, H, W, M, K)
    return (-(-N // cfg.imgs), 1, 1), (cfg.threads, 1, 1), 0


# --- launchers -------------------------------------------------------------------------------
@dataclass
class _Problem:
    """A checked convolution, ready to launch."""
    x: object
    w: object
    b: object
    y: object
    sizes: tuple[int, int, int, int, int, int]  # N, C, H, W, M, K
    act: int
    tile_width: int
    check: str | Iterable[str] | None
    tuned: TunedConfig | None = None

    def int_args(self) -> tuple:
        # The kernels' `int` parameters: NumPy int32 scalars, which both backends pass as 4 bytes.
        return tuple(np.int32(v) for v in self.sizes) + (np.int32(self.act),)

    def config(self, variant: str):
        return conv_launch_config(variant, *self.sizes, tile_width=self.tile_width, config=self.tuned)


def _kernel(variant: str, sizes, tile_width: int, tuned: TunedConfig | None, check=None):
    """(module, kernel name) a variant launches for a layer: compiled for the backend, cached."""
    N, C, H, W, M, K = sizes
    if variant in ("naive", "tiled"):
        return load(f"conv_{variant}", defines={"TILE_WIDTH": tile_width}, check=check), f"conv_{variant}"
    if variant == "constant":
        return load("conv_constant", check=check,
                    defines={"TILE_WIDTH": tile_width, "CONST_WEIGHT_FLOATS": CONST_WEIGHT_FLOATS,
                             "CONST_BIAS_FLOATS": CONST_BIAS_FLOATS}), "conv_constant"
    cfg = tuned or tuned_config(C, H, W, M, K)
    return load("conv_tuned", check=check, defines=cfg.defines(C, H, W, M, K)), cfg.kernel()


def _launch_direct(p: _Problem, variant: str) -> None:
    """naive and tiled: x, w, b and y are arguments."""
    mod, name = _kernel(variant, p.sizes, p.tile_width, p.tuned, p.check)
    grid, block, shared = p.config(variant)
    mod.get_function(name)(grid, block, (p.x, p.w, p.b, p.y) + p.int_args(), shared_mem=shared)


def _launch_naive(p: _Problem) -> None:
    _launch_direct(p, "naive")


def _launch_tiled(p: _Problem) -> None:
    _launch_direct(p, "tiled")


def _launch_constant(p: _Problem) -> None:
    mod, name = _kernel("constant", p.sizes, p.tile_width, p.tuned, p.check)
    # Copied on every call, since the cached module may have served another layer since.  The copy
    # is at most 63 KiB, small beside the convolution it feeds (N*M*Ho*Wo*C*K*K multiply-adds); on
    # a GPU it goes device to device, queued before the kernel on the same stream.
    set_constant(mod, "c_weights", p.w.ravel())
    set_constant(mod, "c_bias", p.b)
    grid, block, shared = p.config("constant")
    mod.get_function(name)(grid, block, (p.x, p.y) + p.int_args(), shared_mem=shared)


def _launch_tuned(p: _Problem) -> None:
    mod, name = _kernel("tuned", p.sizes, p.tile_width, p.tuned, p.check)
    grid, block, shared = p.config("tuned")
    tail = (np.int32(p.sizes[0]), np.int32(p.act))
    if name == "conv_tuned_const":
        set_constant(mod, "c_weights", p.w.ravel())   # as in _launch_constant: on every call
        set_constant(mod, "c_bias", p.b)
        mod.get_function(name)(grid, block, (p.x, p.y) + tail)
    else:
        mod.get_function(name)(grid, block, (p.x, p.w, p.b, p.y) + tail)


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


class _Variant(NamedTuple):
    config: Callable[..., tuple[Dim3, Dim3, int]]  # (N, C, H, W, M, K, tile_width, tuned) -> launch config
    launch: Callable[[_Problem], None]             # compiles (cached) and launches the kernel


_VARIANTS: dict[str, _Variant] = {
    "naive": _Variant(_config_naive, _launch_naive),
    "tiled": _Variant(_config_tiled, _launch_tiled),
    "constant": _Variant(_config_tiled, _launch_constant),
    "tuned": _Variant(_config_tuned, _launch_tuned),
}
VARIANTS: tuple[str, ...] = tuple(_VARIANTS)


def conv_launch_config(variant: str, N: int, C: int, H: int, W: int, M: int, K: int,
                       tile_width: int = 16, config: TunedConfig | None = None) -> tuple[Dim3, Dim3, int]:
    """(grid, block, shared_mem bytes) with which ``conv2d`` launches a variant on this layer.

    Every variant so far uses the ECE408 mapping: grid (N, M, ceil(Ho/T) * ceil(Wo/T)),
    block (T, T, 1) with T = tile_width; "tiled" and "constant" add (T + K - 1)^2 * 4 bytes of
    dynamic shared memory for one input channel's tile.  "tuned" ignores tile_width: its grid is
    (ceil(N / imgs),) blocks of (threads,), from ``config`` or the tuned table (labkit.tuning).
    """
    _check_variant(variant)
    _check_tile_width(tile_width)
    for name, v in zip("NCHWMK", (N, C, H, W, M, K)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if K > H or K > W:
        raise ValueError(f"kernel size K={K} is larger than the {H}x{W} input plane; a valid "
                         "convolution needs K <= H and K <= W")
    sizes = tuple(int(v) for v in (N, C, H, W, M, K))
    return _VARIANTS[variant].config(*sizes, int(tile_width), config)


# --- argument checks -------------------------------------------------------------------------
def _is_cupy(a) -> bool:
    # Without importing CuPy: on the CPU executor it may not be installed at all.
    return type(a).__module__.startswith("cupy")


def _check_variant(variant) -> None:
    if variant not in _VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")


def _check_tile_width(tile_width) -> None:
    if isinstance(tile_width, (bool, np.bool_)) or not isinstance(tile_width, (int, np.integer)):
        raise TypeError(f"tile_width must be an int, got {tile_width!r}")
    if not 1 <= tile_width <= 32:
        raise ValueError(f"tile_width must be 1 to 32 (a block of tile_width^2 threads holds at most "
                         f"1024), got {tile_width}")


def _check_array(a, name: str, layout: str, ndim: int, backend: str, xp,
                 dtype_fix: str | None = None) -> None:
    """Refuse what a kernel would misread: wrong place, dtype, rank or memory layout."""
    if backend == "cuda":
        if isinstance(a, np.ndarray):
            raise TypeError(f"{name} is a NumPy array, but kernels run on the GPU: copy it to the GPU "
                            f"with cupy.asarray({name})")
        if not isinstance(a, xp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(a).__name__}: "
                            f"cupy.asarray({name}, dtype=cupy.float32)")
    else:
        if _is_cupy(a):
            raise TypeError(f"{name} is a CuPy array, but kernels run on the CPU executor: bring it "
                            f"back with cupy.asnumpy({name})")
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}: "
                            f"np.asarray({name}, dtype=np.float32)")
    if a.dtype != np.float32:
        fix = dtype_fix or f"{name}.astype(np.float32)"
        raise TypeError(f"{name} must be float32 {layout}, got {a.dtype}: {fix}")
    if a.ndim != ndim:
        hint = "; a single image is (1, C, H, W): add the batch axis with x[None]" \
            if name == "x" and a.ndim == 3 else ""
        raise ValueError(f"{name} must be {ndim}-D {layout}, got shape {tuple(a.shape)}{hint}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (the kernels index it as packed {layout}): "
                         f"pass {xp.__name__}.ascontiguousarray({name})")


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
        out: optional preallocated float32 ``(N, M, H-K+1, W-K+1)`` array on the backend to write.
        check: the CPU executor's checking modes, as for ``labkit.load``: "memory", "barrier",
            "shuffle", a list of them, or "all" (None: from $LABKIT_CHECK).  Ignored on a GPU,
            where compute-sanitizer does that work.
        config: for variant "tuned", a ``labkit.tuning.TunedConfig`` to use instead of the tuned
            table's choice for this layer and GPU (a sweep passes each candidate here).

    Returns:
        y, float32 ``(N, M, H-K+1, W-K+1)`` (``out`` itself when given).
    """
    backend = backends.current()
    xp = backends.xp()
    _check_variant(variant)
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be None, 'tanh' or 'relu', got {activation!r}")
    _check_tile_width(tile_width)
    _check_array(x, "x", "NCHW", 4, backend, xp)
    _check_array(w, "w", "MCKK", 4, backend, xp)
    N, C, H, W = (int(v) for v in x.shape)
    M, Cw, KH, KW = (int(v) for v in w.shape)
    if Cw != C:
        raise ValueError(f"channels differ: x has C={C} (shape {tuple(x.shape)}) but w has {Cw} "
                         f"(shape {tuple(w.shape)}); w must be MCKK (M, C, K, K) -- check the "
                         "layout (MCKK, not KKCM or CMKK)")
    if KH != KW:
        raise ValueError(f"only square kernels are supported: w has {KH}x{KW} kernels "
                         f"(shape {tuple(w.shape)})")
    K = KH
    if K > H or K > W:
        raise ValueError(f"kernel size K={K} is larger than the {H}x{W} input plane; a valid "
                         "convolution needs K <= H and K <= W")
    if b is None:
        b = xp.zeros(M, dtype=xp.float32)
    else:
        _check_array(b, "b", "(M,)", 1, backend, xp)
        if tuple(b.shape) != (M,):
            raise ValueError(f"b must have shape ({M},), one value per output channel of w, "
                             f"got {tuple(b.shape)}")
    if variant == "constant":
        need = (M * C * K * K + M) * 4
        if M * C * K * K > CONST_WEIGHT_FLOATS or M > CONST_BIAS_FLOATS:
            raise ConstantMemoryError(
                f"variant='constant' keeps weights and bias in __constant__ memory: this layer needs "
                f"{need} bytes ({M}*{C}*{K}*{K} weights + {M} biases, 4 bytes each), but "
                f"conv_constant.cu has room for {CONST_WEIGHT_FLOATS} weights and "
                f"{CONST_BIAS_FLOATS} biases ({(CONST_WEIGHT_FLOATS + CONST_BIAS_FLOATS) * 4} "
                f"bytes; a GPU has 64 KiB = {CONSTANT_MEMORY_LIMIT} bytes of constant memory in "
                "all). Use variant='tiled', which reads the weights from global memory")
    Ho, Wo = H - K + 1, W - K + 1
    if out is None:
        out = xp.empty((N, M, Ho, Wo), dtype=xp.float32)
    else:
        _check_array(out, "out", "NCHW", 4, backend, xp, dtype_fix=(
            f"allocate it with {xp.__name__}.empty({(N, M, Ho, Wo)}, dtype={xp.__name__}.float32)"))
        if tuple(out.shape) != (N, M, Ho, Wo):
            raise ValueError(f"out must have shape {(N, M, Ho, Wo)} (N, M, H-K+1, W-K+1), "
                             f"got {tuple(out.shape)}")
        if not getattr(out.flags, "writeable", True):  # CuPy arrays are always writeable
            raise ValueError("out is read-only: pass a writeable array")
    if config is not None and not isinstance(config, TunedConfig):
        raise TypeError(f"config must be a labkit.tuning.TunedConfig, got {type(config).__name__}")
    if variant == "tuned" and config is None:
        config = tuned_config(C, H, W, M, K)   # looked up once per call, not once per step
    p = _Problem(x, w, b, out, (N, C, H, W, M, K), ACTIVATIONS[activation], int(tile_width), check,
                 config)
    spec = _VARIANTS[variant]
    spec.config(*p.sizes, p.tile_width, p.tuned)  # grid and shared-memory limits, before compiling
    spec.launch(p)
    return out
