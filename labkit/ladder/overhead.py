"""What a launch costs the host, and what that does to small batches: notebooks 07 and 08 and
benchmarks/launch_overhead.py share this code.

    rows = host_costs()                       # host µs per call: raw CuPy, PyTorch, every labkit op and layer
    rows = forward_times("fashion", [100, 1000])   # labkit eager and graph beside PyTorch eager and graph
    fig = plot_forward(rows, "fashion")       # time per batch against batch size, the host floor drawn

At small batches a layer's GPU work takes a few microseconds, less than the host needs to launch it:
the forward pass then runs at the host's pace (host-bound), whatever the kernels do.  A CUDA graph
launches all of a forward's kernels with one call.
"""
from __future__ import annotations

import statistics
from typing import Callable

import numpy as np

from .. import backends, layers, measure
from ..device_query import device
from ..data import load_fashion_mnist
from ..loader import load_source
from ..measure.sweep import progress_bar
from ..models import alexnet, fashion_mnist as fm
from ..ops.gemm import gemm
from ..ops.rungs import conv2d
from ..peers import cudnn_available, cudnn_fashion_net, cudnn_fashion_net_graph, torch_alexnet, torch_alexnet_graph
from ..plots import batch_curves
from ..results import results_path
from ..checks import to_numpy
from ..shapes import ConvLayer
from .harness import check_output

__all__ = ["host_costs", "forward_times", "plot_forward", "summary"]

TRIVIAL = r'''extern "C" __global__ void add_one(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}'''


def _settle() -> Callable[[], None] | None:
    if backends.current() != "cuda":
        return None
    import cupy
    return cupy.cuda.get_current_stream().synchronize


def _row(label: str, group: str, times_us: list[float]) -> dict:
    q = np.percentile(times_us, [10, 90])
    return {"kind": "host_us", "label": label, "group": group, "median_us": float(statistics.median(times_us)),
            "p10_us": float(q[0]), "p90_us": float(q[1]), "calls": len(times_us), "device": device().label}


def _calls() -> dict[str, tuple[str, Callable[[], object]]]:
    """label -> (group, a zero-argument call) of every op and layer, on shapes so small that the GPU's
    work is a few microseconds: what is left is the host's cost of the call."""
    xp = backends.xp()
    rng = np.random.default_rng(0)

    def arr(*shape):
        return xp.asarray(rng.standard_normal(shape, dtype=np.float32))
    x, w, b, y = arr(1, 1, 12, 12), arr(2, 1, 3, 3), arr(2), arr(1, 2, 10, 10)
    calls: dict[str, tuple[str, Callable[[], object]]] = {}
    for v in ("naive", "tiled", "constant", "tuned"):
        conv = layers.Conv2d(w, b, variant=v)
        calls[f"conv2d({v})"] = ("conv", lambda v=v: conv2d(x, w, b, variant=v, out=y))
        calls[f"Conv2d({v}) layer"] = ("conv", lambda conv=conv: conv(x, y))
    xi, wi, bi, yi = arr(1, 4, 8, 8), arr(4, 4, 3, 3), arr(4), arr(1, 4, 8, 8)
    imp = layers.ImplicitConv2d(wi, bi, ConvLayer(4, 8, 8, 4, 3, pad=1))
    calls["ImplicitConv2d layer"] = ("conv", lambda: imp(xi, yi))
    a, bm, c, bias = arr(32, 64), arr(64, 64), arr(32, 64), arr(64)
    dense = layers.Dense(bm, bias, activation="relu")
    calls["gemm(a, b, bias)"] = ("gemm", lambda: gemm(a, bm, bias, out=c))
    calls["Dense layer"] = ("gemm", lambda: dense(a, c))
    xp_, yp = arr(1, 4, 8, 8), arr(1, 4, 4, 4)
    pool = layers.MaxPool2d(2, 2)
    calls["max_pool2d"] = ("pooling", lambda: layers.max_pool2d(xp_, 2, 2, out=yp))
    calls["MaxPool2d layer"] = ("pooling", lambda: pool(xp_, yp))
    xl, yl = arr(1, 8, 8, 8), arr(1, 8, 8, 8)
    norm = layers.LRN(2, 1.0, 2e-5, 0.75)
    calls["lrn"] = ("LRN", lambda: layers.lrn(xl, 2, 1.0, 2e-5, 0.75, out=yl))
    calls["LRN layer"] = ("LRN", lambda: norm(xl, yl))
    xs, ys = arr(4, 10), arr(4, 10)
    soft = layers.Softmax()
    calls["softmax"] = ("softmax", lambda: layers.softmax(xs, out=ys))
    calls["Softmax layer"] = ("softmax", lambda: soft(xs, ys))
    wc, bc, yc = arr(2, 1, 5, 5), arr(2), arr(1, 2, 4, 4)
    cp = layers.ConvPoolTanh(wc, bc)
    calls["conv_pool_tanh"] = ("conv", lambda: layers.conv_pool_tanh(x, wc, bc, out=yc))
    calls["ConvPoolTanh layer"] = ("conv", lambda: cp(x, yc))
    return calls


