"""Measuring AlexNet the way the seeds did: per kernel and per copy, across batch sizes, with the first
call, allocation and memory shown apart.  Used by benchmarks/alexnet.py and notebook 08.

    net = AlexNet(weights)
    bd = forward_breakdown(net, batch=64, pinned=True)      # H2D, every kernel, D2H (labkit.measure.Breakdown)
    fc = first_call(weights, batch=1)                       # preparing the net, allocating, the first forward
    mem = memory(net, batch=64)                             # bytes: weights, activations, workspace per layer
    rows = sweep(net, [1, 2, 4, ...])                       # one row per batch and part, and per batch the whole
"""
from __future__ import annotations

import numpy as np

from .. import backends
from ..loader import reload
from ..measure import breakdown, release_gpu_memory, time_fn, time_region
from ..measure.sweep import progress_bar
from .alexnet import INPUT_SHAPE, AlexNet, weight_bytes

__all__ = ["forward_breakdown", "first_call", "memory", "sweep", "graph_ms", "host_buffer"]


def _sync() -> None:
    if backends.current() == "cuda":
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def host_buffer(shape, pinned: bool) -> np.ndarray:
    """A float32 host array; on a GPU, ``pinned`` puts it in page-locked memory (DMA straight from it)."""
    if pinned and backends.current() == "cuda":
        import cupy
        mem = cupy.cuda.alloc_pinned_memory(int(np.prod(shape)) * 4)
        return np.frombuffer(mem, np.float32, int(np.prod(shape))).reshape(shape)
    return np.empty(shape, np.float32)


def forward_breakdown(net: AlexNet, batch: int, *, pinned: bool = True, warmup: int = 2, repeat: int = 10,
                      x_host: np.ndarray | None = None):
    """The forward pass from a host batch to host probabilities: the input copy, every kernel, the
    output copy, each timed (labkit.measure.breakdown), buffers allocated beforehand."""
    on_gpu = backends.current() == "cuda"
    plan = net.plan(batch)
    x_h = host_buffer((batch,) + INPUT_SHAPE, pinned)
    x_h[...] = np.random.default_rng(0).standard_normal(x_h.shape, dtype=np.float32) * 50 if x_host is None \
        else x_host
    out = plan.buffers["softmax"]
    y_h = host_buffer(tuple(out.shape), pinned)
    to_dev, to_host = ("[CUDA memcpy HtoD]", "[CUDA memcpy DtoH]") if on_gpu else \
        ("[host copy, as HtoD]", "[host copy, as DtoH]")
    mem = "pinned" if pinned and on_gpu else "pageable"
    h2d = (lambda: plan.x.set(x_h)) if on_gpu else (lambda: np.copyto(plan.x, x_h))
    d2h = (lambda: out.get(out=y_h)) if on_gpu else (lambda: np.copyto(y_h, out))
    steps = [(f"{to_dev} x ({mem})", "H2D", h2d)]
    steps += [(name, "kernel", fn) for name, fn in plan.steps]
    steps.append((f"{to_host} probabilities ({mem})", "D2H", d2h))
    return breakdown(steps, warmup=warmup, repeat=repeat,
                     meta={"batch": batch, "host_memory": mem, "precision": net.precision})


def first_call(weights: dict[str, np.ndarray], batch: int = 1, *, precision: str = "fp32") -> dict[str, float]:
    """ms of what happens once: making the network (weights to the device, TF32 packing, loading
    each kernel module: compiled now, or taken from CuPy's cache on disk if an earlier run compiled
    it), allocating a batch's buffers, the first forward (first launches, each layer's plan made),
    a second forward (for comparison), and freeing the buffers.  labkit's in-process caches of
    modules and plans are emptied first (labkit.reload)."""
    reload()
    out = {}
    with time_region() as t:
        net = AlexNet(weights, precision=precision)
        _sync()
    out["prepare network (weights, modules)"] = t.ms
    with time_region() as t:
        plan = net.plan(batch)
        _sync()
    out["allocate activations"] = t.ms
    for label in ("first forward", "second forward"):
        with time_region() as t:
            for _name, fn in plan.steps:
                fn()
            _sync()
        out[label] = t.ms
    with time_region() as t:
        del plan
        net.clear_plans()
        if backends.current() == "cuda":
            import cupy
            cupy.get_default_memory_pool().free_all_blocks()
        _sync()
    out["free activations"] = t.ms
    return out


def memory(net: AlexNet, batch: int) -> list[dict]:
    """Bytes per layer: weights (as the kernels hold them; TF32 packs and pads its convolutions'),
    activations (the layer's output buffer at this batch) and workspace (split-K's partial products
    at small batches, in the convolutions and the dense layers; never a column matrix: the implicit
    GEMMs do not write one, where im2col's would be K*K times the layer's input)."""
    plan = net.plan(batch)
    acts, ws = plan.activation_bytes, plan.workspace_bytes
    held = {name: int(c.wt.nbytes) + int(c.b.nbytes) for name, c in net.convs.items()}
    wb = weight_bytes({k: v for k, v in net.w.items() if k.startswith("fc")})
    rows = [{"component": "input", "weights": 0, "activations": acts["input"], "workspace": 0}]
    for name in plan.buffers:
        rows.append({"component": name, "weights": held.get(name, wb.get(name, 0)),
                     "activations": acts[name], "workspace": ws.get(name, 0)})
    for r in rows:
        r["batch"] = batch
    return rows


def graph_ms(net: AlexNet, batch: int, *, repeat: int = 10) -> float:
    """The forward pass's kernels launched as one CUDA graph (Plan.run), median ms: the GPU's time
    with no host in between (on the CPU executor, the steps one by one)."""
    plan = net.plan(batch)
    plan.x[...] = 0.5
    return time_fn(plan.run, warmup=2, repeat=repeat, sync=False).median_ms


def sweep(net: AlexNet, batches, *, pinned: bool = True, repeat: int = 10, progress: bool = False) -> list[dict]:
    """forward_breakdown at each batch size: one row per part (kernel or copy), a row
    ``name="whole"`` with the op time (the kernels' sum), copy time and whole time, and a row
    ``name="graph"`` with the kernels as one CUDA graph.  At small batches the per-kernel times
    include the GPU waiting for Python to launch the next kernel; the graph's does not."""
    rows = []
    for n in progress_bar(list(batches), desc="AlexNet batch sweep", show=progress):
        bd = forward_breakdown(net, n, pinned=pinned, repeat=repeat)
        rows += bd.rows()
        common = {"batch": n, "device": bd.device, "host_memory": bd.meta["host_memory"], "precision": net.precision}
        rows.append({"name": "whole", "kind": "whole", "median_ms": bd.whole_ms, "op_ms": bd.op_ms,
                     "copy_ms": bd.copy_ms, **common})
        g = graph_ms(net, n, repeat=repeat)
        rows.append({"name": "graph", "kind": "graph", "median_ms": g, "op_ms": g, **common})
        net.clear_plans()            # the next, larger batch needs the memory
        release_gpu_memory()
    return rows
