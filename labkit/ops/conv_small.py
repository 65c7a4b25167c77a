"""Direct 3x3 convolutions (stride 1, padding 1) for few channels (labkit/kernels/conv_small.cu):
forward, backward data and backward weight of the small ResNet's layers.

    conv = SmallConv3x3(wt, b, layer, activation="relu")                # y = relu(conv(x) + b)
    y = conv(x)
    bwd = SmallConv3x3(wt, None, layer, transpose=True, gate=True)      # dL/dx, 0 where h <= 0
    dh = bwd(dy, gate=h)
    wgrad = SmallWeightGrad(layer)                                      # dL/dw in the (C*9, M) layout
    dw = wgrad(x, dy, bias=db)                                          # and dL/db into db

``wt`` is the forward layer's weights in the (C*9, M) layout (``labkit.models.resnet_small`` keeps
them so); both layers read it at every call, so a training loop may update it in place.  A ``Tile``
(``WeightTile``) fixes a kernel's compile-time tile: the default suits any GPU and the CPU
executor; ``labkit/tuned/conv_small.json`` holds the winners of ``benchmarks/tune_conv_small.py`` per
GPU.  Each batch size's plan (grid, shared memory, the weight gradient's workspace) is made once.
"""
from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

from .. import backends
from ..backends.limits import SHARED_MEM_PER_BLOCK
from .implicit import shared_optin_limit
from ..checks import array_module, array_type, check_activation, check_array, check_residual, check_shape, output
from ..device_query import gpu_sm_count
from ..loader import load
from ..shapes import ConvLayer
from ..tuned import CONV_SMALL, lookup
from .plans import allow_shared, cdiv, divisors_among, ints, largest_divisor, tile_fits

__all__ = ["Conv3x3Layer", "Tile", "WeightTile", "SmallConv3x3", "SmallWeightGrad", "default_tile", "default_weight_tile",
           "tile_for", "weight_tile_for", "row_pitch", "check_small_layer", "table_key", "direct_candidates",
           "weight_candidates"]

MAX_THREADS = 1024


def check_small_layer(layer) -> ConvLayer:
    layer = ConvLayer(*layer)
    layer.check()
    layer.require_square("conv_small.cu")
    if not (layer.K == 3 and layer.stride == 1 and layer.pad == 1 and layer.groups == 1):
        raise ValueError(f"conv_small.cu runs 3x3 convolutions with stride 1, padding 1 and groups 1, got {layer}: "
                         "use labkit.layers.ImplicitConv2d (forward) or labkit.ops.conv_backward")
    return layer


def table_key(kind: str, C: int, M: int, H: int, W: int) -> str:
    """The tuned table's key of a kernel ("forward", "data" or "weight") on a layer shape (its input
    and output channels as the kernel sees them)."""
    return f"{kind}_C{C}_M{M}_H{H}_W{W}"


