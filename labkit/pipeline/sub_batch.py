"""A batch split into sub-batches that flow through several streams, and several GPUs, at once.

    pipe = SubBatchPipeline(net, streams=4, sub_batch=128)     # any labkit model with plans
    x = pinned_empty((1024,) + pipe.input_shape); x[...] = images
    probs = pipe.run(x)                   # host (N, ...) in order; the same numbers as the serial pass
    probs = pipe.serial(x)                # the baseline: copy all in, compute, copy all out
    tl = Timeline(); pipe.run(x, timeline=tl); plot_timeline(tl.rows())

Why: a forward pass that starts from host memory first waits for its input to cross PCIe, and the
GPU's SMs idle meanwhile; the copy engines idle while the kernels run.  Cut the batch into
sub-batches and give each stream its own: while stream 1 runs the forward of sub-batch 1, stream 2
copies sub-batch 2 in, and stream 0 copies sub-batch 0's result out.  Only the first copy in and
the last copy out are left exposed.  The copies must come from pinned host memory
(labkit.pipeline.pinned_empty): from pageable memory a copy makes the host wait for it, and
nothing overlaps.

How: each stream owns a plan of the model for its sub-batch size (input, activations and output
buffers of its own, and the forward as one CUDA graph when ``graphs``), made once by ``prepare``.
Sub-batch i goes to stream i mod S (devices first: consecutive sub-batches go to different GPUs);
on its stream the copy in, the forward and the copy out run in order, so a stream's next copy in
waits until its previous forward has read its input buffer: no events are needed between stages of
one stream, and streams never share a buffer.  An event recorded on the caller's stream starts
every stream, and the caller's stream waits for an event at the end of each: ``run`` is ordered
like any other work on the caller's stream, and CUDA events around it time the whole pipeline.

A batch that does not divide evenly ends with a smaller sub-batch (its own plan, made once).
``sub_batch`` may also be a list of sizes, used in order, the last one repeated: [16, 64, 256]
starts small, so that the first copy (which nothing hides) is short, then grows.

Several GPUs: ``devices="all"`` (or a count, or a list of device ids) gives each GPU a replica of
the model (its weights copied there once) and its own streams; sub-batches are dealt out to the
GPUs in turn and come back into one host array in order.  On a one-GPU host "all" is that GPU, and
``describe()`` says so.  On the CPU executor there are no streams: the same stages run one after
another (the timeline shows that), and ``devices=k`` makes k replicas, so the dealing-out and
gathering are tested there too.
"""
from __future__ import annotations

import math
from contextlib import nullcontext
from typing import Sequence

import numpy as np

from ..errors import check_int
from .. import backends
from ..backends.clock import times_ms
from ..measure.sweep import progress_bar
from .host_memory import copy_in, copy_out, pinned_empty
from .timeline import Timeline

__all__ = ["SubBatchPipeline", "split_batch"]


def split_batch(N: int, sub_batch) -> list[tuple[int, int]]:
    """[(start, stop)] of the sub-batches of a batch of N: ``sub_batch`` an int, or a list of sizes
    used in order with the last one repeated; the last sub-batch takes what is left."""
    N = int(N)
    if N < 1:
        raise ValueError(f"the batch must hold at least one image, got N={N}")
    sizes = list(sub_batch) if isinstance(sub_batch, (list, tuple)) else [sub_batch]
    if not sizes or any(not isinstance(s, (int, np.integer)) or isinstance(s, bool) or s < 1 for s in sizes):
        raise ValueError(f"sub_batch must be a positive int or a non-empty list of them, got {sub_batch!r}")
    out, start, i = [], 0, 0
    while start < N:
        size = int(sizes[min(i, len(sizes) - 1)])
        out.append((start, min(N, start + size)))
        start += size
        i += 1
    return out


class _Lane:
    """One stream of one device: its model replica, its plans (one per sub-batch size)."""

    def __init__(self, device: int, index: int, model, stream):
        self.device, self.index, self.model, self.stream = device, index, model, stream
        self.plans: dict[int, object] = {}

    @property
    def name(self) -> str:
        where = f"GPU {self.device}" if self.stream is not None else f"replica {self.device}"
        return f"{where} · stream {self.index}"


