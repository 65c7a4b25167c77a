"""The transfers study (notebook 09, benchmarks/streams.py): host<->device bandwidth, a model's forward
from host memory serially and through the sub-batch pipeline, the choice of sub-batch size, and the
same network in PyTorch (copy in, forward, copy out) in the same run.

    rows = bandwidth_rows([4 << 10, ..., 512 << 20])              # H2D/D2H, pinned/pageable, GB/s
    x = host_batch(net, 1024)                                     # pinned, filled once
    rows = pipeline_rows(net, x, [dict(streams=4, sub_batch=128), ...], peer=torch_serial)
    rows = sub_batch_rows(net, x, streams=4, sizes=[8, 16, ..., 256])

Every pipeline row holds ``median_ms`` (CUDA events on the caller's stream around the whole call:
first copy in to last copy out), ``label``, ``batch``, ``streams``, ``sub_batch`` and ``graphs``; the
plans are released after each configuration, so that the next one has the memory.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import backends, measure
from ..device_query import device
from ..measure.sweep import progress_bar
from ..pipeline import SubBatchPipeline, Timeline, copy_bandwidth, pinned_empty
from .harness import check_output

__all__ = ["COPY_SIZES", "bandwidth_rows", "plot_bandwidth", "bandwidth_summary", "host_batch", "pipeline_rows", "timeline_rows", "sub_batch_rows",
           "torch_serial", "schedule_label", "tuned_rows",
           "check_enqueue", "host_rows"]

COPY_SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20, 256 << 20, 512 << 20]


def bandwidth_rows(sizes: Sequence[int] = COPY_SIZES, *, repeat: int = 10) -> list[dict]:
    """Host<->device copies of each size from pinned and from pageable host memory, both directions."""
    rows = copy_bandwidth(sizes, pinned=True, repeat=repeat) + copy_bandwidth(sizes, pinned=False, repeat=repeat)
    for r in rows:
        r.update(kind="bandwidth", device=device().label)
    return rows


def plot_bandwidth(rows: Sequence[dict], *, shipped: Sequence[dict] = (), title: str = "host <-> device bandwidth"):
    """GB/s against bytes per copy, a line per label of ``rows`` (bandwidth_rows), ``shipped`` rows
    of another device dashed beside them in the same colours; log bytes, log GB/s where the values
    span a decade or more, the legend beside the axes.  Returns the figure."""
    import matplotlib.pyplot as plt
    from .. import plots
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    labels = list(dict.fromkeys(r["label"] for r in rows))
    colours = plots.colour_map(labels + [r["label"] for r in shipped])
    for lab in labels:
        sel = sorted((r["bytes"], r["GBps"]) for r in rows if r["label"] == lab)
        ax.plot(*zip(*sel), marker="o", color=colours[lab], label=f"{lab}, this run")
    other = plots.shipped_lines(ax, shipped, x="bytes", y="GBps", beside=rows, colours=colours)
    ax.set_xscale("log")
    if plots.spans_decades([r["GBps"] for r in list(rows) + other]):
        ax.set_yscale("log")
    ax.set(xlabel="bytes per copy", ylabel="GB/s")
    ax.grid(True, which="both", alpha=0.3)
    devices = list(dict.fromkeys([r.get("device") or device().label for r in rows] + [r["device"] for r in other]))
    ax.set_title(f"{title}\n{', '.join(devices)}" + (" (dashed: shipped)" if other else ""), fontsize=10)
    plots.legend_outside(ax)
    fig.tight_layout()
    return fig


def bandwidth_summary(rows: Sequence[dict], *, within: float = 0.1) -> list[str]:
    """One line per direction of ``rows`` (bandwidth_rows): how pinned and pageable copies compare
    at each size, in words from the measured values ("within 10%" or "pinned 3.2x faster")."""
    lines = []
    for direction in ("H2D", "D2H"):
        pinned = {r["bytes"]: r["GBps"] for r in rows if r["label"] == f"{direction} pinned"}
        pageable = {r["bytes"]: r["GBps"] for r in rows if r["label"] == f"{direction} pageable"}
        common = sorted(set(pinned) & set(pageable))
        if not common:
            continue
        ratios = [pinned[b] / pageable[b] for b in common]
        lo, hi = min(ratios), max(ratios)
        if all(abs(q - 1) <= within for q in ratios):
            verdict = f"within {100 * within:.0f}% of each other at every size"
        else:
            verdict = f"pinned / pageable from {lo:.1f}x to {hi:.1f}x"
        lines.append(f"{direction}, {_size(common[0])} to {_size(common[-1])}: {verdict}")
    return lines


def _size(nbytes: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):g} {unit}"
    return f"{nbytes} B"


def host_batch(model, N: int, *, seed: int = 0, source: np.ndarray | None = None) -> np.ndarray:
    """A pinned host batch of N inputs for ``model``: ``source``'s images repeated, or random ones."""
    shape = tuple(int(s) for s in model.plan(1).x.shape[1:])
    x = pinned_empty((N,) + shape)
    if source is not None:
        x[...] = source[np.arange(N) % len(source)]
    else:
        x[...] = np.random.default_rng(seed).standard_normal(x.shape, dtype=np.float32)
    return x