def row_pitch(W: int, rows: int, l: int, threads: int) -> int:
    """The staged row's pitch (floats) of the forward kernel: from W + 2 up, the one whose lanes' loads
    collide least (pairs of lanes of a warp in one bank at different addresses, over every warp)."""
    t = np.arange(cdiv(threads, 32) * 32).reshape(1, -1, 32)   # warps x lanes (the last warp padded)
    live = t < threads
    pitches = np.arange(W + 2, W + 34).reshape(-1, 1, 1)
    at = (t // W) % (rows // l) * l * pitches + t % W               # pitch x warp x lane
    a, b = at[..., :, None], at[..., None, :]
    both = live[..., :, None] & live[..., None, :]
    clashes = (both & (a != b) & (a % 32 == b % 32)).sum(axis=(1, 2, 3))
    best = int(pitches.ravel()[int(np.argmin(clashes))])          # the first of the fewest
    return best


@dataclass(frozen=True)
class Tile:
    """conv_small's tile: ``mb`` output channels per block, ``tm`` per thread, ``rows`` output rows
    per block, ``l`` of them per thread (a vertical strip), ``cb`` input channels staged at a time."""
    mb: int = 16
    tm: int = 4
    rows: int = 14
    l: int = 7
    cb: int = 16

    def threads(self, W: int) -> int:
        return (self.mb // self.tm) * (self.rows // self.l) * W

    def pitch(self, W: int) -> int:
        return row_pitch(W, self.rows, self.l, self.threads(W))

    def shared_bytes(self, W: int) -> int:
        x_floats = self.cb * (self.rows + 2) * self.pitch(W)
        return 4 * (cdiv(x_floats, 4) * 4 + self.cb * 9 * self.mb)

    def check(self, C: int, M: int, H: int, W: int) -> None:
        """ValueError, with the reason, if this tile cannot run the kernel on (C -> M, H x W)."""
        if min(self.mb, self.tm, self.rows, self.l, self.cb) < 1:
            raise ValueError(f"every field of {self} must be at least 1")
        if M % self.mb or self.mb % self.tm or C % self.cb or self.rows % self.l:
            raise ValueError(f"{self}: mb must divide M={M}, tm mb, cb C={C} and l rows")
        if self.rows > H:
            raise ValueError(f"{self}: rows must be at most H={H}")
        if not 1 <= self.threads(W) <= MAX_THREADS:
            raise ValueError(f"{self} makes {self.threads(W)} threads a block on W={W} (at most {MAX_THREADS})")
        if self.shared_bytes(W) > shared_optin_limit():
            raise ValueError(f"{self} stages {self.shared_bytes(W)} bytes in shared memory (at most "
                             f"{shared_optin_limit()}): take fewer rows or input channels (cb)")

    def defines(self, W: int) -> dict:
        return {"SC_MB": self.mb, "SC_TM": self.tm, "SC_ROWS": self.rows, "SC_L": self.l, "SC_CB": self.cb,
                "SC_XP": self.pitch(W)}


@dataclass(frozen=True)
class WeightTile:
    """conv_small_wgrad's tile: ``cb`` input by ``mb`` output channels of dw per block, ``tm`` output
    channels per thread, units of ``rows`` image rows, ``groups`` groups of threads taking them in turn."""
    cb: int = 16
    mb: int = 16
    tm: int = 4
    rows: int = 7
    groups: int = 4

    def threads(self) -> int:
        return self.cb * (self.mb // self.tm) * self.groups

    def shared_bytes(self, W: int) -> int:
        """conv_small.cu's SW_SHARED_FLOATS * 4: two stages of a unit's rows of x (planes of twice an
        odd number of floats) and dy (an odd multiple of 4), or the groups' sums and db's shares."""
        xp = (W + 5) // 2 * 2
        xpl = (self.rows + 2) * xp + (0 if (self.rows + 2) * xp % 4 else 2)
        stage = cdiv(self.cb * xpl, 4) * 4 + self.mb * (cdiv(self.rows * W, 4) * 4 | 4)
        sums = (self.groups - 1) * self.cb * (self.mb // self.tm) * 9 * self.tm + self.threads()
        return 4 * max(2 * stage, sums)

    def check(self, C: int, M: int, H: int, W: int) -> None:
        if min(self.cb, self.mb, self.tm, self.rows, self.groups) < 1:
            raise ValueError(f"every field of {self} must be at least 1")
        if C % self.cb or M % self.mb or self.mb % self.tm:
            raise ValueError(f"{self}: cb must divide C={C}, mb M={M} and tm mb")
        if self.rows > H or self.groups > self.rows:
            raise ValueError(f"{self}: rows must be at most H={H} and groups at most rows")
        if self.threads() < self.mb:
            raise ValueError(f"{self} makes {self.threads()} threads a block: at least mb={self.mb} (db's columns)")
        if not 1 <= self.threads() <= MAX_THREADS:
            raise ValueError(f"{self} makes {self.threads()} threads a block (at most {MAX_THREADS})")
        if self.shared_bytes(W) > shared_optin_limit():
            raise ValueError(f"{self} stages {self.shared_bytes(W)} bytes in shared memory (at most "
                             f"{shared_optin_limit()}): take fewer rows or channels")

    def defines(self) -> dict:
        return {"SW_CB": self.cb, "SW_MB": self.mb, "SW_TM": self.tm, "SW_ROWS": self.rows, "SW_G": self.groups}


def default_tile(C: int, M: int, H: int, W: int) -> Tile:
    """A tile that runs anywhere: up to 16 output channels a block, 4 a thread where they divide,
    up to 14 rows in strips of the largest of 7, 4, 2, 1 rows that divides them."""
    mb = largest_divisor(M, 16)
    tm = 4 if mb % 4 == 0 else 1
    cb = largest_divisor(C, 16)
    rows = min(H, 14)
    while True:
        l = next(d for d in (7, 4, 2, 1) if rows % d == 0)
        tile = Tile(mb, tm, rows, l, cb)
        if tile.threads(W) <= MAX_THREADS and tile.shared_bytes(W) <= SHARED_MEM_PER_BLOCK or rows == 1:
            return tile
        rows -= 1


def default_weight_tile(C: int, M: int, H: int, W: int) -> WeightTile:
    """Up to 16 x 16 channels of dw a block, 4 output channels a thread where they divide, units of
    up to 7 rows, as many groups as keep the block near 256 threads."""
    cb, mb = largest_divisor(C, 16), largest_divisor(M, 16)
    tm = 4 if mb % 4 == 0 else 1
    rows = min(H, 7)
    tasks = cb * (mb // tm)
    groups = max(1, min(rows, 256 // tasks))
    return WeightTile(cb, mb, tm, rows, groups)


def tile_for(kind: str, C: int, M: int, H: int, W: int, device_name: str | None = None) -> Tile:
    """This GPU's tuned tile for the forward ("forward") or backward-data ("data") kernel, else the default."""
    entry = lookup(CONV_SMALL, table_key(kind, C, M, H, W), device_name)
    return Tile(**{k: int(entry[k]) for k in asdict(Tile())}) if entry else default_tile(C, M, H, W)


def weight_tile_for(C: int, M: int, H: int, W: int, device_name: str | None = None) -> WeightTile:
    entry = lookup(CONV_SMALL, table_key("weight", C, M, H, W), device_name)
    return WeightTile(**{k: int(entry[k]) for k in asdict(WeightTile())}) if entry else \
        default_weight_tile(C, M, H, W)


class Conv3x3Layer:
    """What the 3x3 layers of conv_small and conv_winograd share: the checks made once (weights,
    bias, flags) and at each call (x, the residual and gate arrays, the output), and a plan per
    batch size from the subclass's ``make_plan(N)``: a launch(x, *per-call arrays, y).

    Args:
        wt: the forward layer's weights, float32 (C*9, M) on the backend, read at every call.
        b: its bias (M,) or None (forward only).
        layer: the forward layer's ``ConvLayer`` (C -> M on H x W).
        activation: None or "relu".
        residual: calls pass ``residual=`` an array of the output's shape, added before the activation.
        gate: calls pass ``gate=`` an array of the output's shape; the output is 0 where gate <= 0
            (the ReLU's backward riding in the store; a NaN gate passes the value, as PyTorch's
            threshold_backward does).
        transpose: compute backward data instead: the input is dL/dy (N, M, H, W) and the output
            dL/dx (N, C, H, W): the convolution with the filters turned and C, M swapped, read
            from ``wt`` as they are.
    """

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False):
        self.backend = backend = backends.current()
        L = self.layer = check_small_layer(layer)
        check_array(wt, "wt", "(C*9, M)", 2, backend)
        check_shape(wt, "wt", (L.C * 9, L.M), f"(C*9, M) of {L}")
        if b is not None:
            if transpose:
                raise ValueError("the backward data of a convolution has no bias: pass b=None with transpose=True")
            check_array(b, "b", "(M,)", 1, backend)
            check_shape(b, "b", (L.M,), f"(M,) of {L}")
        self.relu = check_activation(activation, (None, "relu")) != 0
        self.transpose, self.residual, self.gate = bool(transpose), bool(residual), bool(gate)
        self.c_in, self.c_out = (L.M, L.C) if transpose else (L.C, L.M)
        self.wt, self.b = wt, b
        self._kind = array_type(backend)
        self._plans: dict[int, object] = {}

    def epilogue_defines(self, prefix: str) -> dict:
        """The kernels' compile-time epilogue flags (bias, residual, gate, flipped weights)."""
        return {f"{prefix}_BIAS": int(self.b is not None), f"{prefix}_ADD": int(self.residual),
                f"{prefix}_GATE": int(self.gate), f"{prefix}_FLIP": int(self.transpose)}

    def fixed_pointers(self) -> tuple:
        """(b, addend, gate) of the launch: None where each call passes one; unused ones are never
        read (compile-time flags), the weights stand in for them."""
        return (self.b if self.b is not None else self.wt, None if self.residual else self.wt,
                None if self.gate else self.wt)

    def make_plan(self, N: int):
        raise NotImplementedError

    def plan(self, N: int):
        """The launch of batch size N, made once."""
        p = self._plans.get(N)
        if p is None:
            p = self._plans[N] = self.make_plan(N)
        return p

    def __call__(self, x, out=None, *, residual=None, gate=None):
        L = self.layer
        if not (type(x) is self._kind and x.ndim == 4 and x.dtype == np.float32 and x.flags.c_contiguous):
            check_array(x, "x", "NCHW", 4, self.backend)
        N = int(x.shape[0])
        if x.shape[1:] != (self.c_in, L.H, L.W):
            raise ValueError(f"x must be (N, {self.c_in}, {L.H}, {L.W}), got {tuple(x.shape)}")
        shape = (N, self.c_out, L.H, L.W)
        extra = check_residual(residual, shape, self.residual, self._kind, self.backend, type(self).__name__)
        if self.gate:
            if gate is None:
                raise ValueError(f"this layer gates its output: pass gate= a float32 array of shape {shape}")
            check_array(gate, "gate", "NCHW", 4, self.backend)
            check_shape(gate, "gate", shape, "the output's shape")
            extra += (gate,)
        elif gate is not None:
            raise ValueError("this layer was made without gate=True: it has no gate")
        y = output(out, shape, "NCHW", (x,) + extra, backend=self.backend)
        self.plan(N)(x, *extra, y)
        return y


class SmallConv3x3(Conv3x3Layer):
    """A 3x3 convolution (stride 1, padding 1) on conv_small's direct kernel, its epilogue fused.
    Arguments as ``Conv3x3Layer``'s, and ``tile``: a ``Tile`` instead of ``tile_for``'s."""

    def __init__(self, wt, b, layer, *, activation: str | None = None, residual: bool = False, gate: bool = False,
                 transpose: bool = False, tile: Tile | None = None):
        super().__init__(wt, b, layer, activation=activation, residual=residual, gate=gate, transpose=transpose)
        L = self.layer
        self.tile = tile or tile_for("data" if transpose else "forward", self.c_in, self.c_out, L.H, L.W)
        self.tile.check(self.c_in, self.c_out, L.H, L.W)

    def make_plan(self, N: int):
        L, t = self.layer, self.tile
        # The module holds both kernels: the weight gradient's tile is the default one (every tile is
        # checked at compile time).
        defines = {"SC_C": self.c_in, "SC_M": self.c_out, "SC_H": L.H, "SC_W": L.W, **self.epilogue_defines("SC"),
                   **t.defines(L.W), **default_weight_tile(self.c_in, self.c_out, L.H, L.W).defines()}
        fn = load("conv_small", defines=defines).get_function("conv_small")
        shared = t.shared_bytes(L.W)
        allow_shared(fn, shared)
        grid = (N * cdiv(L.H, t.rows) * (self.c_out // t.mb),)
        return fn.launcher(grid, (t.threads(L.W),), (None, self.wt) + self.fixed_pointers() + (None,)
                           + ints(N, self.relu), shared)


class SmallWeightGrad:
    """dL/dw and dL/db of a 3x3 convolution (stride 1, padding 1) on conv_small_wgrad: partial sums per
    slice of the batch, added in a fixed order by conv_small_wgrad_reduce.

        dw = wgrad(x, dy)                     # or wgrad(x, dy, out=dw, bias=db): db as well

    Args:
        layer: the forward layer's ``ConvLayer``.
        layout: "CKKM" (default: (C*9, M), the layout the training loop keeps) or "MCKK" ((M, C, 3, 3)).
        tile: a ``WeightTile`` instead of ``weight_tile_for``'s.
    """

    def __init__(self, layer, *, layout: str = "CKKM", tile: WeightTile | None = None):
        self.backend = backends.current()
        L = self.layer = check_small_layer(layer)
        if layout not in ("MCKK", "CKKM"):
            raise ValueError(f"layout must be 'MCKK' or 'CKKM', got {layout!r}")
        self.layout = layout
        self.tile = tile or self.tile_for(L)
        self.tile.check(L.C, L.M, L.H, L.W)
        self.out_shape = (L.C * 9, L.M) if layout == "CKKM" else (L.M, L.C, 3, 3)
        self._kind = array_type(self.backend)
        self._plans: dict[int, tuple] = {}

    @staticmethod
    def tile_for(layer: ConvLayer):
        """The tile when none is given: this GPU's tuned one, else the default."""
        return weight_tile_for(layer.C, layer.M, layer.H, layer.W)

    def slices(self, N: int, resident: int) -> int:
        """How many slices the batch's units (``rows`` rows of an image each) are split into: one full
        wave of blocks on a GPU (``resident`` blocks per SM), two on the CPU executor (its two cores)."""
        L, t = self.layer, self.tile
        units = N * cdiv(L.H, t.rows)
        chunks = (L.C // t.cb) * (L.M // t.mb)
        want = max(1, resident * gpu_sm_count() // chunks) if self.backend == "cuda" else 2
        return min(want, units)

    def plan(self, N: int) -> tuple:
        """(partial sums, reduce, default db) of batch size N, made once."""
        p = self._plans.get(N)
        if p is None:
            p = self._plans[N] = self.make_plan(N)
        return p

    def make_plan(self, N: int):
        L, t = self.layer, self.tile
        # The module holds both kernels: the forward's tile is the default one (both are checked at compile time).
        defines = {"SC_C": L.C, "SC_M": L.M, "SC_H": L.H, "SC_W": L.W, **t.defines(),
                   **default_tile(L.C, L.M, L.H, L.W).defines(L.W)}
        mod = load("conv_small", defines=defines)
        fn = mod.get_function("conv_small_wgrad")
        shared = t.shared_bytes(L.W)
        allow_shared(fn, shared)
        resident = fn.occupancy(t.threads(), shared)["blocks_per_sm"] if self.backend == "cuda" else 1
        slices = self.slices(N, max(1, resident))
        chunks = (L.C // t.cb) * (L.M // t.mb)
        xp = array_module(self.backend)
        ws = xp.empty((slices, L.C * 9 + 1, L.M), dtype=np.float32)
        db = xp.empty(L.M, dtype=np.float32)           # where the bias gradient goes when not asked for
        partial = fn.launcher((slices * chunks,), (t.threads(),), (None, None, ws) + ints(N, slices), shared)
        reduce = mod.get_function("conv_small_wgrad_reduce").launcher(
            (cdiv((L.C * 9 + 1) * L.M, 32),), (256,), (ws, None, None) + ints(slices, self.layout == "CKKM"))
        return partial, reduce, db

    def __call__(self, x, dy, out=None, *, bias=None):
        L = self.layer
        for a, name in ((x, "x"), (dy, "dy")):
            if not (type(a) is self._kind and a.ndim == 4 and a.dtype == np.float32 and a.flags.c_contiguous):
                check_array(a, name, "NCHW", 4, self.backend)
        N = int(x.shape[0])
        check_shape(x, "x", (N, L.C, L.H, L.W), f"(N, C, H, W) of {L}")
        check_shape(dy, "dy", (N, L.M, L.H, L.W), f"(N, M, H, W) of {L}")
        dw = output(out, self.out_shape, self.layout, (x, dy), backend=self.backend)
        plan = self.plan(N)
        db = plan[2] if bias is None else output(bias, (L.M,), "(M,)", (x, dy, dw), backend=self.backend)
        plan[0](x, dy)
        plan[1](dw, db)
        return dw


def _chunks(n: int, among) -> list[int]:
    """The channel chunks worth trying: all n channels when there are at most ``among``'s largest, else
    those of ``among`` that divide n."""
    return [n] if n <= max(among) else [d for d in among if n % d == 0]


def direct_candidates(C: int, M: int, H: int, W: int) -> list[Tile]:
    """Every conv_small tile of a sweep (C -> M as the kernel sees it) within the bounds that can win:
    8 to 64 sums a thread (fewer were a third slower or more on the H100), 64 to 1024 threads, channel
    chunks that divide C."""
    out = []
    for mb, tm, rows, l, cb in itertools.product(divisors_among(M, (8, 16, 32, 64)), (4, 8), (4, 7, 14, 28),
                                                 (1, 2, 4, 7, 14), _chunks(C, (16, 32))):
        t = Tile(mb, tm, rows, l, cb)
        if mb % tm or rows % l or rows > H or not 8 <= l * tm <= 64 or not 64 <= t.threads(W) <= 1024:
            continue
        out.append(t)
    return [t for t in out if tile_fits(t, C, M, H, W)]


def weight_candidates(C: int, M: int, H: int, W: int) -> list[WeightTile]:
    """Every conv_small_wgrad tile of a sweep within the bounds that can win (32 to 512 threads)."""
    out = []
    for cb, mb, tm, rows, groups in itertools.product(_chunks(C, (16, 32)), divisors_among(M, (8, 16, 32)), (2, 4, 8),
                                                      (4, 7, 14), (1, 2, 4, 7)):
        t = WeightTile(cb, mb, tm, rows, groups)
        if mb % tm or groups > rows or rows > H or not 32 <= t.threads() <= 512:
            continue
        out.append(t)
    return [t for t in out if tile_fits(t, C, M, H, W)]
