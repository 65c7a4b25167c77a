"""Where the time goes: each kernel and each copy of a computation, in the spirit of nvprof's summary.

    bd = breakdown([("H2D x", "H2D", copy_in), ("conv", "kernel", conv), ("D2H y", "D2H", copy_out)])
    print(bd.table())            # Time(%)  Time  Name, one line per part, then op time and whole time
    bd.op_ms, bd.whole_ms        # kernels only (the seed's "Op Time"); copies + kernels, end to end

A breakdown runs a list of steps in order, each a (name, kind, callable) with kind "kernel",
"H2D" (host to device copy) or "D2H" (device to host copy).  Each step is timed on its own with
CUDA events (the median over the repeats), and the whole sequence from its first event to its
last, so the whole time also counts any gaps between steps.  On the CPU executor the same steps run and
are timed with the monotonic clock; its "copies" are host memory copies, and every figure is
labelled as not a GPU timing.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..errors import check_int
from .. import backends
from ..device_query import device
from .timer import time_region

KINDS = ("kernel", "H2D", "D2H")


@dataclass
class Part:
    name: str
    kind: str
    median_ms: float


@dataclass
class Breakdown:
    """The parts of a computation and their times (ms); ``device`` says what they were measured on."""
    parts: list[Part]
    whole_ms: float
    device: str
    repeat: int
    meta: dict = field(default_factory=dict)

    @property
    def op_ms(self) -> float:
        """Kernels only: the seed's "Op Time"."""
        return sum(p.median_ms for p in self.parts if p.kind == "kernel")

    @property
    def copy_ms(self) -> float:
        return sum(p.median_ms for p in self.parts if p.kind != "kernel")

    def by_kind(self) -> dict[str, float]:
        """Total ms per kind: kernel, H2D, D2H."""
        return {k: sum(p.median_ms for p in self.parts if p.kind == k) for k in KINDS}

    def rows(self) -> list[dict]:
        """One plain dict per part, with its share of the sum of the parts."""
        total = sum(p.median_ms for p in self.parts) or 1.0
        return [{"name": p.name, "kind": p.kind, "median_ms": p.median_ms,
                 "share": p.median_ms / total, "device": self.device, **self.meta} for p in self.parts]

    def table(self) -> str:
        """An nvprof-like summary: Time(%), time, kind and name per part; then op and whole time."""
        lines = [f"{'Time(%)':>8s} {'Time':>11s}  {'kind':6s} name"]
        for r in sorted(self.rows(), key=lambda r: -r["median_ms"]):
            lines.append(f"{100 * r['share']:7.2f}% {r['median_ms']:8.3f} ms  {r['kind']:6s} {r['name']}")
        lines.append(f"op time (kernels): {self.op_ms:.3f} ms   whole time (copies + kernels): "
                     f"{self.whole_ms:.3f} ms   on {self.device}")
        return "\n".join(lines)


def _sync() -> None:
    if backends.current() == "cuda":
        import cupy
        cupy.cuda.get_current_stream().synchronize()


def breakdown(steps: Sequence[tuple[str, str, Callable[[], object]]], *, warmup: int = 2,
              repeat: int = 10, meta: dict | None = None) -> Breakdown:
    """Time each step of a computation and the whole of it; see the module docstring.

    On a GPU every step of every repeat is bracketed by CUDA events and queued back to back,
    with one synchronisation at the end: the host's launch overhead then overlaps the GPU's
    work, as in a network's forward pass, and each step's time is the GPU's (the seed's "Op
    Time").  On the CPU executor each step is timed with the monotonic clock.
    """
    for name, kind, _ in steps:
        if kind not in KINDS:
            raise ValueError(f"step {name!r}: kind must be one of {KINDS}, got {kind!r}")
    check_int(repeat, "repeat")
    for _ in range(warmup):
        for _, _, fn in steps:
            fn()
    _sync()
    if backends.current() == "cuda":
        per_step, wholes = _time_queued(steps, repeat)
    else:
        per_step, wholes = [[] for _ in steps], []
        for _ in range(repeat):
            with time_region() as whole:
                for i, (_, _, fn) in enumerate(steps):
                    with time_region() as r:
                        fn()
                    per_step[i].append(r.ms)
            wholes.append(whole.ms)
    parts = [Part(name, kind, float(statistics.median(ts))) for (name, kind, _), ts in zip(steps, per_step)]
    return Breakdown(parts, float(statistics.median(wholes)), device().label, repeat, meta or {})


def _time_queued(steps, repeat: int) -> tuple[list[list[float]], list[float]]:
    """CUDA events around every step of every repeat, all queued; one synchronisation at the end."""
    import cupy
    stream = cupy.cuda.get_current_stream()
    marks = []
    for _ in range(repeat):
        first = cupy.cuda.Event()
        first.record(stream)
        pairs = []
        for _, _, fn in steps:
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record(stream)
            fn()
            end.record(stream)
            pairs.append((start, end))
        marks.append((first, pairs))
    stream.synchronize()
    per_step = [[cupy.cuda.get_elapsed_time(*pairs[i]) for _, pairs in marks] for i in range(len(steps))]
    wholes = [cupy.cuda.get_elapsed_time(first, pairs[-1][1]) for first, pairs in marks]
    return per_step, wholes