def schedule_label(streams: int, sub_batch, graphs: bool = True) -> str:
    sub = "auto" if sub_batch is None else (str(sub_batch) if isinstance(sub_batch, int)
                                           else "ramp " + "-".join(map(str, sub_batch)))
    return f"pipeline, {streams} stream{'s' if streams > 1 else ''}, sub-batch {sub}" + ("" if graphs else ", eager")


def pipeline_rows(model, x: np.ndarray, configs: Sequence[dict], *, repeat: int = 10, warmup: int = 2,
                  baselines: bool = True, peer: Callable[[np.ndarray], dict] | None = None,
                  progress: bool = True) -> list[dict]:
    """The forward of host batch ``x`` timed: with ``baselines``, the compute alone (one CUDA graph,
    input already on the device) and the serial pass (copy in, graph, copy out); then the pipeline
    in each configuration (SubBatchPipeline's keyword arguments).  ``peer(x)``: more rows (PyTorch).
    Each pipeline's output is checked against the serial pass's before it is timed: the same kernels
    on the same images, but a sub-batch's size may pick other tiles or splits of K, so float32's
    rounding apart (1e-4 of the largest output, as tests/test_pipeline.py holds AlexNet's), TF32's
    where the model runs it).  A bar over the configurations shows progress unless ``progress=False``."""
    N = int(x.shape[0])
    dev = device().label
    common = {"kind": "forward", "batch": N, "device": dev}
    rows = []
    base = SubBatchPipeline(model, streams=1)
    ref = np.array(base.serial(x), dtype=np.float64)       # what every schedule must give
    tol = 1e-3 if getattr(model, "precision", "fp32") == "tf32" else 1e-4
    if baselines:
        plan = base.serial_plan(N)
        rows.append({**common, "label": "compute only (graph)", "median_ms": measure.time_fn(plan.run, repeat=repeat,
                                                                                     warmup=warmup, sync=True).median_ms})
        out = pinned_empty((N,) + base.output_shape)
        rows.append({**common, "label": "serial: copy in, graph, copy out",
                     "median_ms": measure.time_fn(lambda: base.serial(x, out, sync=False), repeat=repeat,
                                                  warmup=warmup, sync=True).median_ms})
        del plan
    base.release()
    del base
    measure.release_gpu_memory()
    for cfg in progress_bar(list(configs), desc=f"pipelines, batch {N}", show=progress):
        pipe = SubBatchPipeline(model, **cfg)
        out = pinned_empty((N,) + pipe.output_shape)
        pipe.prepare(N)
        label = schedule_label(pipe.streams, cfg.get("sub_batch"), pipe.graphs)
        check_output(label, lambda: pipe.run(x, out), out, ref, tol=tol, against="the serial pass")
        ms = measure.time_fn(lambda: pipe.run(x, out, sync=False), repeat=repeat, warmup=warmup, sync=True).median_ms
        sizes = [b - a for a, b in pipe.chunks(N)]
        if "devices" in cfg:
            label += f", devices={cfg['devices']!r} ({len(pipe.devices)} used)"
        rows.append({**common, "label": label,
                     "median_ms": ms, "streams": pipe.streams, "sub_batch": cfg.get("sub_batch"),
                     "sub_batches": len(sizes), "first_sub_batch": sizes[0], "graphs": pipe.graphs,
                     "devices": len(pipe.devices)})
        pipe.release()
        del pipe
        measure.release_gpu_memory()
    if peer is not None:
        rows += [{**common, **r} for r in peer(x)]
    return rows


