"""Studies of MobileNetV2 on labkit's kernels: each depthwise layer against cuDNN and its memory
floor, the whole network against PyTorch over batch sizes (eager and as CUDA graphs), the time per
kind of layer, and the costs of a first call.

    rows = depthwise_rows(layers, repeat=20)          # naive, tiled, cuDNN, floor per layer
    rows = network_rows(net, torch_run, [1, 8, 32])   # labkit / PyTorch, eager / graph
    parts = layer_kinds(net, 32)                       # ms of depthwise, pointwise, rest

Every layer is checked against the float64 reference (at batch 2) before it is timed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from .. import backends, measure, peers, reference
from ..checks import to_numpy
from ..device_query import device
from ..measure.sweep import progress_bar
from ..models.mobilenet_v2 import HEAD_CHANNELS, STEM, MobileNetV2, blocks
from ..backends.parallel import run_parallel
from ..ops.depthwise import DepthwiseConv2d, floor_bytes, tiling_for
from ..ops.dw_project import DepthwiseProject, ProjectTiles
from ..ops.implicit import ImplicitConv2d
from ..peers.cudnn import handle_create_ms, load_cudnn
from ..shapes import ConvLayer
from .harness import checked_launch_ms

__all__ = ["ANCHOR_DEPTHWISE", "network_depthwise", "depthwise_rows", "network_rows", "layer_kinds",
           "kind_of", "cudnn_handle_ms", "depthwise_cost", "gemm_layers", "first_call_costs",
           "fused_rows", "copy_ms", "sweep_depthwise", "distinct_depthwise"]

# The depthwise shapes cuDNN was timed on in ../shared/anchors (batch, layer).
ANCHOR_DEPTHWISE = [(128, ConvLayer(512, 32, 32, 512, 3, 1, 1, 512)), (32, ConvLayer(144, 56, 56, 144, 3, 1, 1, 144)),
                    (32, ConvLayer(384, 14, 14, 384, 3, 1, 1, 384)), (32, ConvLayer(960, 7, 7, 960, 3, 1, 1, 960)),
                    (1, ConvLayer(32, 112, 112, 32, 3, 1, 1, 32)), (256, ConvLayer(144, 56, 56, 144, 3, 2, 1, 144))]


def gemm_layers(input_hw=(224, 224)) -> dict[str, ConvLayer]:
    """The network's distinct implicit-GEMM layers (stem, 1x1 expansions, projections, head), named
    by the first block that has each shape."""
    out: dict[str, ConvLayer] = {"stem": ConvLayer(3, input_hw[0], input_hw[1], STEM, 3, 2, 1)}
    bs = blocks(input_hw)
    for b in bs:
        for kind, (_prefix, L) in b.convs().items():
            if kind != "dw" and L not in out.values():
                out[f"{b.name}.{kind}"] = L
    ho, wo = bs[-1].out_hw
    out["head"] = ConvLayer(bs[-1].cout, ho, wo, HEAD_CHANNELS, 1)
    return out


def network_depthwise(batch: int, input_hw=(224, 224)) -> list[tuple[str, int, ConvLayer]]:
    """(block name, batch, layer) of each of the network's 17 depthwise layers."""
    return [(b.name, batch, b.convs()["dw"][1]) for b in blocks(input_hw)]


def distinct_depthwise(input_hw=(224, 224)) -> dict[str, ConvLayer]:
    """The network's distinct depthwise layers, named by the first block that has each shape."""
    out: dict[str, ConvLayer] = {}
    for name, _N, L in network_depthwise(1, input_hw):
        if L not in out.values():
            out[name] = L
    return out


