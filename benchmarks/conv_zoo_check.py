"""Any convolution, checked: a randomized zoo of labkit.conv2d(variant="auto") and labkit.conv_transpose2d
calls against the float64 NumPy reference, outputs filled with NaN first; an autotuned set; a few
LARGE shapes (an input or output of 2^31 elements or more) against float64 samples and PyTorch.

    python benchmarks/conv_zoo_check.py [--cases 300] [--seed 0] [--out results/benchmarks]
    python benchmarks/conv_zoo_check.py --quick          # edge cases, 40 random, 1 autotuned; no large shapes
    compute-sanitizer --tool memcheck --error-exitcode 9 python benchmarks/conv_zoo_check.py --quick
    python benchmarks/conv_zoo_check.py --large-only     # the large shapes alone (GPU, ~30 GB of its memory)
    python benchmarks/conv_zoo_check.py --no-large --shard 0/2; ... --no-large --shard 1/2   # split in two
    python benchmarks/conv_zoo_check.py --list           # the cases and their coverage, nothing run

Phases, in this order:
1. edge: hand-picked corners (a kernel as large as the padded input, a stride past the kernel,
   padding past the kernel, one output element, planes of one row, transposed strides that leave
   output pixels no input reaches, output_padding through the dilation, depthwise with a channel
   multiplier, 512 channels...).
2. random: ``--cases`` draws (seeded): kernels 1..11 x 1..11, stride 1..5, padding 0..5 and dilation
   1..3 per axis, groups 1, 2..8 or depthwise (a channel multiplier of 1..3), transposed about 30% of
   them (output_padding below the stride or the dilation), bias half the time, activation None /
   relu / relu6 / tanh, odd batches, channels and planes.  LABKIT_AUTOTUNE=0 here (the defaults and
   whatever the disk cache holds: a search per case would compile for hours).
3. autotuned: ``--autotune-cases`` medium shapes with LABKIT_AUTOTUNE=1 and LABKIT_AUTOTUNE_BUDGET
   = ``--budget`` (1 s): the searched winners checked the same way.
4. large (GPU only; not with --quick): pointwise 64->128 on 16x1024^2 (2^31 outputs), a depthwise
   and a dense 3x3 whose input passes 2^31 elements, a transposed and a grouped dilated convolution
   with 2^31 outputs: NaN left anywhere (image by image), float64 sums at ``--samples`` positions
   (labkit.reference.samples.conv_samples through labkit.shapes.ConvLayer.of; labkit.reference.samples.conv_transpose_samples),
   and PyTorch FP32 (TF32 off) where it runs (max |y - y_torch| / max |y_torch|).
Each small case: the float64 reference of x, w, b (labkit.reference.layers.conv2d(..., dilation=) /
conv_transpose2d) and of |x|, |w|, |b| (the terms: float32 rounding is bounded by their sums), then
labkit into an output filled with NaN (out=; the result must be that array, of PyTorch's shape), then
a second call without out=; error = max |y - ref| / sum|terms| <= --tol (1e-4).

Writes conv_zoo_check_<gpu>.json (every case: its arguments, the errors, pass or FAIL) in --out;
prints each failure with the call that reproduces it; exit status 1 if any case failed or raised.
--quick turns CuPy's memory pool off (each array its own cudaMalloc) so that memcheck sees an access
past an array's end (--pool keeps it).  On the CPU executor it runs too (no large shapes, no
autotuning), slowly: try --cases 10 --no-edge.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import conv_zoo as zoo  # noqa: E402
from conv_zoo import Conv, pair  # noqa: E402

ACTIVATIONS = (None, "relu", "relu6", "tanh")
STRIDES = (1, 1, 1, 1, 2, 2, 2, 3, 4, 5)
DILATIONS = (1, 1, 1, 2, 3)
MAX_MACS = 2e7            # the float64 reference on the host: a fraction of a second a case
MAX_OUT = 3e5             # output elements of a small case


@dataclass(frozen=True)
class Case:
    id: str
    phase: str            # edge, random, autotuned, large
    N: int
    conv: Conv
    bias: bool = True
    activation: str | None = None

    def call_text(self) -> str:
        """The call, as a user would write it (to reproduce a failure)."""
        s = self.conv
        f = "conv_transpose2d" if s.transposed else "conv2d"
        x = f"x{(self.N, s.C, s.H, s.W)}"
        kw = ", ".join(f"{k}={v}" for k, v in s.kwargs().items())
        return (f"labkit.{f}({x}, w{s.w_shape}, {'b(%d)' % s.M if self.bias else 'None'}, {kw}, "
                f"activation={self.activation!r})")

    def describe(self) -> dict:
        return {"id": self.id, "phase": self.phase, "N": self.N, **self.conv.describe(), "bias": self.bias,
                "activation": self.activation, "call": self.call_text()}


def conv_case(id, phase, N, C, H, W, M, k, s=1, p=0, d=1, g=1, bias=True, act=None) -> Case:
    return Case(id, phase, N, Conv(C, H, W, M, pair(k), pair(s), pair(p), pair(d), g), bias, act)


def tconv_case(id, phase, N, C, H, W, M, k, s=1, p=0, op=0, d=1, g=1, bias=True, act=None) -> Case:
    return Case(id, phase, N, Conv(C, H, W, M, pair(k), pair(s), pair(p), pair(d), g, True, pair(op)), bias, act)


def valid(c: Case) -> bool:
    s = c.conv
    ho, wo = s.out_hw
    if ho < 1 or wo < 1 or s.C % s.groups or s.M % s.groups:
        return False
    if s.transposed:
        (sh, sw), (dh, dw), (oph, opw) = s.stride, s.dilation, s.output_padding
        return oph < max(sh, dh) and opw < max(sw, dw)
    return True


def macs(c: Case) -> float:
    return c.conv.flops(c.N) / 2


def small_enough(c: Case) -> bool:
    return macs(c) <= MAX_MACS and math.prod(c.conv.y_shape(c.N)) <= MAX_OUT and math.prod(c.conv.x_shape(c.N)) <= MAX_OUT


# --- the cases -------------------------------------------------------------------------------------

EDGE: tuple[Case, ...] = (
    conv_case("e_1x1_everything", "edge", 1, 1, 1, 1, 1, 1),
    conv_case("e_kernel_is_input", "edge", 2, 3, 7, 5, 4, (7, 5)),
    conv_case("e_kernel_past_input_padded", "edge", 3, 2, 3, 4, 5, 11, p=5, act="relu"),
    conv_case("e_pad_past_kernel", "edge", 2, 3, 6, 7, 2, 2, p=(5, 4), act="tanh"),
    conv_case("e_stride_past_kernel", "edge", 2, 4, 17, 19, 3, 1, s=5),
    conv_case("e_stride5_k3_rect", "edge", 1, 5, 23, 29, 6, (3, 2), s=(5, 3), p=(1, 0)),
    conv_case("e_one_output", "edge", 1, 7, 9, 9, 3, 3, s=4, d=4),
    conv_case("e_dilation3_span", "edge", 2, 3, 13, 13, 4, 5, d=3),
    conv_case("e_dilation_1x3", "edge", 2, 6, 11, 21, 5, (5, 2), p=(2, 3), d=(1, 3), act="relu6"),
    conv_case("e_one_row_plane", "edge", 3, 8, 1, 64, 8, (1, 7), p=(0, 3)),
    conv_case("e_one_column_plane", "edge", 2, 5, 41, 1, 7, (9, 1), s=(2, 1), p=(4, 0)),
    conv_case("e_depthwise_c1", "edge", 4, 1, 31, 29, 1, 3, p=1, g=1),
    conv_case("e_depthwise_c37_1x11", "edge", 3, 37, 13, 25, 37, (1, 11), p=(0, 5), g=37),
    conv_case("e_depthwise_mult3", "edge", 2, 12, 15, 15, 36, 5, s=2, p=2, g=12, act="relu"),
    conv_case("e_depthwise_7x7_d2_s2", "edge", 2, 24, 33, 31, 24, 7, s=2, p=6, d=2, g=24),
    conv_case("e_groups3_odd", "edge", 5, 9, 17, 13, 15, 3, p=1, g=3, bias=False),
    conv_case("e_groups8_k1", "edge", 2, 64, 9, 11, 64, 1, g=8),
    conv_case("e_c256_deep_k", "edge", 1, 256, 8, 8, 256, 3, p=1),
    conv_case("e_c512_1x1", "edge", 2, 512, 7, 7, 96, 1, act="relu"),
    conv_case("e_c3_k11_s4_stem", "edge", 2, 3, 67, 67, 16, 11, s=4, p=2, act="relu"),
    conv_case("e_odd_batch7", "edge", 7, 3, 19, 23, 5, (3, 5), s=(2, 1), p=(1, 2)),
    conv_case("e_no_bias_tanh", "edge", 2, 16, 12, 12, 24, 4, s=2, p=1, bias=False, act="tanh"),
    tconv_case("t_1x1", "edge", 2, 5, 9, 7, 6, 1),
    tconv_case("t_stride5_k2_gaps", "edge", 2, 3, 5, 6, 4, 2, s=5, act="relu"),
    tconv_case("t_pad_past_kernel", "edge", 2, 4, 10, 10, 3, 3, s=2, p=5),
    tconv_case("t_output_padding_2_0", "edge", 1, 6, 7, 8, 5, 3, s=(3, 2), p=1, op=(2, 0)),
    tconv_case("t_output_padding_by_dilation", "edge", 2, 4, 6, 6, 4, 3, s=1, p=1, op=2, d=3),
    tconv_case("t_depthwise_k4_s2", "edge", 2, 16, 11, 9, 16, 4, s=2, p=1, g=16),
    tconv_case("t_depthwise_mult2", "edge", 2, 8, 9, 9, 16, 3, s=2, p=1, op=1, g=8, act="relu6"),
    tconv_case("t_groups3", "edge", 3, 9, 8, 7, 6, (3, 4), s=(2, 3), p=(1, 2), g=3),
    tconv_case("t_k11_s1", "edge", 1, 3, 5, 4, 2, 11, p=(5, 2)),
    tconv_case("t_one_output", "edge", 1, 4, 1, 1, 3, 1),
    tconv_case("t_c256", "edge", 1, 256, 6, 6, 128, 2, s=2, act="tanh"),
)


def draw_case(rng: np.random.Generator, i: int) -> Case:
    """One random case (see the module's docstring), redrawn until valid and small enough."""
    for _ in range(10_000):
        transposed = rng.random() < 0.3
        kh = int(rng.integers(1, 12))
        kw = kh if rng.random() < 0.35 else int(rng.integers(1, 12))
        sh = int(rng.choice(STRIDES))
        sw = sh if rng.random() < 0.5 else int(rng.choice(STRIDES))
        ph, pw = int(rng.integers(0, 6)), int(rng.integers(0, 6))
        dh = int(rng.choice(DILATIONS))
        dw = dh if rng.random() < 0.5 else int(rng.choice(DILATIONS))
        mode = rng.choice(["dense", "dense", "grouped", "depthwise"])
        if mode == "dense":
            g, C, M = 1, int(rng.integers(1, 41)), int(rng.integers(1, 41))
        elif mode == "grouped":
            g = int(rng.choice([2, 3, 4, 6, 8]))
            C, M = g * int(rng.integers(1, 7)), g * int(rng.integers(1, 7))
        else:
            C = int(rng.integers(1, 49))
            g, M = C, C * int(rng.choice([1, 1, 1, 2, 3]))
        N = int(rng.integers(1, 6))
        op = (0, 0)
        if transposed:
            H, W = int(rng.integers(1, 21)), int(rng.integers(1, 21))
            if rng.random() < 0.4:
                op = (int(rng.integers(0, max(sh, dh))), int(rng.integers(0, max(sw, dw))))
        else:
            H = max(1, dh * (kh - 1) + 1 - 2 * ph) + int(rng.integers(0, 31))
            W = max(1, dw * (kw - 1) + 1 - 2 * pw) + int(rng.integers(0, 31))
        c = Case(f"r{i:04d}", "random", N, Conv(C, H, W, M, (kh, kw), (sh, sw), (ph, pw), (dh, dw), g, transposed, op),
                 bool(rng.random() < 0.5), rng.choice(np.array(ACTIVATIONS, dtype=object)))
        if valid(c) and small_enough(c):
            return c
    raise RuntimeError("no valid small case drawn in 10,000 tries")


def random_cases(n: int, seed: int) -> list[Case]:
    rng = np.random.default_rng(seed)
    return [draw_case(rng, i) for i in range(n)]


AUTOTUNED: tuple[Case, ...] = (
    conv_case("a_dense3_c64", "autotuned", 4, 64, 40, 40, 64, 3, p=1, act="relu"),
    tconv_case("a_transposed_k4s2", "autotuned", 4, 64, 24, 24, 32, 4, s=2, p=1),
    conv_case("a_depthwise5_c96", "autotuned", 4, 96, 36, 36, 96, 5, p=2, g=96),
    conv_case("a_rect_1x7_c48", "autotuned", 4, 48, 32, 32, 64, (1, 7), p=(0, 3)),
    conv_case("a_dilated2_c32", "autotuned", 4, 32, 40, 40, 32, 3, p=2, d=2, act="relu6"),
    conv_case("a_strided2_k5_c32", "autotuned", 4, 32, 64, 64, 64, 5, s=2, p=2),
    conv_case("a_grouped4_c64", "autotuned", 4, 64, 32, 32, 64, 3, p=1, g=4),
    conv_case("a_pointwise_c128", "autotuned", 4, 128, 28, 28, 96, 1),
)

LARGE: tuple[Case, ...] = (
    conv_case("L_pointwise_64_128_n16_1024", "large", 16, 64, 1024, 1024, 128, 1, act="relu"),
    conv_case("L_depthwise3_c128_n17_1024", "large", 17, 128, 1024, 1024, 128, 3, p=1, g=128),
    conv_case("L_dense3_c64_16_n33_1024", "large", 33, 64, 1024, 1024, 16, 3, p=1),
    tconv_case("L_transposed_k2s2_128_256_n8_512", "large", 8, 128, 512, 512, 256, 2, s=2),
    conv_case("L_grouped4_d2_c64_128_n16_1024", "large", 16, 64, 1024, 1024, 128, 3, p=2, d=2, g=4, act="relu6"),
)


def coverage(cases: list[Case]) -> dict:
    """What the cases reach: each geometric parameter's values, the group kinds, the epilogues."""
    cv = [c.conv for c in cases]
    return {
        "cases": len(cases),
        "transposed": sum(s.transposed for s in cv),
        "kernel_h": sorted({s.kernel[0] for s in cv}), "kernel_w": sorted({s.kernel[1] for s in cv}),
        "stride_h": sorted({s.stride[0] for s in cv}), "stride_w": sorted({s.stride[1] for s in cv}),
        "pad_h": sorted({s.pad[0] for s in cv}), "pad_w": sorted({s.pad[1] for s in cv}),
        "dilation_h": sorted({s.dilation[0] for s in cv}), "dilation_w": sorted({s.dilation[1] for s in cv}),
        "depthwise": sum(s.groups == s.C and s.C > 1 for s in cv),
        "grouped": sum(1 < s.groups < s.C for s in cv),
        "output_padding": sum(s.output_padding != (0, 0) for s in cv),
        "bias": sum(c.bias for c in cases),
        "activations": {str(a): sum(c.activation == a for c in cases) for a in ACTIVATIONS},
        "odd_planes": sum(s.H % 2 == 1 or s.W % 2 == 1 for s in cv),
    }


# --- running a case --------------------------------------------------------------------------------

def host_arrays(c: Case, seed: int):
    rng = np.random.default_rng(seed)
    s = c.conv
    x = rng.standard_normal(s.x_shape(c.N), dtype=np.float32)
    fan_in = s.w_shape[1] * s.kernel[0] * s.kernel[1]
    w = (rng.standard_normal(s.w_shape, dtype=np.float32) / np.float32(math.sqrt(fan_in))).astype(np.float32)
    b = rng.standard_normal(s.M, dtype=np.float32) if c.bias else None
    return x, w, b


def run_small(c: Case, seed: int, tol: float) -> dict:
    """A small case: float64 reference of the whole output, labkit into a NaN-filled out=, then without out=."""
    import labkit
    from labkit.checks import to_numpy
    xp = labkit.xp
    row = c.describe()
    row["failures"] = []
    s = c.conv
    x, w, b = host_arrays(c, seed)
    ref, terms = zoo.full_reference(s, x, w, b, c.activation)
    want = s.y_shape(c.N)
    if ref.shape != want:     # the formula (PyTorch's) and the reference disagree: the check itself is wrong
        row["failures"].append(f"the reference's shape {ref.shape} is not PyTorch's {want}")
        return row
    xd, wd = xp.asarray(x), xp.asarray(w)
    bd = None if b is None else xp.asarray(b)
    out = xp.full(want, xp.nan, dtype=xp.float32)
    try:
        t0 = time.perf_counter()
        y = zoo.labkit_call(s, xd, wd, bd, "auto", out=out, activation=c.activation)
        zoo.sync()
        row["first_call_s"] = time.perf_counter() - t0
        if y is not out:
            row["failures"].append("the result is not the out= array")
        row["nan_outputs"] = int(xp.isnan(out).sum())
        err = np.abs(to_numpy(out).astype(np.float64) - ref) / (terms + 1e-30)
        row["max_err"] = float("nan") if np.isnan(err).any() else float(err.max())
        if row["nan_outputs"] or not row["max_err"] <= tol:
            row["failures"].append(f"out=: {row['nan_outputs']} outputs left NaN, max error {row['max_err']:.3g} "
                                   f"(tolerance {tol:g})")
        y2 = zoo.labkit_call(s, xd, wd, bd, "auto", activation=c.activation)
        if tuple(y2.shape) != want:
            row["failures"].append(f"without out=: shape {tuple(y2.shape)}, PyTorch's is {want}")
        else:
            err2 = np.abs(to_numpy(y2).astype(np.float64) - ref) / (terms + 1e-30)
            row["max_err_no_out"] = e2 = float("nan") if np.isnan(err2).any() else float(err2.max())
            if not e2 <= tol:
                row["failures"].append(f"without out=: max error {e2:.3g} (tolerance {tol:g})")
    except Exception as e:    # noqa: BLE001
        row["failures"].append(f"raised {type(e).__name__}: {e}")
        row["traceback"] = traceback.format_exc(limit=6)
    return row


def run_large(c: Case, seed: int, tol: float, samples: int, torch_ok: bool) -> dict:
    """A large case: made on the GPU, checked by NaN count, float64 samples and PyTorch."""
    import labkit
    xp = labkit.xp
    row = c.describe()
    row["failures"] = []
    row["elements"] = {"x": math.prod(c.conv.x_shape(c.N)), "y": math.prod(c.conv.y_shape(c.N))}
    s = c.conv
    p = zoo.Problem(c.id, "large", c.N, (s,))
    x, params = zoo.make_arrays(xp, p, seed)
    w, b = params[0]
    if not c.bias:
        b = None
    out = xp.empty(s.y_shape(c.N), xp.float32)
    out.fill(xp.nan)
    try:
        t0 = time.perf_counter()
        y = zoo.labkit_call(s, x, w, b, "auto", out=out, activation=c.activation)
        zoo.sync()
        row["first_call_s"] = time.perf_counter() - t0
        if y is not out:
            row["failures"].append("the result is not the out= array")
        row["nan_outputs"] = zoo.nan_count(xp, out)
        idx = zoo.sample_idx(xp, int(out.size), samples, seed)
        ref, terms = zoo.stage_samples(xp, s, x, w, b, idx, c.activation)
        got = out.reshape(-1)[idx].astype(xp.float64)
        err = xp.abs(got - ref) / (terms + 1e-30)
        row["max_err"] = float("nan") if bool(xp.isnan(err).any()) else float(err.max())
        row["checked_by"] = f"float64 at {int(idx.size)} samples"
        if row["nan_outputs"] or not row["max_err"] <= tol:
            row["failures"].append(f"{row['nan_outputs']} outputs left NaN, sampled max error {row['max_err']:.3g} "
                                   f"(tolerance {tol:g})")
        if torch_ok:
            try:
                import torch
                run = zoo.torch_runner(p, x, [(w, b)], tf32=False)
                yt = run()
                if c.activation == "relu":
                    yt = torch.relu(yt)
                elif c.activation == "relu6":
                    yt = torch.clamp(yt, 0, 6)
                elif c.activation == "tanh":
                    yt = torch.tanh(yt)
                row["max_rel_err_vs_torch"] = d = zoo.max_rel_diff_torch(out, yt)
                del yt
                if not d <= zoo.TORCH_TOL["fp32"]:
                    row["failures"].append(f"vs PyTorch FP32: max |diff| / max |y| = {d:.3g} (> {zoo.TORCH_TOL['fp32']:g})")
            except Exception as e:    # noqa: BLE001   (PyTorch's own limits: recorded, not labkit's failure)
                row["torch_error"] = f"{type(e).__name__}: {e}"
    except Exception as e:    # noqa: BLE001
        row["failures"].append(f"raised {type(e).__name__}: {e}")
        row["traceback"] = traceback.format_exc(limit=6)
    return row


def prebuild(cases: list[Case]) -> None:
    """Every small case's kernels compiled first, side by side in threads (NVRTC takes about a second
    a specialised module, one at a time: 300 cases would spend minutes compiling in turn).  Each
    case runs once on zeros; the check proper then finds its plans made.  A case that raises here
    raises again, with its traceback, when it is checked."""
    import labkit
    from labkit.backends.parallel import run_parallel
    xp = labkit.xp

    def build(c: Case):
        try:
            s = c.conv
            w = xp.zeros(s.w_shape, dtype=xp.float32)
            zoo.labkit_call(s, xp.zeros(s.x_shape(c.N), dtype=xp.float32), w,
                            xp.zeros(s.M, dtype=xp.float32) if c.bias else None, "auto", activation=c.activation)
        except Exception:    # noqa: BLE001
            pass
    t0 = time.perf_counter()
    run_parallel([lambda c=c: build(c) for c in cases], min(16, os.cpu_count() or 1))
    zoo.sync()
    print(f"  prebuilt {len(cases)} cases in {time.perf_counter() - t0:.1f} s", flush=True)


def run_phase(name: str, cases: list[Case], args, env: dict, rows: list[dict], torch_ok: bool) -> None:
    from labkit import autotune
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    t0 = time.perf_counter()
    bad = 0
    try:
        if name != "autotuned":
            prebuild([c for c in cases if c.phase != "large"])
        for i, c in enumerate(cases):
            seen = len(autotune.history())
            if c.phase == "large":
                r = run_large(c, args.seed + i, args.tol, args.samples, torch_ok)
                zoo.release()      # its arrays died with run_large: hand the pools' blocks back
            else:
                r = run_small(c, args.seed + i, args.tol)
            decisions = autotune.history()[seen:]
            if decisions:
                r["auto_decisions"] = [{k: d.get(k) for k in ("family", "source", "config", "seconds")} for d in decisions]
            r["ok"] = not r["failures"]
            bad += not r["ok"]
            rows.append(r)
            if not r["ok"]:
                print(f"  FAIL {c.id}: {c.call_text()}\n       " + "\n       ".join(r["failures"]), flush=True)
            elif args.verbose or c.phase == "large" or (i + 1) % 50 == 0:
                print(f"  ok   {c.id} ({i + 1}/{len(cases)}): max error {r.get('max_err', float('nan')):.2e}"
                      + (f", vs PyTorch {r['max_rel_err_vs_torch']:.2e}" if "max_rel_err_vs_torch" in r else "")
                      + (f", first call {r['first_call_s']:.2f} s" if "first_call_s" in r else ""), flush=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    print(f"{name}: {len(cases) - bad}/{len(cases)} passed in {time.perf_counter() - t0:.1f} s "
          f"({', '.join(f'{k}={v}' for k, v in env.items())})", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, help="random cases (default 300; --quick 40)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tol", type=float, default=zoo.TOL["fp32"], help="max |y - ref| / sum|terms|")
    ap.add_argument("--samples", type=int, default=4096, help="float64-checked positions of a large output")
    ap.add_argument("--autotune-cases", type=int, help=f"autotuned cases (default {len(AUTOTUNED)}; --quick 1)")
    ap.add_argument("--budget", type=float, default=1.0, help="LABKIT_AUTOTUNE_BUDGET of the autotuned cases")
    ap.add_argument("--quick", action="store_true", help="edge cases, 40 random, 1 autotuned, no large shapes; "
                                                         "CuPy's pool off (for compute-sanitizer)")
    ap.add_argument("--no-edge", dest="edge", action="store_false")
    ap.add_argument("--no-large", dest="large", action="store_false")
    ap.add_argument("--large", dest="large_forced", action="store_true", help="the large shapes even with --quick")
    ap.add_argument("--large-only", action="store_true")
    ap.add_argument("--pool", action="store_true", help="keep CuPy's memory pool with --quick")
    ap.add_argument("--shard", help="I/N: every N-th edge and random case from the I-th (0-based), to split a "
                                    "run over several commands; the autotuned and large cases run in shard 0")
    ap.add_argument("--out", default="results/benchmarks")
    ap.add_argument("--list", action="store_true", help="print the cases and their coverage, run nothing")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    n_random = args.cases if args.cases is not None else (40 if args.quick else 300)
    n_auto = args.autotune_cases if args.autotune_cases is not None else (1 if args.quick else len(AUTOTUNED))
    edge = list(EDGE) if args.edge and not args.large_only else []
    rand = random_cases(n_random, args.seed) if not args.large_only else []
    auto = list(AUTOTUNED[:n_auto]) if not args.large_only else []
    shard, shards = (int(v) for v in args.shard.split("/")) if args.shard else (0, 1)
    if not 0 <= shard < shards:
        ap.error(f"--shard {args.shard}: I/N with 0 <= I < N")
    if shards > 1:
        edge, rand = edge[shard::shards], rand[shard::shards]
        if shard:
            auto, args.large, args.large_forced = [], False, False
    if args.list:
        for c in edge + rand + auto + list(LARGE):
            print(f"{c.id:<36s} {c.phase:<9s} {c.call_text()}")
        cov = coverage(edge + rand + auto)
        print(f"{len(edge) + len(rand) + len(auto)} small-to-medium cases, {len(LARGE)} large; coverage:")
        for k, v in cov.items():
            print(f"  {k:<14s} {v}")
        return 0

    import labkit
    dev = labkit.device()
    on_gpu = dev.is_gpu
    if on_gpu and args.quick and not args.pool:
        import cupy
        cupy.cuda.set_allocator(None)       # every array its own cudaMalloc: memcheck sees past its end
        cupy.cuda.set_pinned_memory_allocator(None)
    large = list(LARGE) if on_gpu and (args.large_only or (args.large and not args.quick) or args.large_forced) else []
    if shard:
        large = []
    if not on_gpu:
        auto = []        # the CPU executor tunes nothing
    torch_ok = zoo.torch_status() is None
    print(f"conv zoo check on {dev.label}: {len(edge)} edge, {len(rand)} random, {len(auto)} autotuned, "
          f"{len(large)} large cases; tolerance {args.tol:g} of the terms; PyTorch for the large: "
          f"{'yes' if torch_ok else zoo.torch_status()}", flush=True)
    rows: list[dict] = []
    t0 = time.perf_counter()
    if edge:
        run_phase("edge", edge, args, {"LABKIT_AUTOTUNE": "0"}, rows, torch_ok)
    if rand:
        run_phase("random", rand, args, {"LABKIT_AUTOTUNE": "0"}, rows, torch_ok)
    if auto:
        run_phase("autotuned", auto, args, {"LABKIT_AUTOTUNE": "1", "LABKIT_AUTOTUNE_BUDGET": str(args.budget)},
                  rows, torch_ok)
    if large:
        run_phase("large", large, args, {"LABKIT_AUTOTUNE": "0"}, rows, torch_ok)
    bad = [r for r in rows if not r["ok"]]
    meta = {"benchmark": "conv_zoo_check", "seed": args.seed, "shard": args.shard, "tolerance": args.tol,
            "samples": args.samples,
            "quick": args.quick, "pool": not (on_gpu and args.quick and not args.pool),
            "coverage": coverage(edge + rand + auto), "wall_s": time.perf_counter() - t0,
            "passed": len(rows) - len(bad), "failed": [r["id"] for r in bad]}
    from labkit import measure
    tag = zoo.device_tag(dev)
    name = f"conv_zoo_check_{tag}" + ("_quick" if args.quick else "") + ("_large" if args.large_only else "")
    name += f"_shard{shard}of{shards}" if shards > 1 else ""
    path = measure.save_rows(rows, Path(args.out) / f"{name}.json", meta=meta)
    print(f"\n{len(rows) - len(bad)} of {len(rows)} cases passed in {meta['wall_s']:.0f} s; wrote {path}")
    if bad:
        print("!" * 100)
        print(f"!!! {len(bad)} CASE(S) FAILED:")
        for r in bad:
            print(f"!!!   {r['id']}: {r['call']}")
            for msg in r["failures"]:
                print(f"!!!       {msg}")
        print("!" * 100)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