def timeline_rows(model, x: np.ndarray, *, serial: bool = False, **config) -> list[dict]:
    """The stages of one forward of ``x`` through a pipeline in ``config`` (SubBatchPipeline's keyword
    arguments), or its serial pass: Timeline rows from a run after a warm-up run (compiles, graph
    captures and first copies happen there)."""
    pipe = SubBatchPipeline(model, **config)
    pipe.prepare(int(x.shape[0]))
    run = pipe.serial if serial else pipe.run
    run(x)
    tl = Timeline()
    run(x, timeline=tl)
    rows = tl.rows()
    pipe.release()
    return rows


def tuned_rows(model, x: np.ndarray, *, streams: Sequence[int] = (4, 8), repeat: int = 10, warmup: int = 2,
               tune_repeat: int = 5, candidates=None, progress: bool = True) -> list[dict]:
    """For each stream count: ``SubBatchPipeline.tune`` over its candidate schedules, then the kept
    schedule timed again (``repeat``), and the fastest schedule that really splits the batch (two
    sub-batches or more) beside it: what overlap buys at this batch, even where it loses.
    ``candidates``: the schedules to try (default: ``SubBatchPipeline.candidates``).  A bar over the
    candidates of each tune shows progress unless ``progress=False``."""
    N = int(x.shape[0])
    common = {"kind": "forward", "batch": N, "device": device().label}
    rows = []
    for S in streams:
        pipe = SubBatchPipeline(model, streams=S)
        tried = pipe.tune(x, candidates, repeat=tune_repeat, progress=progress)
        split = next((r for r in tried if r["sub_batches"] > 1), None)
        out = pinned_empty((N,) + pipe.output_shape)
        for what, sched in (("tuned", tried[0]["schedule"]), ("best split", split and split["schedule"])):
            if sched is None:
                continue
            pipe.tune(x, candidates=[sched], repeat=1, warmup=0, progress=False)   # keep this one, drop the other plans
            pipe.prepare(N)
            ms = measure.time_fn(lambda: pipe.run(x, out, sync=False), repeat=repeat, warmup=warmup, sync=True).median_ms
            rows.append({**common, "label": f"pipeline, {S} streams, {what}", "median_ms": ms, "streams": S,
                         "sub_batch": sched, "sub_batches": len(pipe.chunks(N)), "graphs": True,
                         "schedule": schedule_label(S, sched), "tried": tried if what == "tuned" else None})
        pipe.release()
        del pipe
        measure.release_gpu_memory()
    return rows


def sub_batch_rows(model, x: np.ndarray, *, streams: int, sizes: Sequence[int], graphs: bool = True,
                   repeat: int = 10, warmup: int = 2, progress: bool = True) -> list[dict]:
    """The pipeline at each sub-batch size (``streams`` streams): too small and each sub-batch's
    kernels are too short to fill the GPU, and launches set the pace; too large and the first copy,
    which nothing hides, grows."""
    rows = pipeline_rows(model, x, [dict(streams=streams, sub_batch=int(s), graphs=graphs) for s in sizes],
                         repeat=repeat, warmup=warmup, baselines=False, progress=progress)
    for r in rows:
        r["kind"] = "sub_batch"
    return rows


def torch_serial(forward: Callable[[object], object], *, repeat: int = 10, warmup: int = 2
                 ) -> Callable[[np.ndarray], list[dict]]:
    """The PyTorch peer of the serial pass: ``forward`` (a function of a CUDA tensor, e.g.
    labkit.peers.torch_alexnet(w).forward) alone, and with its input copied in from PyTorch's own
    pinned memory and its output copied back (``non_blocking`` copies), timed in the same way."""
    def rows(x: np.ndarray) -> list[dict]:
        import torch
        if backends.current() != "cuda":
            return []
        xh = torch.from_numpy(np.ascontiguousarray(x)).pin_memory()
        xd = xh.to("cuda")
        y = forward(xd)
        yh = torch.empty(tuple(y.shape), dtype=y.dtype).pin_memory()

        def serial():
            xd.copy_(xh, non_blocking=True)
            yh.copy_(forward(xd), non_blocking=True)
        out = [{"label": "PyTorch compute only", "median_ms": measure.time_fn(lambda: forward(xd), repeat=repeat,
                                                                      warmup=warmup, sync=True).median_ms},
               {"label": "PyTorch serial: copy in, forward, copy out",
                "median_ms": measure.time_fn(serial, repeat=repeat, warmup=warmup, sync=True).median_ms}]
        del xh, xd, yh, y
        torch.cuda.empty_cache()
        return out
    return rows