def host_costs(*, repeat: int = 1000, warmup: int = 100) -> list[dict]:
    """Host µs per call (median of ``repeat``, 10th and 90th percentiles) of: a raw CuPy RawKernel launch
    and PyTorch's ``add_`` (the floors; GPU only), ``labkit.load(...)`` + a checked launch, the same
    kernel's prepared launcher, and every labkit op and layer (outputs given, as inside a model)."""
    settle = _settle()
    rows = []
    xp = backends.xp()
    v = xp.zeros(256, dtype=xp.float32)
    n = np.int32(256)
    if backends.current() == "cuda":
        import cupy
        raw = cupy.RawKernel(TRIVIAL, "add_one")
        rows.append(_row("raw CuPy RawKernel", "floor", measure.host_us(
            lambda: raw((1,), (256,), (v, n)), warmup=warmup, repeat=repeat, settle=settle)))
        if cudnn_available() is None:
            import torch
            t = torch.zeros(256, device="cuda")
            rows.append(_row("PyTorch add_", "floor", measure.host_us(
                lambda: t.add_(1.0), warmup=warmup, repeat=repeat, settle=torch.cuda.synchronize)))
    mod = load_source(_trivial_file())
    fn = mod.get_function("add_one")
    rows.append(_row("labkit.load + launch (checked)", "launch", measure.host_us(
        lambda: load_source(_trivial_file()).get_function("add_one")((1,), (256,), (v, n)),
        warmup=warmup, repeat=repeat, settle=settle)))
    launch = fn.launcher((1,), (256,), (None, n))
    rows.append(_row(f"labkit launcher (prepared: {launch.path})", "launch", measure.host_us(
        lambda: launch(v), warmup=warmup, repeat=repeat, settle=settle)))
    for label, (group, call) in _calls().items():
        rows.append(_row(label, group, measure.host_us(call, warmup=warmup, repeat=repeat, settle=settle, every=8)))
    return rows


def _trivial_file():
    p = results_path("launch_overhead_add_one.cu")
    if not p.exists() or p.read_text() != TRIVIAL:
        p.write_text(TRIVIAL)
    return p


def _fashion_images(batch: int) -> np.ndarray:
    """The first ``batch`` test images (repeated past 10,000), preprocessed."""
    images, _ = load_fashion_mnist("test")
    return fm.preprocess(np.resize(images, (batch,) + images.shape[1:]))