def sweep_depthwise(layer: ConvLayer, N: int, tilings, *, repeat: int = 10) -> list[dict]:
    """Each tiling of the tiled rung on one layer (bias and ReLU6 fused): checked against the float64
    reference at batch 2 first (a wrong kernel never wins), then GPU ms per launch at batch N.  The
    tilings' modules compile side by side first."""
    xp = backends.xp()
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((layer.C, 1, 3, 3)) / 3).astype(np.float32)
    b = rng.standard_normal(layer.C).astype(np.float32)
    xs = rng.standard_normal((2, layer.C, layer.H, layer.W)).astype(np.float32)
    ref = reference.relu6(reference.conv2d(xs, w, b, stride=layer.stride, pad=1, groups=layer.C))
    wd, bd = xp.asarray(w), xp.asarray(b)
    layers = [DepthwiseConv2d(wd, bd, layer, activation="relu6", tiling=t) for t in tilings]
    run_parallel([lambda d=d: d.plan(N) for d in layers])
    x = xp.asarray(rng.standard_normal((N, layer.C, layer.H, layer.W), dtype=np.float32))
    y = xp.empty((N, layer.C) + layer.out_hw, dtype=xp.float32)
    rows = []
    xs, ys = xp.asarray(xs), xp.empty((2, layer.C) + layer.out_hw, dtype=xp.float32)
    for t, dw in zip(tilings, layers):
        ms, err = checked_launch_ms(f"depthwise {layer} with {t}", lambda dw=dw: dw(xs, ys), ys, ref, tol=1e-5,
                                    timed=lambda dw=dw: dw(x, y), repeat=repeat)
        rows.append({"layer": layer.key, "batch": N, "rows": t.rows, "planes": t.planes, "rpt": t.rpt,
                     "threads": t.threads, "stage": t.stage, "by_rows": t.by_rows, "median_ms": ms,
                     "floor_ms": measure.floor_ms(depthwise_cost(layer, N), device().ceilings()), "rel_error": err, "device": device().label,
                     "default": t == tiling_for(layer, N * layer.C)})
    return rows


def depthwise_cost(layer: ConvLayer, N: int) -> measure.Cost:
    """The depthwise layer's work: 9 multiply-adds an output, and its bytes at the floor (x read once,
    y written once: ``floor_bytes``)."""
    Ho, Wo = layer.out_hw
    return measure.Cost(2.0 * 9 * N * layer.C * Ho * Wo, float(floor_bytes(layer, N)), (N, layer.C, Ho, Wo))