def check_enqueue(enqueue: Callable, model, N: int, *, streams: int = 2, sub_batch: int = 3) -> dict:
    """Run a batch of N through a pipeline whose sub-batches are queued by ``enqueue(plan, x, out, a, b,
    stream)`` (a student's version of SubBatchPipeline.enqueue) on fresh random inputs with a
    poisoned (NaN) output, and compare each sub-batch with the model's own forward of it.  Returns
    ``{"ok": bool, "message": words}``: which sub-batches are wrong, and how (never written, or
    other values: an earlier sub-batch's, or values read before they were ready)."""
    pipe = SubBatchPipeline(model, streams=streams, sub_batch=sub_batch)
    x = pinned_empty((N,) + pipe.input_shape)
    x[...] = np.random.default_rng().random(x.shape, dtype=np.float32)
    out = pinned_empty((N,) + pipe.output_shape)
    out[...] = np.nan
    pipe.prepare(N)
    jobs = pipe.assignments(N)
    record = getattr(enqueue, "record", None)
    if callable(record):
        # ``enqueue`` runs in another process (the grader's: a student's function in its sandbox), where
        # the plan and the stream cannot be handed: it is run there on stand-ins that record its calls,
        # and the calls are made here, on the real ones (labkit.pipeline.recording).
        from ..pipeline.recording import RecordingError, replay_enqueue
        calls = record("enqueue", [{"a": a, "b": b, "x_shape": list(x.shape), "out_shape": list(out.shape),
                                    "plan_x_shape": list(lane.plans[b - a].x.shape),
                                    "plan_out_shape": list(lane.plans[b - a].out.shape)} for a, b, lane in jobs])
        if not isinstance(calls, list) or len(calls) != len(jobs):
            raise RecordingError("the recorded calls do not match the sub-batches")
        for (a, b, lane), made in zip(jobs, calls):
            replay_enqueue(made, lane.plans[b - a], x, out, lane.stream)
    else:
        for a, b, lane in jobs:
            enqueue(lane.plans[b - a], x, out, a, b, lane.stream)
    pipe.synchronize()
    xp = backends.xp()
    problems = []
    for i, (a, b, lane) in enumerate(jobs):
        want = model.plan(b - a).eager(xp.asarray(x[a:b]))
        want = want.get() if hasattr(want, "get") else np.asarray(want)
        got = out[a:b]
        if np.isnan(got).all():
            problems.append(f"sub-batch {i} (rows {a}-{b - 1}, {lane.name}): never written (still NaN)")
        elif not np.array_equal(got, want):
            bad = int((~np.isclose(got, want, rtol=1e-5, atol=1e-7)).any(axis=1).sum())
            problems.append(f"sub-batch {i} (rows {a}-{b - 1}, {lane.name}): {bad} of {b - a} rows differ from "
                            f"the forward of x[{a}:{b}] (max error {np.nanmax(np.abs(got - want)):.2e})")
    pipe.release()
    if not problems:
        return {"ok": True, "message": "every sub-batch matches the model's own forward: True"}
    return {"ok": False, "message": "wrong:\n  " + "\n  ".join(problems)}


def host_rows(model, x: np.ndarray, *, streams: int = 4, sub_batch=None, repeat: int = 50) -> list[dict]:
    """Host µs per ``pipe.run(x, sync=False)``: the checks, the events and every copy and graph launch
    of every sub-batch, queued; the GPU drained (untimed) between calls so the queue never fills."""
    N = int(x.shape[0])
    pipe = SubBatchPipeline(model, streams=streams, sub_batch=sub_batch)
    out = pinned_empty((N,) + pipe.output_shape)
    pipe.prepare(N)
    us = measure.host_us(lambda: pipe.run(x, out, sync=False), warmup=3, repeat=repeat, settle=pipe.synchronize,
                         every=1)
    n_sub = len(pipe.chunks(N))
    pipe.release()
    measure.release_gpu_memory()
    return [{"kind": "host_us", "batch": N, "label": schedule_label(streams, sub_batch), "sub_batches": n_sub,
             "median_us": float(np.median(us)), "per_sub_batch_us": float(np.median(us)) / n_sub,
             "device": device().label}]