class SubBatchPipeline:
    """A PlannedModel's forward over a host batch, in sub-batches on ``streams`` streams per device."""

    def __init__(self, model, *, streams: int = 4, sub_batch=None, graphs: bool = True, devices=None):
        if not hasattr(model, "new_plan"):
            raise TypeError(f"the pipeline takes a labkit model with plans (FashionNet, AlexNet, ...), "
                            f"got {type(model).__name__}")
        check_int(streams, "streams")
        if sub_batch is not None:
            split_batch(1, sub_batch)                     # the same checks, now rather than at run
        self.model, self.streams, self.sub_batch, self.graphs = model, int(streams), sub_batch, bool(graphs)
        self.on_gpu = backends.current() == "cuda"
        self.devices, self.note = self._pick_devices(devices)
        self.lanes = self._make_lanes()
        probe = model.plan(1)
        self.input_shape = tuple(int(s) for s in probe.x.shape[1:])
        self.output_shape = tuple(int(s) for s in probe.out.shape[1:])
        self._serial: dict[int, object] = {}
        self._outputs: dict[int, np.ndarray] = {}
        self._prepared: set = set()
        self._tuned: dict[int, object] = {}

    # -- set-up, once -------------------------------------------------------------------------------
    def _pick_devices(self, devices) -> tuple[list[int], str]:
        if not self.on_gpu:
            k = 1 if devices in (None, "all") else (devices if isinstance(devices, int) else len(devices))
            if isinstance(k, bool) or k < 1:
                raise ValueError(f"devices must be 'all', a positive count or a list of ids, got {devices!r}")
            return list(range(k)), (f"CPU executor: {_count(k, 'replica', 'replicas')} of the model, run one after the other "
                                    "(no streams, no GPUs: the stages serialise)")
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
        here = cupy.cuda.Device().id
        if devices is None:
            ids = [here]
        elif devices == "all":
            ids = list(range(count))
        elif isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
            if not 1 <= devices <= count:
                raise ValueError(f"devices={devices}: this host has {_count(count, 'GPU', 'GPUs')}")
            ids = list(range(int(devices)))
        else:
            ids = [int(d) for d in devices]
            bad = [d for d in ids if not 0 <= d < count]
            if not ids or bad:
                raise ValueError(f"devices={devices!r}: this host has GPU ids 0..{count - 1}")
        names = [cupy.cuda.runtime.getDeviceProperties(d)["name"].decode() for d in sorted(set(ids))]
        if len(set(ids)) == 1 and devices == "all":
            note = f"this host has one GPU ({names[0]}): the pipeline runs on it alone"
        elif len(set(ids)) < len(ids):
            note = (f"{len(ids)} replicas on GPU(s) {sorted(set(ids))}: a device listed twice gets two "
                    "replicas (the multi-GPU path, exercised on fewer GPUs)")
        else:
            note = f"{_count(len(ids), 'GPU', 'GPUs')}: " + ", ".join(f"{d}: {n}" for d, n in zip(sorted(set(ids)), names))
        return ids, note

    def _make_lanes(self) -> list[_Lane]:
        # The model given lives on the device current now; every other device (or a device listed
        # twice) gets a replica, its weights copied there once.
        here = None
        if self.on_gpu:
            import cupy
            here = cupy.cuda.Device().id
        replicas = []
        for pos, dev in enumerate(self.devices):
            if not self.on_gpu:
                replicas.append(self.model if pos == 0 else self.model.replica())
                continue
            with cupy.cuda.Device(dev):
                replicas.append(self.model if pos == 0 and dev == here else self.model.replica())
        lanes = []
        for s in range(self.streams):                         # devices first: consecutive sub-batches
            for pos, dev in enumerate(self.devices):          # go to different GPUs
                stream = None
                if self.on_gpu:
                    import cupy
                    with cupy.cuda.Device(dev):
                        stream = cupy.cuda.Stream(non_blocking=True)
                lanes.append(_Lane(dev if self.on_gpu else pos, s, replicas[pos], stream))
        return lanes

    def chunks(self, N: int) -> list[tuple[int, int]]:
        """The sub-batches of a batch of N: the schedule ``tune`` chose for N, else ``sub_batch`` as
        given, else two per stream of every device (each stream has a second sub-batch to copy in
        while its first computes)."""
        size = self._tuned.get(N)
        if size is None:
            size = self.sub_batch if self.sub_batch is not None else max(1, math.ceil(N / (2 * len(self.lanes))))
        return split_batch(N, size)

    def candidates(self, N: int) -> list:
        """Schedules ``tune`` tries for a batch of N: the whole batch as one sub-batch (the serial pass
        through the pipeline), equal sub-batches (2 to 32 of them), and ramps that start with a
        quarter, an eighth or a sixteenth (a short first copy, which nothing hides) and continue with
        a quarter, a half or all the rest."""
        out: list = []
        for k in (1, 2, 4, 8, 16, 32):
            if N // k >= 1:
                out.append(math.ceil(N / k))
        for first in (16, 8, 4):
            for rest in (4, 2, 1):
                if N // first >= 1:
                    out.append([math.ceil(N / first), math.ceil(N / rest)])
        unique = []
        for c in out:
            if c not in unique:
                unique.append(c)
        return unique

    def tune(self, x: np.ndarray, candidates=None, *, repeat: int = 5, warmup: int = 1,
             progress: bool = True) -> list[dict]:
        """Time each candidate schedule (``candidates(N)`` by default) on host batch ``x`` and keep the
        fastest for its N: later runs of N use it.  Returns a row per candidate (ms, schedule),
        fastest first.  The plans of the schedules not kept are dropped.  Bad arguments are refused
        before anything is timed, and a tune that fails midway (a plan that cannot be made, a
        kernel's error, an interrupt) puts every schedule and plan back as they were.  A bar over the
        candidates shows progress unless ``progress=False``."""
        repeat, warmup = check_int(repeat, "repeat"), check_int(warmup, "warmup", low=0)
        saved = self._saved()
        try:
            N, out = self._check(x, None)           # may make N's output buffer: put back too
            candidates = self._checked_candidates(N, self.candidates(N) if candidates is None else candidates)
            rows = self._time_candidates(x, out, N, candidates, repeat, warmup, progress)
        except BaseException:
            self._restore(saved)
            raise
        rows.sort(key=lambda r: r["median_ms"])
        self._tuned[N] = rows[0]["schedule"]
        self._prepared.discard(N)
        keep = {b - a for a, b in self.chunks(N)}
        for lane in self.lanes:
            for size in [k for k in lane.plans if k not in keep]:
                del lane.plans[size]
        self._prepared.clear()          # other batch sizes make their plans again when next run
        return rows

    @staticmethod
    def _checked_candidates(N: int, candidates) -> list:
        """``candidates`` as a list, each a schedule ``split_batch`` takes for N; else a clear error.
        (A schedule is an int or a list of ints, so the candidates must come as a list of them.)"""
        if not isinstance(candidates, (list, tuple)) or not candidates:
            raise ValueError(f"candidates must be a non-empty list of schedules (each a sub-batch size, or a "
                             f"list of sizes), got {candidates!r}")
        for cand in candidates:
            try:
                split_batch(N, cand)
            except ValueError as e:
                raise ValueError(f"candidate {cand!r} is not a schedule: {e}") from None
        return list(candidates)

    def _time_candidates(self, x, out, N: int, candidates: list, repeat: int, warmup: int,
                         progress: bool) -> list[dict]:
        """A row per candidate: its median time over ``repeat`` runs of ``x`` after ``warmup``."""
        rows = []
        for cand in progress_bar(candidates, desc=f"tuning schedules, batch {N}", show=progress):
            self._tuned[N] = cand
            self._prepared.discard(N)
            ms = sorted(times_ms(lambda: self.run(x, out, sync=False), warmup=warmup, repeat=repeat, sync=True,
                                 on_gpu=self.on_gpu))[repeat // 2]
            rows.append({"schedule": cand, "sub_batches": len(split_batch(N, cand)), "median_ms": ms})
        return rows

    def _saved(self) -> tuple:
        """What ``tune`` changes (the schedules, every lane's plans, which batch sizes are prepared,
        the output buffers), copied so that ``_restore`` can put it back."""
        return (dict(self._tuned), [dict(lane.plans) for lane in self.lanes], set(self._prepared),
                dict(self._outputs))

    def _restore(self, saved: tuple) -> None:
        tuned, plans, prepared, outputs = saved
        try:
            self.synchronize()          # work a failed run queued must end before its buffers are freed
        finally:
            self._tuned, self._prepared, self._outputs = tuned, prepared, outputs
            for lane, kept in zip(self.lanes, plans):
                lane.plans = kept       # plans made by the failed tune are dropped with the dict

    def assignments(self, N: int) -> list[tuple[int, int, "_Lane"]]:
        """[(start, stop, lane)] of each sub-batch of N: the stream (and device) it runs on."""
        return [(a, b, self.lanes[i % len(self.lanes)]) for i, (a, b) in enumerate(self.chunks(N))]

    def prepare(self, N: int) -> None:
        """Make every plan a batch of N needs (one per stream and sub-batch size: buffers, compiled
        kernels, the CUDA graph) and run each once; done by the first ``run`` of N otherwise."""
        if N in self._prepared:
            return
        for a, b, lane in self.assignments(N):
            self._plan(lane, b - a)
        self.synchronize()
        self._prepared.add(N)

    def _plan(self, lane: _Lane, size: int):
        plan = lane.plans.get(size)
        if plan is None:
            plan = self._new_plan(lane, size)
            lane.plans[size] = plan
        return plan

    def _new_plan(self, lane: _Lane, size: int):
        if not self.on_gpu:
            return lane.model.new_plan(size)
        import cupy
        with cupy.cuda.Device(lane.device), lane.stream:
            plan = lane.model.new_plan(size)
            if self.graphs:
                plan.run(lane.stream)        # captured now, on this device, then replayed by run()
            else:
                plan.eager()
        return plan

    def synchronize(self) -> None:
        """Wait until every stream of every device (and the caller's stream) has finished its work."""
        if self.on_gpu:
            import cupy
            for lane in self.lanes:
                lane.stream.synchronize()
            cupy.cuda.get_current_stream().synchronize()

    def release(self) -> None:
        """Drop every plan and output buffer (their memory goes back to the pools)."""
        for lane in self.lanes:
            lane.plans.clear()
        self._serial.clear()
        self._outputs.clear()
        self._prepared.clear()

    # -- a call -------------------------------------------------------------------------------------
    def _check(self, x, out) -> tuple[int, np.ndarray]:
        if not isinstance(x, np.ndarray):
            raise TypeError(f"the pipeline copies its input from host memory: pass a NumPy array "
                            f"(pinned: labkit.pipeline.pinned_empty), got {type(x).__module__}.{type(x).__name__}")
        if x.dtype != np.float32:
            raise TypeError(f"x must be float32, got {x.dtype}")
        if x.ndim != 1 + len(self.input_shape) or tuple(x.shape[1:]) != self.input_shape or x.shape[0] < 1:
            raise ValueError(f"x must be (N,) + {self.input_shape} with N >= 1, got {tuple(x.shape)}")
        if not x.flags.c_contiguous:
            raise ValueError("x must be C-contiguous (np.ascontiguousarray): each sub-batch is copied as "
                             "one block of bytes")
        N = int(x.shape[0])
        if out is None:
            out = self._outputs.get(N)
            if out is None:
                out = self._outputs[N] = pinned_empty((N,) + self.output_shape)
            return N, out
        if not isinstance(out, np.ndarray) or out.dtype != np.float32 or \
                tuple(out.shape) != (N,) + self.output_shape or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 NumPy array of shape {(N,) + self.output_shape}, "
                             f"got {type(out).__name__} {getattr(out, 'dtype', '')} {tuple(getattr(out, 'shape', ()))}")
        if np.shares_memory(x, out):
            raise ValueError("out overlaps x: the copies out would overwrite input not yet copied in")
        return N, out

    def run(self, x: np.ndarray, out: np.ndarray | None = None, *, timeline: Timeline | None = None,
            sync: bool = True) -> np.ndarray:
        """The model's output for host batch ``x``, in ``out`` (default: a pinned array of the pipeline's,
        reused by the next call with the same N: copy it to keep it).  ``sync=False`` returns once
        everything is queued; the caller's stream is ordered after it (CUDA events there time it)."""
        N, out = self._check(x, out)
        self.prepare(N)
        jobs = self.assignments(N)
        if not self.on_gpu:
            return self._run_cpu(x, out, jobs, timeline)
        import cupy
        caller = cupy.cuda.get_current_stream()
        start = cupy.cuda.Event(disable_timing=True)
        start.record(caller)
        for lane in self.lanes:
            lane.stream.wait_event(start)                     # cross-device waits are allowed
        if timeline is not None:
            for dev in dict.fromkeys(lane.device for lane in self.lanes):
                first = next(lane for lane in self.lanes if lane.device == dev)
                with cupy.cuda.Device(dev):
                    timeline.begin(dev, first.stream)
        for i, (a, b, lane) in enumerate(jobs):
            with cupy.cuda.Device(lane.device):
                self.enqueue(lane.plans[b - a], x, out, a, b, lane.stream, timeline=timeline,
                             lane=lane, chunk=i)
        for lane in self.lanes:
            with cupy.cuda.Device(lane.device):
                done = cupy.cuda.Event(disable_timing=True)
                done.record(lane.stream)
            caller.wait_event(done)
        if sync:
            caller.synchronize()
        return out

    def _run_cpu(self, x, out, jobs, timeline):
        if timeline is not None:
            for dev in dict.fromkeys(lane.device for lane in self.lanes):
                timeline.begin(dev)
        for i, (a, b, lane) in enumerate(jobs):
            self.enqueue(lane.plans[b - a], x, out, a, b, lane.stream, timeline=timeline, lane=lane, chunk=i)
        return out

    def enqueue(self, plan, x, out, a: int, b: int, stream, *, timeline=None, lane=None, chunk: int = 0) -> None:
        """The three stages of sub-batch x[a:b] on one stream, in order: copy in, the forward (one
        CUDA graph, or the steps one by one), copy out into out[a:b].  Nothing waits: the stream
        orders them, and the host goes on queueing the next sub-batch."""
        with _span(timeline, lane, "H2D", chunk):
            copy_in(plan.x, x[a:b], stream)
        with _span(timeline, lane, "forward", chunk):
            if self.graphs:
                plan.run(stream)
            elif stream is None:
                plan.eager()
            else:
                with stream:
                    plan.eager()
        with _span(timeline, lane, "D2H", chunk):
            copy_out(out[a:b], plan.out, stream)

    def serial(self, x: np.ndarray, out: np.ndarray | None = None, *, timeline: Timeline | None = None,
               sync: bool = True) -> np.ndarray:
        """The baseline, on the caller's stream and the first device: copy the whole batch in, run
        the forward of N as one graph (eagerly without ``graphs``), copy the whole output back."""
        N, out = self._check(x, out)
        plan = self.serial_plan(N)
        lane = _Lane(self.lanes[0].device, 0, self.model, None)
        if timeline is not None:
            timeline.begin(lane.device)
        stream = None
        if self.on_gpu:
            import cupy
            stream = cupy.cuda.get_current_stream()
        with _span(timeline, lane, "H2D", 0, name="serial", stream=stream):
            copy_in(plan.x, x, stream)
        with _span(timeline, lane, "forward", 0, name="serial", stream=stream):
            plan.run(stream) if self.graphs else plan.eager()
        with _span(timeline, lane, "D2H", 0, name="serial", stream=stream):
            copy_out(out, plan.out, stream)
        if sync and stream is not None:
            stream.synchronize()
        return out

    def serial_plan(self, N: int):
        """The plan of the whole batch on the first device (what ``serial`` runs; its ``run()`` alone is
        the compute-only time)."""
        plan = self._serial.get(N)
        if plan is None:
            plan = self._serial[N] = self.model.new_plan(N)
            if self.graphs:
                plan.run()
            self.synchronize()
        return plan

    def describe(self, N: int) -> str:
        """One line: the sub-batches of N, the streams, graphs or eager, and the devices used."""
        sizes = [b - a for a, b in self.chunks(N)]
        shown = ", ".join(map(str, sizes[:6])) + (", ..." if len(sizes) > 6 else "")
        return (f"batch {N}: {_count(len(sizes), 'sub-batch', 'sub-batches')} ({shown}) on "
                f"{_count(self.streams, 'stream', 'streams')} per device; "
                f"{'CUDA graphs' if self.graphs else 'eager launches'}; {self.note}")


def _count(n: int, one: str, many: str) -> str:
    """"1 sub-batch", "5 sub-batches": a count with its noun in the right number."""
    return f"{n} {one if n == 1 else many}"


def _span(timeline, lane: _Lane, stage: str, chunk: int, *, name: str | None = None, stream=None):
    """``timeline.span`` for a lane, or nothing when there is no timeline (the common, timed case)."""
    if timeline is None:
        return nullcontext()
    return timeline.span(name or lane.name, stage, chunk=chunk, device=lane.device,
                         stream=stream if stream is not None else lane.stream)