def copy_ms(nbytes: int, *, repeat: int = 10) -> float:
    """GPU ms of a device-to-device copy that moves ``nbytes`` (half read, half written), timed as a
    layer is (``per_launch_ms``): what moving a small layer's bytes costs at its size, launch and
    ramp-up included, beside the floor's bandwidth of a large copy."""
    xp = backends.xp()
    half = max(4, nbytes // 2 // 4 * 4)
    src, dst = xp.zeros(half // 4, dtype=xp.float32), xp.empty(half // 4, dtype=xp.float32)
    return measure.per_launch_ms(lambda: dst.data.copy_from_device_async(src.data, half), repeat=repeat)


def depthwise_rows(cases, *, repeat: int = 10, progress: bool = True) -> list[dict]:
    """For each (name, batch, layer): labkit's naive and tiled rungs (bias and ReLU6 fused), cuDNN's
    depthwise convolution with bias (PyTorch, FP32, its fastest algorithm), the floor and, on a GPU,
    a copy of the floor's bytes (``copy_ms``); GPU time per launch (``per_launch_ms``).  A bar over
    the cases shows progress unless ``progress=False``."""
    xp = backends.xp()
    rng = np.random.default_rng(0)
    no_peer = peers.cudnn_available()
    rows = []
    for name, N, L in progress_bar(list(cases), desc="depthwise layers", show=progress):
        w = (rng.standard_normal((L.C, 1, 3, 3)) / 3).astype(np.float32)
        b = rng.standard_normal(L.C).astype(np.float32)
        xs = rng.standard_normal((2, L.C, L.H, L.W)).astype(np.float32)       # the check's two images
        ref = reference.relu6(reference.conv2d(xs, w, b, stride=L.stride, pad=1, groups=L.C))
        x = xp.asarray(rng.standard_normal((N, L.C, L.H, L.W), dtype=np.float32))
        wd, bd = xp.asarray(w), xp.asarray(b)
        xs, ys = xp.asarray(xs), xp.empty((2, L.C) + L.out_hw, dtype=xp.float32)
        row = {"name": name, "batch": N, "C": L.C, "H": L.H, "W": L.W, "stride": L.stride, "rel_err": 0.0,
               "floor_ms": measure.floor_ms(depthwise_cost(L, N), device().ceilings()), "device": device().label}
        for variant in ("naive", "tiled"):
            layer = DepthwiseConv2d(wd, bd, L, activation="relu6", variant=variant)
            y = layer(x)
            row[f"{variant}_ms"], err = checked_launch_ms(f"depthwise {L} ({variant})", lambda: layer(xs, ys), ys, ref,
                                                          tol=1e-5, timed=lambda: layer(x, y), repeat=repeat)
            row["rel_err"] = max(row["rel_err"], err)
            if variant == "tiled":
                t = layer.plan(N).tiling
                row["tiling"] = (f"rows {t.rows} planes {t.planes} rpt {t.rpt} threads {t.threads}"
                                 + (" staged" if t.stage else "") + (" by rows" if t.by_rows else ""))
        if backends.current() == "cuda":
            row["copy_ms"] = copy_ms(floor_bytes(L, N), repeat=repeat)
        if no_peer is None:
            y = xp.empty((N, L.C) + L.out_hw, dtype=xp.float32)
            run = peers.cudnn_conv2d(x, wd.reshape(L.C, 1, 3, 3), bd, stride=L.stride, pad=1, groups=L.C)
            row["cudnn_ms"] = measure.per_launch_ms(run, repeat=repeat, capture=peers.torch_capture)
        rows.append(row)
    return rows


def kind_of(step: str) -> str:
    """A plan step's kind of layer: depthwise, pointwise (1x1: expansions, projections, head), fused
    (depthwise and projection in one kernel), rest."""
    if step.endswith(".dw_project"):
        return "fused"
    if step.endswith(".dw"):
        return "depthwise"
    if step.endswith((".expand", ".project")) or step == "head":
        return "pointwise"
    return "rest"


def layer_kinds(net: MobileNetV2, N: int, *, repeat: int = 10) -> dict:
    """GPU ms of each kind of layer in a forward pass of N (each step timed, queued back to back)."""
    plan = net.plan(N)
    plan.x[...] = backends.xp().asarray(np.random.default_rng(N).standard_normal(plan.x.shape, dtype=np.float32))
    bd = measure.breakdown([(name, "kernel", fn) for name, fn in plan.steps], repeat=repeat)
    out = {"depthwise": 0.0, "pointwise": 0.0, "fused": 0.0, "rest": 0.0}
    for p in bd.parts:
        out[kind_of(p.name)] += p.median_ms
    return {"batch": N, **out, "steps": {p.name: p.median_ms for p in bd.parts}, "device": bd.device}


def network_rows(net: MobileNetV2, torch_run, batches, *, repeat: int = 10, torch_label: str = "fp32",
                 progress: bool = True) -> list[dict]:
    """Forward pass (softmax included) per batch: labkit eager (each kernel launched from Python) and
    as one CUDA graph; PyTorch eager and as a CUDA graph (``torch_run``: peers.torch_mobilenet_v2, or
    None; ``torch_label``: its precision, for the rows' labels).  The plans are let go after each batch.
    A bar over the batches shows progress unless ``progress=False``."""
    xp = backends.xp()
    rows = []
    for N in progress_bar(list(batches), desc=f"MobileNetV2 {net.precision} batches", show=progress):
        x = xp.asarray(np.random.default_rng(N).standard_normal((N, 3) + net.input_hw, dtype=np.float32))
        plan = net.plan(N)
        plan.x[...] = x
        t = measure.time_fn(lambda: plan.eager(x), repeat=repeat, sync=False)
        rows.append({"label": f"labkit {net.precision} eager", "batch": N, "median_ms": t.median_ms, "device": t.device})
        t = measure.time_fn(plan.run, repeat=repeat, sync=False)
        rows.append({"label": f"labkit {net.precision} graph", "batch": N, "median_ms": t.median_ms, "device": t.device})
        if torch_run is not None:
            t = measure.time_fn(lambda: torch_run(x), repeat=repeat, sync=False)
            rows.append({"label": f"PyTorch {torch_label} eager", "batch": N, "median_ms": t.median_ms, "device": t.device})
            replay = peers.torch_graph(torch_run.forward, peers.as_torch(x).clone())
            t = measure.time_fn(replay, repeat=repeat, sync=False)
            rows.append({"label": f"PyTorch {torch_label} graph", "batch": N, "median_ms": t.median_ms, "device": t.device})
            del replay
        net.clear_plans()
        measure.release_gpu_memory()
    return rows


def cudnn_handle_ms() -> dict | None:
    """ms of cudnnCreate (the first in this process, then a second) through ctypes on libcudnn, or None
    where there is no libcudnn to load."""
    lib = load_cudnn()
    if lib is None:
        return None
    try:
        return handle_create_ms(lib)
    except RuntimeError:
        return None


# Each first-call cost is measured in a fresh Python process (nothing loaded, nothing compiled in it):
# the script prints one JSON object.  Module imports are timed apart from what they enable.
_FIRST_CALL = r"""
import json, sys, time
what, hw = sys.argv[1], tuple(int(v) for v in sys.argv[2:4])
out = {}
t = time.perf_counter(); import cupy; out["import cupy ms"] = (time.perf_counter() - t) * 1e3
t = time.perf_counter(); cupy.zeros(1).sum(); cupy.cuda.Device().synchronize()
out["CUDA context ms"] = (time.perf_counter() - t) * 1e3
if what == "labkit":
    import numpy as np
    from labkit.models import mobilenet_v2 as mb
    w = mb.synthetic_weights()
    t = time.perf_counter(); net = mb.MobileNetV2(w, input_hw=hw); out["make network ms"] = (time.perf_counter() - t) * 1e3
    x = cupy.asarray(np.zeros((1, 3) + hw, np.float32))
    t = time.perf_counter(); net.logits(x).get(); out["first forward ms"] = (time.perf_counter() - t) * 1e3
    t = time.perf_counter(); net.logits(x).get(); out["second forward ms"] = (time.perf_counter() - t) * 1e3
elif what == "cudnn":
    import ctypes
    t = time.perf_counter(); lib = ctypes.CDLL("libcudnn.so.9"); out["load libcudnn ms"] = (time.perf_counter() - t) * 1e3
    h = ctypes.c_void_p()
    t = time.perf_counter(); assert lib.cudnnCreate(ctypes.byref(h)) == 0; out["cudnnCreate ms"] = (time.perf_counter() - t) * 1e3
elif what == "torch":
    t = time.perf_counter(); import torch, torchvision; out["import torch ms"] = (time.perf_counter() - t) * 1e3
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    t = time.perf_counter(); m = torchvision.models.mobilenet_v2(weights=None).cuda().eval()
    out["make network ms"] = (time.perf_counter() - t) * 1e3
    x = torch.zeros((1, 3) + hw, device="cuda")
    with torch.no_grad():
        t = time.perf_counter(); m(x).cpu(); out["first forward ms"] = (time.perf_counter() - t) * 1e3
        t = time.perf_counter(); m(x).cpu(); out["second forward ms"] = (time.perf_counter() - t) * 1e3
print(json.dumps(out))
"""


def _fresh_process(what: str, hw, env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", _FIRST_CALL, what, str(hw[0]), str(hw[1])], capture_output=True,
                       text=True, env=env, timeout=600)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def first_call_costs(input_hw=(224, 224)) -> dict[str, dict]:
    """What the first use costs, each in a fresh process (GPU only): the CUDA context; labkit's network
    made and run once with an empty kernel cache (every kernel compiled by NVRTC), then again in a
    new process that finds them in CuPy's cache on disk; libcudnn loaded and a cuDNN handle created;
    PyTorch imported, torchvision's network made and run once (cuDNN picking its algorithms)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "CUPY_CACHE_DIR": cache, "LABKIT_CACHE_DIR": cache}
        out["labkit, kernels compiled (empty cache)"] = _fresh_process("labkit", input_hw, env)
        out["labkit, kernels from the cache on disk"] = _fresh_process("labkit", input_hw, env)
    out["cuDNN handle"] = _fresh_process("cudnn", input_hw, dict(os.environ))
    out["PyTorch"] = _fresh_process("torch", input_hw, dict(os.environ))
    return out


def fused_rows(batch: int, input_hw=(224, 224), *, tiles=None, repeat: int = 10) -> list[dict]:
    """For each block whose depthwise output plane is at most 14 pixels on a side: its depthwise layer
    and projection as two kernels (the network's, tuned tiles) against dw_project.cu's one kernel for
    each of ``tiles`` (ProjectTiles), GPU time per launch; each fused result checked against the two
    kernels' first (relative 1e-5)."""
    xp = backends.xp()
    rng = np.random.default_rng(3)
    tiles = tiles or [ProjectTiles(32, 64, 8), ProjectTiles(64, 64, 8), ProjectTiles(32, 32, 8), ProjectTiles(64, 32, 8)]
    rows, seen = [], set()
    for b in blocks(input_hw):
        L = b.convs()["dw"][1]
        P = b.convs()["project"][1]
        if max(b.out_hw) > 14 or (L, P, b.residual) in seen:
            continue
        seen.add((L, P, b.residual))
        wdw = xp.asarray((rng.standard_normal((L.C, 1, 3, 3)) / 3).astype(np.float32))
        bdw = xp.asarray(rng.standard_normal(L.C).astype(np.float32))
        wp = xp.asarray((rng.standard_normal((P.M, P.C, 1, 1)) / np.sqrt(P.C)).astype(np.float32))
        bp = xp.asarray(rng.standard_normal(P.M).astype(np.float32))
        x = xp.asarray(rng.standard_normal((batch, L.C, L.H, L.W), dtype=np.float32))
        res = xp.asarray(rng.standard_normal((batch, P.M) + P.out_hw, dtype=np.float32)) if b.residual else None
        dw = DepthwiseConv2d(wdw, bdw, L, activation="relu6")
        proj = ImplicitConv2d(wp, bp, P, residual=b.residual)
        d = dw(x)
        ws = None if proj.workspace_shape(batch) is None else xp.empty(proj.workspace_shape(batch), dtype=xp.float32)
        extra = {"residual": res} if b.residual else {}
        y2 = proj(d, workspace=ws, **extra)
        row = {"name": b.name, "batch": batch, "C": L.C, "H": L.H, "stride": L.stride, "M": P.M,
               "residual": b.residual, "device": device().label,
               "two_kernels_ms": measure.per_launch_ms(lambda: proj(dw(x, d), y2, workspace=ws, **extra),
                                                       repeat=repeat)}
        ref = to_numpy(y2)       # the two kernels, each checked against float64 by its own tests
        for t in tiles:
            f = DepthwiseProject(wdw, bdw, wp, bp, L, residual=b.residual, tiles=t)
            y1 = f(x, **extra)
            row[f"fused {t.bm}x{t.bn}x{t.bk} ms"], _ = checked_launch_ms(
                f"dw_project {t} on {b.name}", lambda: f(x, y1, **extra), y1, ref, tol=1e-5, repeat=repeat)
        rows.append(row)
    return rows
