"""Checks that teach: a student's convolution kernel run on odd shapes with a poisoned output, and
what is wrong said in words.

    v = check_conv_kernel("exercises/02_conv_naive.cu", "conv_naive_exercise")
    print(v.message)        # "right on 3 layers ...: True", or which elements are wrong and how
    v.ok                    # the verdict a grader counts

Each case is a layer no tile divides (odd sizes), fresh random inputs, an output filled with NaN
before the launch.  The answer is compared with the float64 reference element by element, and the
message says how many elements are wrong, whether they were never written (still NaN) or hold other
values, whether they sit on the plane's edge (first or last row or column) or inside, where the first
ones are, and the largest error; where the wrong outputs of a tiled grid fill whole tiles, it names a
decode error (``tile_decode_error``).  A right kernel of conv_naive's grid that writes the output
uncoalesced passes with a note of what it costs, counted by labkit.counters (``coalescing_note``).
On the CPU executor the kernel also runs under the memory and
barrier checks, so an out-of-bounds access is named with its source line instead of corrupting
memory; a kernel that runs too long is stopped by the executor's watchdog.

Every check builds its cases as plain host data (``Case``) and hands them to a runner: ``run_here``
(this process: a notebook's check) unless ``runner=`` names another.  A grader passes one that runs
the student's kernel in a sandbox and judges its outputs itself (labkit.course.sandboxed).
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import backends, reference
from ..checks import check_activation, to_numpy
from ..errors import (BarrierError, ConstantMemoryError, KernelCompileError, KernelMemoryError, KernelRaceError,
                      LaunchError)
from ..loader import constant_nbytes, kernel_path, load_source, set_constant
from ..measure.counters import counters
from ..measure.timer import time_fn
from ..models.alexnet import MEAN_BGR
from ..ops.plans import ints
from ..reference import backward as rb
from ..ladder.harness import random_layer, reference_activation
from ..verdict import Verdict, describe_mismatch
from .host_program import check_host_program, fresh_cases

__all__ = ["Verdict", "Case", "run_here", "launch_case", "judge", "executor_error", "LAUNCH_ERRORS", "timed", "describe_mismatch", "check_conv_kernel", "check_depthwise_kernel", "check_backward_data_kernel",
           "check_im2col_kernel", "check_lrn_kernel", "check_constant_kernel", "check_rows_kernel",
           "check_conv_pool_kernel", "check_preprocess_kernel", "tile_bytes", "EXERCISE_LAYERS", "DEPTHWISE_CASES",
           "BACKWARD_DATA_CASES", "IM2COL_CASES", "LRN_CASES", "CONSTANT_LAYERS", "ROWS_CASES", "CONV_POOL_CASES",
           "PREPROCESS_CASES", "fresh_options", "FRESH", "check_find_the_bug_fix", "FIND_THE_BUG_CASES",
           "FIND_THE_BUG_MODES", "check_host_program", "check_conv_transpose_kernel", "CONV_TRANSPOSE_CASES", "phase_counts",
           "tile_decode_error", "coalescing_note", "COALESCING_LAYER"]

# Odd layers: no tile width divides their output planes, and C, M > 1 exercise every index.
EXERCISE_LAYERS = [dict(N=2, C=3, H=13, W=19, M=5, K=3), dict(N=3, C=1, H=24, W=20, M=6, K=5),
                   dict(N=1, C=6, H=22, W=22, M=16, K=5)]
# Depthwise 3x3 layers (N, C, H, W, stride): odd planes, both strides, one channel and several.
DEPTHWISE_CASES = [(2, 3, 13, 19, 1), (1, 5, 14, 11, 2), (3, 1, 7, 7, 1), (1, 4, 9, 16, 2)]
# Backward data of a 3x3 convolution, stride 1, padding 1 (N, C, H, W, M): odd planes, one input
# channel and several, one output channel and several, a plane of one row.
BACKWARD_DATA_CASES = [(2, 3, 9, 7, 5), (1, 1, 6, 11, 4), (3, 4, 5, 5, 1), (2, 2, 1, 6, 3)]
# im2col (N, C, H, W, K, stride, pad): odd planes, windows of 3 and 5, both strides, with and
# without padding (AlexNet's conv1 in small: K 11, stride 4).
IM2COL_CASES = [(2, 3, 9, 7, 3, 1, 1), (1, 2, 12, 11, 5, 2, 2), (3, 1, 8, 6, 3, 2, 0), (1, 2, 23, 19, 11, 4, 0)]
# LRN across channels (N, C, H, W, depth radius): fewer channels than the window, a window at both
# ends, AlexNet's radius 2 and a wider one.
LRN_CASES = [(2, 7, 5, 3, 2), (1, 3, 4, 9, 2), (3, 16, 2, 5, 5), (1, 1, 6, 6, 2)]
# The convolution with its weights in constant memory (layers as EXERCISE_LAYERS'): odd planes, one
# input channel and several, and a layer whose 15,000 weights fill nearly all of c_weights.
CONSTANT_LAYERS = [dict(N=2, C=3, H=13, W=19, M=5, K=3), dict(N=3, C=1, H=24, W=20, M=6, K=5),
                   dict(N=1, C=12, H=9, W=11, M=50, K=5)]
# Register-blocked rows (N, C, H, W, M, K), 4 outputs per thread: output widths 17, 18 and 10, which 4
# does not divide (each row ends with a short unit), and 3, a row shorter than one unit.
ROWS_CASES = [(2, 3, 13, 19, 5, 3), (1, 6, 22, 22, 16, 5), (3, 2, 6, 7, 3, 5), (2, 1, 9, 14, 4, 5)]
# Convolution + tanh + 2x2 max-pool (N, C, H, W, M, K): convolution outputs 11x14 (an odd number of
# rows: the last one is in no pooling window), 5x7 (odd both ways), 8x8, and the Fashion-MNIST
# network's layer 1 (44x44, pooled to 22x22).
CONV_POOL_CASES = [(2, 3, 13, 16, 5, 3), (3, 2, 9, 11, 4, 5), (1, 1, 12, 12, 6, 5), (2, 1, 48, 48, 6, 5)]
# uint8 photos to AlexNet's float32 input (N, H, W, blocks of the grid): odd batches, grids with fewer
# threads than values (each thread converts several) and with more (some convert none).
PREPROCESS_CASES = [(5, 13, 11, 3), (1, 3, 5, 4), (3, 9, 7, 1), (7, 6, 17, 20)]
# Transposed convolutions (N, C, H, W, M, (KH, KW), (SH, SW), (PH, PW), (DH, DW), (OPH, OPW)): strides 1
# to 3 (several phases per axis, one with a single phase), rectangular kernels, dilation, padding up to
# the dilated kernel's reach, output padding (rows and columns added at the bottom and the right).
CONV_TRANSPOSE_CASES = [(2, 3, 5, 7, 4, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
                        (1, 2, 6, 4, 3, (4, 2), (2, 3), (1, 0), (1, 1), (0, 2)),
                        (2, 4, 4, 5, 2, (3, 3), (3, 1), (2, 0), (2, 1), (0, 0)),
                        (1, 1, 7, 3, 5, (1, 5), (1, 2), (0, 3), (1, 2), (0, 1))]
# Notebook 03's "find the bug" (n values, nbins bins): the notebook's own launch; blocks of 256 threads.
FIND_THE_BUG_CASES = [(1000, 7)]
# The modes each case of the fixed kernels runs under, and their words.
FIND_THE_BUG_MODES = (("race", "under the race check"), ("shuffle", "under a shuffled schedule"),
                      ("", "under the default schedule"))


@dataclass
class Case:
    """One launch of an exercise's check, as plain host data: ``what`` (the shape, in words), the
    launch (``grid``, ``block``, ``args``: NumPy arrays, copied to the device at the launch, and NumPy
    scalars; ``args[out]`` is the output, all NaN), dynamic ``shared_mem``, ``constants`` ((name,
    values) uploaded into the module's ``__constant__`` arrays first, the rest of each array NaN), and
    ``ref``, the float64 answer of the output's shape (4-D: its last two axes are a plane) whose axes
    ``index`` names, and ``tol``, how far from it an output may be (relative to its largest
    magnitude; 0: exactly, for counts); ``phases`` (SH, SW), a transposed convolution's strides: what
    is wrong is then also counted per phase (h % SH, w % SW); ``tile``, the tile width of a launch whose
blockIdx.z numbers TILE x TILE tiles of the output plane: wrong outputs that fill whole tiles are then
named a decode error (``tile_decode_error``).  ``kernel`` and ``checks``, where given,
    are this launch's kernel and checking modes instead of the check's (one file, several kernels or
    modes).  Plain
    data, so that the launch can run in another process (a grader's sandbox) while the answer stays
    with the process that judges it."""
    what: str
    grid: tuple
    block: tuple
    args: tuple
    out: int
    ref: np.ndarray
    index: str = "n, m, h, w"
    shared_mem: int = 0
    constants: tuple = ()
    kernel: str | None = None
    checks: str | None = None
    tol: float = 1e-4
    phases: tuple | None = None
    tile: int | None = None


def launch_case(fn, case: Case) -> np.ndarray:
    """Run one case with the compiled ``fn``: the constants uploaded, the arrays copied to the
    backend, the launch; the output, back on the host."""
    for name, values in case.constants:
        _upload_poisoned(fn.module, name, values)
    args = device_args(case)
    fn(case.grid, case.block, args, shared_mem=case.shared_mem)
    return to_numpy(args[case.out])


def device_args(case: Case) -> tuple:
    """``case.args`` on the backend: each NumPy array copied there, the scalars as they are."""
    xp = backends.xp()
    return tuple(xp.asarray(a) if isinstance(a, np.ndarray) else a for a in case.args)


def judge(name: str, case: Case, out: np.ndarray) -> Verdict | None:
    """None if ``out`` is ``case``'s answer, else the Verdict that says what is wrong with it."""
    what = describe_mismatch(out, case.ref, index=case.index, tol=case.tol)
    if what is None:
        return None
    if case.tile is not None:
        decode = tile_decode_error(out, case.ref, case.tile, case.tol)
        if decode is not None:
            what = decode + "\n" + what
    if case.phases is not None and case.phases != (1, 1):
        what += "\n" + phase_counts(out, case.ref, case.phases, case.tol)
    return Verdict(False, f"{name}: wrong on the {case.what}:\n{what}")


def phase_counts(out: np.ndarray, ref: np.ndarray, phases: tuple, tol: float = 1e-4) -> str:
    """The wrong outputs of a transposed convolution counted per phase (h % SH, w % SW): a phase is a
    set of output rows and columns that the same taps reach, so a mistake in the taps of one phase
    shows as that phase wrong and the others right."""
    sh, sw = phases
    y = np.asarray(out, np.float64)
    scale = max(float(np.abs(ref).max()), 1e-30) if ref.size else 1e-30
    bad = np.isnan(y) | (np.abs(np.nan_to_num(y) - ref) > tol * scale)
    parts = []
    for r in range(min(sh, ref.shape[2])):
        for q in range(min(sw, ref.shape[3])):
            sel = bad[:, :, r::sh, q::sw]
            k = int(sel.sum())
            parts.append(f"({r}, {q}) {'none' if k == 0 else 'all' if k == sel.size else k} of {sel.size}")
    return f"wrong outputs per phase (h % {sh}, w % {sw}): " + ", ".join(parts)


def tile_decode_error(out: np.ndarray, ref: np.ndarray, tile: int, tol: float = 1e-4) -> str | None:
    """Where the wrong outputs of a launch with one TILE x TILE tile of the output plane per block
    (blockIdx.z numbering the tiles row by row) fill whole tiles -- in every plane each tile, cut at
    the plane's edges, is wrong throughout or right throughout, and some are right -- the words that
    name it: a block computed another tile than its own, or none, so the mistake is in decoding
    blockIdx.z, not in the edge test (whose mistakes cut across tiles); else None."""
    y = np.asarray(out, np.float64)
    scale = max(float(np.abs(ref).max()), 1e-30) if ref.size else 1e-30
    bad = np.isnan(y) | (np.abs(np.nan_to_num(y) - ref) > tol * scale)
    if ref.ndim != 4 or not bad.any() or bad.all():
        return None
    N, M, Ho, Wo = ref.shape
    rows, cols = -(-Ho // tile), -(-Wo // tile)
    wrong = []
    for r in range(rows):
        for q in range(cols):
            t = bad[:, :, r * tile:(r + 1) * tile, q * tile:(q + 1) * tile].reshape(N * M, -1)
            every, some = t.all(axis=1), t.any(axis=1)
            if (every != some).any():
                return None                    # a tile part wrong, part right: not a tile's decode
            if some.any():
                wrong.append((r, q))
    if len(wrong) == rows * cols:
        return None
    shown = ", ".join(map(str, wrong[:6])) + (", ..." if len(wrong) > 6 else "")
    return (f"a decode error: the wrong outputs fill whole {tile}x{tile} tiles of the {Ho}x{Wo} plane ({rows}x{cols} "
            f"tiles; wrong: (tile row, tile column) {shown}), the others right.  A block computes its tile whole "
            "or not at all, so look first at which tile a block takes: blockIdx.z decoded into the tile's row "
            "(blockIdx.z / W_grid) and column (blockIdx.z % W_grid), W_grid the tiles in a row of the plane "
            "(from Wo).  The output's edge test (h >= Ho, w >= Wo) is not the cause: its mistakes cut across tiles.")


def executor_error(name: str, case: Case, kind: str, text: str) -> Verdict:
    """The Verdict of a launch the executor stopped (``kind``: the error's class name): its first
    lines say what and where (source line); the sanitizer's own report after them is for the
    curious, and left out."""
    text = re.split(r"--- (?:AddressSanitizer|ThreadSanitizer) report", text)[0].rstrip()
    return Verdict(False, f"{name}: on the {case.what}:\n{kind}: {text}")


# What a launch may raise that is the kernel's fault (the rest is a bug of the check's).
LAUNCH_ERRORS = (KernelMemoryError, BarrierError, KernelRaceError, LaunchError, ConstantMemoryError)


def tile_bytes(K: int, tile_width: int) -> int:
    """Dynamic shared memory of conv_tiled's launch: one channel's input tile, halo included."""
    return (tile_width + K - 1) ** 2 * 4


def _compile(path: str | Path, kernel: str, checks: str, defines: dict | None = None):
    """(the kernel's function, None), or (None, the Verdict that says why it cannot run)."""
    name = f"{Path(path).name}: {kernel}"
    try:
        return load_source(path, defines=defines, check=checks, own=True).get_function(kernel), None
    except KernelCompileError as exc:
        return None, Verdict(False, f"{name}: does not compile:\n{exc}")
    except LaunchError as exc:
        return None, Verdict(False, f"{name}: {exc}")


_TIMING = {"repeat": 0}


@contextmanager
def timed(repeat: int = 20):
    """Within it, a check that passes also times the kernel on its last case (median of ``repeat``
    launches after warm-up, CUDA events on a GPU) into ``Verdict.ms``: the grader's leaderboard."""
    before = _TIMING["repeat"]
    _TIMING["repeat"] = repeat
    try:
        yield
    finally:
        _TIMING["repeat"] = before


def run_here(path: str | Path, kernel: str, cases, *, checks: str, right: str, defines: dict | None = None) -> Verdict:
    """Compile ``path`` and run ``kernel`` on each ``Case`` of ``cases`` (built lazily: one case's
    arrays at a time) in this process; the first case that fails, or goes wrong, gives the verdict;
    else "{file}: {kernel}: {right}" (timed on the last case inside ``timed()``).  A case that names
    its own kernel or checking modes runs that one, compiled once per kernel and modes.  A check's
    default runner: a grader hands the checks one that runs the kernel in a sandbox instead."""
    name = f"{Path(path).name}: {kernel}"
    compiled: dict = {}
    case = fn = None
    for case in cases:
        key = (case.kernel or kernel, checks if case.checks is None else case.checks)
        if key not in compiled:
            compiled[key] = _compile(path, *key, defines)
        fn, failed = compiled[key]
        if failed is not None:
            return failed
        here = f"{Path(path).name}: {key[0]}"
        try:
            out = launch_case(fn, case)
        except LAUNCH_ERRORS as exc:
            return executor_error(here, case, type(exc).__name__, str(exc))
        wrong = judge(here, case, out)
        if wrong is not None:
            return wrong
    if _TIMING["repeat"] and case is not None and fn is not None:
        args = device_args(case)
        t = time_fn(lambda: fn(case.grid, case.block, args, shared_mem=case.shared_mem), repeat=_TIMING["repeat"])
        return Verdict(True, f"{name}: {right}", t.median_ms, case.what)
    return Verdict(True, f"{name}: {right}")


def _poisoned(shape: tuple) -> np.ndarray:
    return np.full(shape, np.nan, dtype=np.float32)


def check_conv_kernel(path: str | Path, kernel: str, *, tile_width: int = 16, layers=None,
                      activation: str | None = None, shared_mem=None, checks: str = "memory,barrier",
                      rng=None, runner=None, coalescing: bool = True) -> Verdict:
    """Compile ``path`` (a .cu file with a kernel of conv_naive's signature and grid), run ``kernel`` on
    each of ``layers`` (default EXERCISE_LAYERS) with a NaN-poisoned output, compare with the
    float64 reference; on the CPU executor under ``checks`` (add "race" for a kernel with shared
    memory and barriers: a missing barrier is then named).  ``shared_mem(K, tile_width)``: the
    dynamic shared memory of a launch, in bytes (None: none).  A right kernel run here (no
    ``runner``) with ``coalescing`` also has its memory traffic counted against the coalesced
    mapping's: where it writes more, the verdict (still a pass) ends with a note that says so
    (``coalescing_note``)."""
    layers = EXERCISE_LAYERS if layers is None else layers
    verdict = (runner or run_here)(path, kernel, _tiled_layer_cases(layers, tile_width, activation, shared_mem, rng=rng),
                                   checks=checks, defines={"TILE_WIDTH": tile_width},
                                   right=f"right on {len(layers)} odd layers, every output written: True")
    if verdict.ok and runner is None and coalescing:
        note = coalescing_note(path, kernel, tile_width=tile_width, shared_mem=shared_mem)
        if note is not None:
            verdict.message += "\n" + note
    return verdict


# The layer a right kernel's memory traffic is counted on (coalescing_note): 32x32 outputs, whole tiles of 16.
COALESCING_LAYER = dict(N=1, C=2, H=34, W=34, M=2, K=3)


def _count_global(path: str | Path, kernel: str, tile_width: int, shared_mem) -> dict:
    """labkit.counters' global loads and stores of one launch of ``kernel`` on COALESCING_LAYER."""
    L = COALESCING_LAYER
    case = next(_tiled_layer_cases([L], tile_width, None, shared_mem, rng=np.random.default_rng(0)))

    def launch():
        fn = load_source(path, defines={"TILE_WIDTH": tile_width}, own=True).get_function(kernel)
        launch_case(fn, case)
    return counters(launch)[0]


def coalescing_note(path: str | Path, kernel: str, *, tile_width: int = 16, shared_mem=None) -> str | None:
    """A teaching note for a right kernel whose threads write the output uncoalesced (threadIdx.x over
    the rows, say): labkit.counters' global sectors of ``kernel`` against labkit/kernels/conv_naive.cu's,
    whose threadIdx.x is the output column, on COALESCING_LAYER; None where it writes no more sectors
    than that mapping.  Stores decide (every kernel of this grid writes each output once, whatever it
    reads); the loads are reported beside them."""
    st, ld = "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"
    theirs = _count_global(path, kernel, tile_width, shared_mem)
    ours = _count_global(kernel_path("conv_naive"), "conv_naive", tile_width, None)
    if theirs[st] <= 1.25 * ours[st]:
        return None
    L = COALESCING_LAYER
    Ho, Wo = L["H"] - L["K"] + 1, L["W"] - L["K"] + 1
    return (f"Note: right, but not coalesced. A warp's 32 threads do not write neighbouring outputs of a row: "
            f"on a layer of {Ho}x{Wo} outputs, labkit.counters (the CPU executor's count of what a GPU's "
            f"memory would serve) finds {theirs[st]:,} sectors of 32 bytes written and {theirs[ld]:,} read, "
            f"against {ours[st]:,} and {ours[ld]:,} with threadIdx.x the output column w "
            f"(labkit/kernels/conv_naive.cu): {theirs[st] / ours[st]:.1f}x the writes, "
            f"{theirs[ld] / ours[ld]:.1f}x the reads. Give threadIdx.x the column, so that consecutive threads "
            "touch consecutive addresses.")


def _tiled_layer_cases(layers, tile_width: int, activation, shared_mem, *, rng, constant: bool = False):
    """The launches of conv_tiled's grid on ``layers``: weights and bias as arguments, or with
    ``constant`` uploaded (NaN after them) into c_weights and c_bias before each launch."""
    rng = rng or np.random.default_rng()
    act = check_activation(activation)
    for L in layers:
        N, C, H, W, M, K = (L[k] for k in ("N", "C", "H", "W", "M", "K"))
        Ho, Wo = H - K + 1, W - K + 1
        x, w, b = random_layer(N, C, H, W, M, K, rng=rng)
        y = _poisoned((N, M, Ho, Wo))
        tiles = -(-Ho // tile_width) * -(-Wo // tile_width)
        weights = () if constant else (w, b)
        yield Case(f"layer N={N} C={C} {H}x{W} -> M={M}, K={K} (output {Ho}x{Wo}, tile {tile_width}"
                   + (f"; {w.size} weights in c_weights)" if constant else ")"),
                   (N, M, tiles), (tile_width, tile_width, 1), (x, *weights, y, *ints(N, C, H, W, M, K, act)),
                   1 + len(weights), reference_activation(reference.conv2d(x, w, b), activation),
                   shared_mem=0 if shared_mem is None else int(shared_mem(K, tile_width)),
                   constants=(("c_weights", w), ("c_bias", b)) if constant else (), tile=tile_width)


def check_depthwise_kernel(path: str | Path, kernel: str, *, cases=None, activation: str | None = "relu6",
                           checks: str = "memory", threads: int = 128, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/11_depthwise.cu's signature: x, w (C, 9), b, y,
    NC, C, H, W, S, act; one thread per output in y's memory order), run ``kernel`` on each of
    ``cases`` (N, C, H, W, stride; default DEPTHWISE_CASES) with a NaN-poisoned output and compare
    with the float64 reference (zero padding 1); on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = DEPTHWISE_CASES if cases is None else cases
    act = check_activation(activation, (None, "relu", "relu6"))

    def launches():
        for N, C, H, W, S in shapes:
            HO, WO = (H - 1) // S + 1, (W - 1) // S + 1
            x = rng.standard_normal((N, C, H, W)).astype(np.float32) * 2
            w = rng.standard_normal((C, 1, 3, 3)).astype(np.float32)
            b = rng.standard_normal(C).astype(np.float32)
            y = _poisoned((N, C, HO, WO))
            yield Case(f"layer N={N} C={C} {H}x{W}, stride {S} (output {HO}x{WO})",
                       (-(-N * C * HO * WO // threads),), (threads,),
                       (x, w.reshape(C, 9), b, y, *ints(N * C, C, H, W, S, act)),
                       3, reference_activation(reference.conv2d(x, w, b, stride=S, pad=1, groups=C), activation))
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd layers (strides 1 and 2), every output written: True")


def check_backward_data_kernel(path: str | Path, kernel: str, *, cases=None, checks: str = "memory",
                               threads: int = 128, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/10_conv_backward_data.cu's signature: dy, wt
    (C*9, M), gate, dx, N, C, H, W, M; one thread per dx element in memory order), run ``kernel`` on
    each of ``cases`` (N, C, H, W, M; default BACKWARD_DATA_CASES) with a NaN-poisoned dx and compare
    with the float64 reference: dL/dx of a 3x3 convolution (stride 1, zero padding 1), 0 where
    gate <= 0; on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = BACKWARD_DATA_CASES if cases is None else cases

    def launches():
        for N, C, H, W, M in shapes:
            dy = rng.standard_normal((N, M, H, W)).astype(np.float32)
            w = rng.standard_normal((M, C, 3, 3)).astype(np.float32)
            gate = rng.standard_normal((N, C, H, W)).astype(np.float32)
            wt = np.ascontiguousarray(w.reshape(M, C * 9).T)              # the (C*9, M) layout
            dx = _poisoned((N, C, H, W))
            ref, _, _ = rb.conv2d_backward(np.zeros((N, C, H, W)), w, dy, pad=1)     # float64
            yield Case(f"layer N={N} C={C} {H}x{W} -> M={M} (dy {N}x{M}x{H}x{W}, dx {N}x{C}x{H}x{W})",
                       (-(-N * C * H * W // threads),), (threads,),
                       (dy, wt, gate, dx, *ints(N, C, H, W, M)), 3,
                       np.where(gate > 0, ref, 0.0), index="n, c, h, w")
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd layers (the ReLU's gate applied), every dx element written: True")


def check_conv_transpose_kernel(path: str | Path, kernel: str, *, cases=None, checks: str = "memory",
                                threads: int = 128, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/12_conv_transpose.cu's signature: x, w (C, M, KH,
    KW), b, y, N, C, H, W, M, KH, KW, SH, SW, PH, PW, DH, DW, HO, WO; one thread per output in memory
    order), run ``kernel`` on each of ``cases`` (N, C, H, W, M, (KH, KW), (SH, SW), (PH, PW), (DH, DW),
    (OPH, OPW); default CONV_TRANSPOSE_CASES) with a NaN-poisoned output and compare with the float64
    reference (labkit.reference.conv_transpose2d, PyTorch's semantics); what is wrong is also counted
    per phase (h % SH, w % SW); on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = CONV_TRANSPOSE_CASES if cases is None else cases

    def launches():
        for N, C, H, W, M, k, s, p, d, op in shapes:
            HO, WO = ((n - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 for i, n in enumerate((H, W)))
            x = rng.standard_normal((N, C, H, W)).astype(np.float32)
            w = rng.standard_normal((C, M) + tuple(k)).astype(np.float32)
            b = rng.standard_normal(M).astype(np.float32)
            y = _poisoned((N, M, HO, WO))
            ref = reference.conv_transpose2d(x, w, b, stride=tuple(s), pad=tuple(p), output_padding=tuple(op),
                                             dilation=tuple(d))
            hw = lambda v: f"{v[0]}x{v[1]}"   # noqa: E731
            yield Case(f"layer N={N} C={C} {H}x{W} -> M={M}, kernel {hw(k)}, stride {hw(s)}, padding {hw(p)}, "
                       f"dilation {hw(d)}, output padding {hw(op)} (output {HO}x{WO})",
                       (-(-N * M * HO * WO // threads),), (threads,),
                       (x, w, b, y, *ints(N, C, H, W, M, *k, *s, *p, *d, HO, WO)), 3, ref,
                       index="n, m, h, w", phases=tuple(s))
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd transposed convolutions (strides 1 to 3, rectangular "
                            "kernels, dilation, output padding), every output written: True")


def check_im2col_kernel(path: str | Path, kernel: str, *, cases=None, checks: str = "memory", threads: int = 256,
                        rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/06_im2col.cu's signature: x, cols, N, C, H, W,
    K, stride, pad, Ho, Wo; one thread per element of cols (N, C*K*K, Ho*Wo) in memory order), run
    ``kernel`` on each of ``cases`` (N, C, H, W, K, stride, pad; default IM2COL_CASES) with NaN-poisoned
    columns and compare with the float64 reference (labkit.reference.im2col: 0 where a window hangs
    over the padding); on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = IM2COL_CASES if cases is None else cases

    def launches():
        for N, C, H, W, K, S, P in shapes:
            Ho, Wo = (H + 2 * P - K) // S + 1, (W + 2 * P - K) // S + 1
            x = rng.standard_normal((N, C, H, W)).astype(np.float32)
            cols = _poisoned((N, C * K * K, Ho, Wo))           # (N, C*K*K, Ho*Wo) seen as planes
            ref = reference.im2col(x.astype(np.float64), K, stride=S, pad=P).reshape(N, C * K * K, Ho, Wo)
            yield Case(f"input N={N} C={C} {H}x{W}, K={K}, stride {S}, padding {P} (cols {N}x{C * K * K}x{Ho * Wo})",
                       (-(-N * C * K * K * Ho * Wo // threads),), (threads,),
                       (x, cols, *ints(N, C, H, W, K, S, P, Ho, Wo)), 1, ref,
                       index="n, row (c*K+p)*K+q, oh, ow")
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd inputs (strides 1, 2 and 4, with and without padding), "
                            "every column element written: True")


def check_lrn_kernel(path: str | Path, kernel: str, *, cases=None, bias: float = 2.0, alpha: float = 1e-2,
                     beta: float = 0.75, checks: str = "memory", threads: int = 256, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/08_lrn.cu's signature, labkit/kernels/lrn.cu's:
    x, y, N, C, HW, r, bias, alpha, beta; one thread per output in memory order), run ``kernel`` on
    each of ``cases`` (N, C, H, W, r; default LRN_CASES) with a NaN-poisoned output and compare with
    the float64 reference (labkit.reference.lrn, TensorFlow's semantics); on the CPU executor under
    ``checks``.  alpha is larger than AlexNet's 1e-4 so that a wrong window shows."""
    rng = rng or np.random.default_rng()
    shapes = LRN_CASES if cases is None else cases

    def launches():
        for N, C, H, W, r in shapes:
            x = (rng.standard_normal((N, C, H, W)) * 3).astype(np.float32)
            y = _poisoned((N, C, H, W))
            ref = reference.lrn(x.astype(np.float64), r, bias, alpha, beta)
            yield Case(f"input N={N} C={C} {H}x{W}, radius {r}", (-(-N * C * H * W // threads),), (threads,),
                       (x, y, *ints(N, C, H * W, r), np.float32(bias), np.float32(alpha),
                        np.float32(beta)), 1, ref, index="n, c, h, w")
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd inputs (windows cut at the first and last channels), "
                            "every output written: True")


def _upload_poisoned(module, name: str, values: np.ndarray) -> None:
    """``values`` (float32) into the start of the __constant__ array ``name`` of ``module``, the rest of
    the array NaN: a read past the layer's values shows as a NaN output."""
    size = constant_nbytes(module, name)
    data = np.full(max(size // 4, values.size), np.nan, np.float32)
    data[:values.size] = values.ravel()
    set_constant(module, name, data)


def check_constant_kernel(path: str | Path, kernel: str, *, layers=None, tile_width: int = 16,
                          activation: str | None = None, checks: str = "memory,barrier,race", rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/04_conv_constant.cu's signature, conv_constant's:
    x, y, N, C, H, W, M, K, act, with the weights in ``__constant__ float c_weights[]`` and the bias in
    ``c_bias[]``; conv_tiled's grid, block and dynamic shared memory), upload each layer's weights and
    bias into the module's constant arrays (the rest of each filled with NaN), run ``kernel`` on each of
    ``layers`` (default CONSTANT_LAYERS) with a NaN-poisoned output and compare with the float64
    reference; on the CPU executor under ``checks``."""
    layers = CONSTANT_LAYERS if layers is None else layers
    return (runner or run_here)(path, kernel, _tiled_layer_cases(layers, tile_width, activation, tile_bytes, rng=rng, constant=True),
                      checks=checks, defines={"TILE_WIDTH": tile_width},
                      right=f"right on {len(layers)} odd layers, weights and bias from constant memory, "
                            "every output written: True")


def check_rows_kernel(path: str | Path, kernel: str, *, cases=None, out_w: int = 4, activation: str | None = "tanh",
                      checks: str = "memory", threads: int = 128, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/05_conv_rows.cu's signature, conv_naive's: x,
    k, b, y, N, C, H, W, M, K, act) with OUT_W = ``out_w``, run ``kernel`` with one thread per unit of
    ``out_w`` neighbouring outputs of a row (units in memory order, ceil(Wo / out_w) per row) on each
    of ``cases`` (N, C, H, W, M, K; default ROWS_CASES) with a NaN-poisoned output and compare with
    the float64 reference; on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = ROWS_CASES if cases is None else cases
    act = check_activation(activation)

    def launches():
        for N, C, H, W, M, K in shapes:
            Ho, Wo = H - K + 1, W - K + 1
            units = -(-Wo // out_w)
            x, w, b = random_layer(N, C, H, W, M, K, rng=rng)
            y = _poisoned((N, M, Ho, Wo))
            last = Wo - (units - 1) * out_w
            yield Case(f"layer N={N} C={C} {H}x{W} -> M={M}, K={K} (output {Ho}x{Wo}: {units} units of "
                       f"{out_w} per row, the last of {last})",
                       (-(-N * M * Ho * units // threads),), (threads,),
                       (x, w, b, y, *ints(N, C, H, W, M, K, act)), 3,
                       reference_activation(reference.conv2d(x, w, b), activation))
    return (runner or run_here)(path, kernel, launches(), checks=checks, defines={"OUT_W": out_w},
                      right=f"right on {len(shapes)} odd layers, {out_w} outputs per thread, every output written: True")


def check_conv_pool_kernel(path: str | Path, kernel: str, *, cases=None, checks: str = "memory", threads: int = 128,
                           rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/07_conv_pool.cu's signature: x, k, b, y, N, C,
    H, W, M, K; one thread per pooled output in memory order), run ``kernel`` on each of ``cases``
    (N, C, H, W, M, K; default CONV_POOL_CASES) with a NaN-poisoned output and compare with the
    float64 reference of convolution -> tanh -> 2x2 max-pool (stride 2; an odd last row or column of
    the convolution's output is dropped); on the CPU executor under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = CONV_POOL_CASES if cases is None else cases

    def launches():
        for N, C, H, W, M, K in shapes:
            Ho, Wo = H - K + 1, W - K + 1
            PH, PW = Ho // 2, Wo // 2
            x, w, b = random_layer(N, C, H, W, M, K, rng=rng)
            y = _poisoned((N, M, PH, PW))
            ref = reference.max_pool2d(reference.tanh(reference.conv2d(x, w, b)), 2)
            yield Case(f"layer N={N} C={C} {H}x{W} -> M={M}, K={K} (convolution {Ho}x{Wo}, pooled {PH}x{PW})",
                       (-(-N * M * PH * PW // threads),), (threads,),
                       (x, w, b, y, *ints(N, C, H, W, M, K)), 3, ref,
                       index="n, m, i, j")
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd layers (odd convolution outputs cut by the pooling), "
                            "every pooled output written: True")


def check_preprocess_kernel(path: str | Path, kernel: str, *, cases=None, checks: str = "memory", threads: int = 128,
                            rng=None, runner=None) -> Verdict:
    """Compile ``path`` (a kernel of notebooks/exercises/09_preprocess.cu's signature: x uint8 (N, H, W, 3)
    RGB, mean float32 (3,) BGR, y float32 (N, 3, H, W), N, H, W), run ``kernel`` with ``threads`` per
    block on each of ``cases`` (N, H, W, blocks; default PREPROCESS_CASES: grids smaller and larger
    than the work) with a NaN-poisoned output and compare with the float64 reference of AlexNet's
    preprocessing (channels first, BGR, labkit.models.alexnet.MEAN_BGR subtracted); on the CPU executor
    under ``checks``."""
    rng = rng or np.random.default_rng()
    shapes = PREPROCESS_CASES if cases is None else cases
    mean = np.asarray(MEAN_BGR, np.float32)

    def launches():
        for N, H, W, blocks in shapes:
            x = rng.integers(0, 256, (N, H, W, 3), dtype=np.uint8)
            y = _poisoned((N, 3, H, W))
            ref = (x[..., ::-1].astype(np.float64) - mean.astype(np.float64)).transpose(0, 3, 1, 2)
            total, launched = N * 3 * H * W, blocks * threads
            yield Case(f"images N={N} {H}x{W} ({total} values) on a grid of {blocks} block{'s' * (blocks > 1)} of "
                       f"{threads} threads ({launched} threads: {'fewer' if launched < total else 'more'} than the values)",
                       (blocks,), (threads,), (x, mean, y, *ints(N, H, W)), 2, ref,
                       index="n, c, h, w")
    return (runner or run_here)(path, kernel, launches(), checks=checks,
                      right=f"right on {len(shapes)} odd batches, on grids smaller and larger than the work, "
                            "every output written: True")


def check_find_the_bug_fix(path: str | Path, *, cases=None, rng=None, runner=None) -> Verdict:
    """Compile ``path`` (labkit/kernels/find_the_bug.cu with its two bugs fixed: ``histogram(x, bins,
    n, nbins)`` and ``block_sum(x, partial, n)``, blocks of 256 threads) and run both kernels on each
    of ``cases`` ((n, nbins); default FIND_THE_BUG_CASES) under the race check, under a shuffled
    schedule and under the default one, on fresh random values: the bins (from zero) must be the
    exact counts and each block's sum (NaN-poisoned) the float64 sum of its 256 values (0 past n).
    The race check names a race that the answers might not show; the shuffled schedule switches
    threads at memory accesses, so a lost update or a step that reads before the step before it has
    written shows in the answers too."""
    rng = rng or np.random.default_rng()
    shapes = FIND_THE_BUG_CASES if cases is None else cases

    def launches():
        for n, nbins in shapes:
            blocks = -(-n // 256)
            values = rng.integers(0, nbins, n).astype(np.int32)
            data = rng.standard_normal(n).astype(np.float32)
            want_bins = np.bincount(values, minlength=nbins).astype(np.float64)
            want_sums = np.pad(data.astype(np.float64), (0, blocks * 256 - n)).reshape(blocks, 256).sum(axis=1)
            for checks, how in FIND_THE_BUG_MODES:
                yield Case(f"{n} values into {nbins} bin{'s' * (nbins > 1)} ({blocks} blocks of 256 threads), {how}",
                           (blocks,), (256,), (values, np.zeros(nbins, np.int32), *ints(n, nbins)), 1, want_bins,
                           index="bin", kernel="histogram", checks=checks, tol=0.0)
                yield Case(f"{n} values ({blocks} blocks of 256 threads), {how}", (blocks,), (256,),
                           (data, _poisoned((blocks,)), *ints(n)), 1, want_sums, index="block",
                           kernel="block_sum", checks=checks)
    right = (f"no race under the race check, and the histogram and the block sums right under it, under a shuffled "
             f"schedule and under the default one, on {len(shapes)} fresh input{'s' * (len(shapes) > 1)}: True")
    verdict = (runner or run_here)(path, "histogram", launches(), checks="race", right=right)
    return Verdict(True, f"{Path(path).name}: histogram and block_sum: {right}") if verdict.ok else verdict


# --- fresh shapes: a grader's cases, drawn per student ------------------------------------------------
# Each draws from the space an exercise's kernel must handle (odd sizes, one channel and several,
# every stride and padding the exercise names), never one of the notebook's own cases: a kernel right
# only on the shapes its author could try gets no points.

def _draw(rng, make, defaults, n: int, spread=()) -> list:
    """``n`` cases from ``make(rng, *values)``, none of them in ``defaults`` nor twice.  ``spread``: one
    tuple of choices per argument of ``make`` (a kernel size, a stride); the cases take every choice of
    each before any comes again, so that no student's draw is all 1x1 kernels, say, where a missing
    barrier or a swapped filter index changes nothing."""
    picks = [_spread(rng, choices, n) for choices in spread]
    seen, out = {repr(d) for d in defaults}, []
    while len(out) < n:
        case = make(rng, *(p[len(out)] for p in picks))
        if repr(case) not in seen:
            seen.add(repr(case))
            out.append(case)
    return out


def _spread(rng, choices, n: int) -> list:
    """``n`` of ``choices``, each in turn before any again, in a random order."""
    out: list = []
    while len(out) < n:
        out += [choices[i] for i in rng.permutation(len(choices))]
    return out[:n]


def _r(rng, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _conv_layer(rng, K: int, C: tuple = (1, 6), M: tuple = (1, 8), tile: int = 16,
                max_weights: int | None = None) -> dict:
    """A layer with a K x K kernel, C[0] to C[1] input and M[0] to M[1] output channels."""
    while True:
        L = dict(N=_r(rng, 1, 3), C=_r(rng, *C), H=_r(rng, K, tile + K + 9), W=_r(rng, K, tile + K + 9),
                 M=_r(rng, *M), K=K)
        if max_weights is None or L["M"] * L["C"] * K * K <= max_weights:
            return L


def _transpose_case(rng, reaching: bool = False) -> tuple:
    """A transposed convolution a kernel of 12_conv_transpose.cu's must run: strides 1 to 3, dilation 1
    or 2, padding up to the dilated kernel's reach, output padding below max(stride, dilation), an
    output of at least one row and column.  ``reaching``: along both axes the dilated kernel reaches at
    least a stride past the padding ((K - 1)*D - P >= S), so that some output's numerator
    oh + P - k*D is negative and divisible by the stride (a row before the input: C's division makes
    -S / S = -1) and some output's tap lands past the input's last row."""
    while True:
        k, s, d = ((_r(rng, 1, 5), _r(rng, 1, 5)), (_r(rng, 1, 3), _r(rng, 1, 3)), (_r(rng, 1, 2), _r(rng, 1, 2)))
        p = tuple(_r(rng, 0, d[i] * (k[i] - 1)) for i in range(2))
        op = tuple(_r(rng, 0, max(s[i], d[i]) - 1) for i in range(2))
        N, C, H, W, M = _r(rng, 1, 3), _r(rng, 1, 4), _r(rng, 1, 9), _r(rng, 1, 9), _r(rng, 1, 5)
        if reaching and not all((k[i] - 1) * d[i] - p[i] >= s[i] for i in range(2)):
            continue
        if all((n - 1) * s[i] - 2 * p[i] + d[i] * (k[i] - 1) + op[i] + 1 >= 1 for i, n in enumerate((H, W))):
            return (N, C, H, W, M, k, s, p, d, op)


def _transpose_cases(rng) -> list:
    """Four transposed convolutions for one student: two whose kernels reach past the padding along both
    axes (negative numerators, taps past the last row: see ``_transpose_case``), two drawn freely."""
    reaching = _draw(rng, lambda g: _transpose_case(g, True), CONV_TRANSPOSE_CASES, 2)
    return reaching + _draw(rng, _transpose_case, CONV_TRANSPOSE_CASES + reaching, 2)


KS = (1, 3, 5)                       # the kernel sizes a convolution exercise names
ONE_OR_MORE = ((1, 1), (2, 6))       # channels: one, or several (a kernel that reads channel 0 only)

FRESH = {
    "check_conv_kernel": lambda rng: {"layers": _draw(rng, _conv_layer, EXERCISE_LAYERS, 3,
                                                      (KS, ONE_OR_MORE, ONE_OR_MORE))},
    "check_constant_kernel": lambda rng: {"layers": _draw(
        rng, lambda g, K, C, M: _conv_layer(g, K, C, M, max_weights=15_000), CONSTANT_LAYERS, 3,
        (KS, ONE_OR_MORE, ONE_OR_MORE))},
    "check_rows_kernel": lambda rng: {"cases": _draw(
        rng, lambda g, K: (_r(g, 1, 3), _r(g, 1, 5), _r(g, K, K + 14), _r(g, K, K + 21), _r(g, 1, 6), K),
        ROWS_CASES, 4, (KS,))},
    "check_im2col_kernel": lambda rng: {"cases": _draw(
        rng, lambda g, K, S: (_r(g, 1, 3), _r(g, 1, 4), _r(g, K, K + 16), _r(g, K, K + 16), K, S, _r(g, 0, K - 1)),
        IM2COL_CASES, 4, ((1, 3, 5, 7), (1, 2, 3, 4)))},
    "check_conv_pool_kernel": lambda rng: {"cases": _draw(
        rng, lambda g, K: (_r(g, 1, 3), _r(g, 1, 4), _r(g, K + 1, K + 20), _r(g, K + 1, K + 20), _r(g, 1, 6), K),
        CONV_POOL_CASES, 4, (KS,))},
    # Radius 0 (each channel alone) once at most: the window's edges are what a kernel gets wrong.
    "check_lrn_kernel": lambda rng: {"cases": _draw(
        rng, lambda g, r: (_r(g, 1, 3), _r(g, 1, 20), _r(g, 1, 9), _r(g, 1, 9), r), LRN_CASES, 4,
        ((0, 1, 2, 3, 4, 5),))},
    "check_preprocess_kernel": lambda rng: {"cases": _draw(
        rng, lambda g: (_r(g, 1, 7), _r(g, 1, 17), _r(g, 1, 17), _r(g, 1, 24)), PREPROCESS_CASES, 4)},
    "check_backward_data_kernel": lambda rng: {"cases": _draw(
        rng, lambda g: (_r(g, 1, 3), _r(g, 1, 5), _r(g, 1, 12), _r(g, 1, 12), _r(g, 1, 6)), BACKWARD_DATA_CASES, 4)},
    "check_depthwise_kernel": lambda rng: {"cases": _draw(
        rng, lambda g, S, C: (_r(g, 1, 3), _r(g, *C), _r(g, 1, 20), _r(g, 1, 20), S), DEPTHWISE_CASES, 4,
        ((1, 2), ONE_OR_MORE))},
    "check_conv_transpose_kernel": lambda rng: {"cases": _transpose_cases(rng)},
    # Whole programs (notebook 02b): sizes and seeds of the student's own.
    "check_host_program": lambda rng: {"cases": fresh_cases(rng)},
    # Several blocks, the last one cut short, few bins (many threads update one bin at once).
    "check_find_the_bug_fix": lambda rng: {"cases": _draw(
        rng, lambda g: (_r(g, 300, 2500), _r(g, 1, 12)), FIND_THE_BUG_CASES, 2)},
}


def fresh_options(check: str, rng) -> dict:
    """The shapes a grader checks ``check`` (a check function's name) on: drawn with ``rng`` (a
    student's own, from the run's seed), none of them the notebook's."""
    return FRESH[check](rng)