def forward_times(model: str, batches, *, repeat: int = 20, warmup: int = 3, precision: str = "fp32",
                  peers: bool = True, weights: dict | None = None, progress: bool = True) -> list[dict]:
    """Time per forward pass (ms, CUDA events, calls queued back to back) of ``model`` ("fashion" or
    "alexnet") at each batch: labkit eager (each kernel launched from Python), labkit as one CUDA
    graph, the host's own time for an eager forward (its floor: no eager pass runs faster), and on a
    GPU with PyTorch the same network in PyTorch, eager and as a CUDA graph, in this same run.  The
    graph's output is checked against the eager pass's first (the same kernels: the same bits).
    ``weights``: the model's (default: the shipped Fashion-MNIST weights, AlexNet's load_weights).
    A bar over the batches shows progress unless ``progress=False``."""
    xp = backends.xp()
    settle = _settle()
    use_peer = peers and cudnn_available() is None
    rows = []
    tf32 = precision == "tf32"
    if model == "fashion":
        weights = weights or fm.load_weights()
        net = fm.FashionNet(weights)
        run_torch = cudnn_fashion_net(weights, tf32=tf32) if use_peer else None
    else:
        weights = weights or alexnet.load_weights()[0]
        net = alexnet.AlexNet(weights, precision=precision)
        run_torch = torch_alexnet(weights, tf32=tf32) if use_peer else None
    for N in progress_bar(list(batches), desc=f"{model} {precision} forward", show=progress):
        if model == "fashion":
            x_h = _fashion_images(N)
            graph_torch = (lambda: cudnn_fashion_net_graph(weights, N, tf32=tf32)) if use_peer else None
        else:
            x_h = (np.random.default_rng(N).standard_normal((N, 3, 227, 227), dtype=np.float32) * 50)
            graph_torch = (lambda: torch_alexnet_graph(weights, N, tf32=tf32)) if use_peer else None
        x = xp.asarray(x_h)
        plan = net.plan(N)
        plan.x[...] = x
        common = {"kind": "forward", "model": model, "batch": N, "precision": precision}
        t = measure.time_fn(lambda: net(x), warmup=warmup, repeat=repeat, sync=False)
        rows.append({**common, "label": "labkit eager", "median_ms": t.median_ms, "device": t.device})
        host = measure.host_us(lambda: net(x), warmup=warmup, repeat=repeat, settle=settle, every=1)
        rows.append({**common, "label": "host time of an eager forward", "median_ms": statistics.median(host) / 1e3,
                     "device": t.device})
        eager = to_numpy(net(x)).astype(np.float64)
        check_output(f"{model} at batch {N} as a graph", plan.run, plan.out, eager, tol=1e-6,
                     against="the eager pass")
        t = measure.time_fn(plan.run, warmup=warmup, repeat=repeat, sync=False)
        rows.append({**common, "label": "labkit graph", "median_ms": t.median_ms, "device": t.device})
        if run_torch is not None:
            t = measure.time_fn(lambda: run_torch(x), warmup=warmup, repeat=repeat, sync=False)
            rows.append({**common, "label": "PyTorch eager", "median_ms": t.median_ms, "device": t.device})
            t = measure.time_fn(graph_torch(), warmup=warmup, repeat=repeat, sync=False)
            rows.append({**common, "label": "PyTorch graph", "median_ms": t.median_ms, "device": t.device})
        del plan, x
        net.clear_plans()
        measure.release_gpu_memory()
    return rows


def plot_forward(rows: list[dict], title: str, ax=None, shipped: list[dict] = ()):
    """Time per forward against batch size, one curve per label; the host's time of an eager forward
    (the floor of eager launches) among them; ``shipped`` rows (another device's) dashed beside them."""
    return batch_curves([r for r in rows if r.get("kind") == "forward"], title=title, ax=ax,
                        ylabel="time per forward (ms)", shipped=[r for r in shipped if r.get("kind") == "forward"])


def summary(rows: list[dict]) -> str:
    """The host costs and the forward times as text tables."""
    out = []
    host = [r for r in rows if r.get("kind") == "host_us"]
    if host:
        out.append(f"{'call':34s} {'host µs':>8s} {'p10':>6s} {'p90':>6s}")
        out += [f"{r['label']:34s} {r['median_us']:8.1f} {r['p10_us']:6.1f} {r['p90_us']:6.1f}" for r in host]
    fwd = [r for r in rows if r.get("kind") == "forward"]
    for model, prec in dict.fromkeys((r["model"], r["precision"]) for r in fwd):
        sel = [r for r in fwd if r["model"] == model and r["precision"] == prec]
        labels = list(dict.fromkeys(r["label"] for r in sel))
        out.append(f"\n{model} ({prec}): ms per forward")
        out.append(f"{'batch':>6s} " + " ".join(f"{lab[:22]:>22s}" for lab in labels))
        for N in dict.fromkeys(r["batch"] for r in sel):
            cells = {r["label"]: r["median_ms"] for r in sel if r["batch"] == N}
            out.append(f"{N:6d} " + " ".join(f"{cells[lab]:22.3f}" if lab in cells else f"{'':22s}" for lab in labels))
    return "\n".join(out)
