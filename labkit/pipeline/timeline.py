"""When each stage of each sub-batch ran, stream by stream: CUDA events turned into a Gantt chart.

    tl = Timeline()
    tl.begin(device=0, stream=s0)                       # time zero of device 0 (an event on s0)
    with tl.span("GPU 0 · stream 1", "H2D", chunk=3, device=0, stream=s1):
        ...queue the copy on s1...
    ...synchronize...
    rows = tl.rows()          # [{lane, stage, chunk, device, start_ms, end_ms}], ms after time zero
    plot_timeline(rows)       # one bar per span, one line per stream, a colour per stage

A span is two events recorded on its stream around the work queued there: the first completes when
the stream reaches the work (everything queued before it on that stream is done), the second when the
work is.  So a bar starts when its stream was ready for it: a copy waiting for the copy engine,
which another stream holds, shows as a longer bar, not a later one.  Events of one device are
compared with that device's time zero (CUDA times events of one device only).

On the CPU executor the spans are read off the monotonic clock around each stage as it runs: the
stages run one after the other there, and the chart shows exactly that.
"""
from __future__ import annotations

import time
from contextlib import contextmanager

from .. import backends

__all__ = ["Timeline", "plot_timeline", "STAGE_COLOURS", "overlap_ms"]

STAGE_COLOURS = {"H2D": "#4C72B0", "forward": "#DD8452", "D2H": "#55A868"}


class Timeline:
    """Spans of work per lane (a stream of a device), timed by CUDA events or by the host clock."""

    def __init__(self) -> None:
        self.on_gpu = backends.current() == "cuda"
        self._zero: dict[int, object] = {}
        self._spans: list[tuple[str, str, int, int, object, object]] = []

    def begin(self, device: int = 0, stream=None) -> None:
        """Time zero of ``device``: now on the host clock, or an event recorded on ``stream``."""
        self._zero[device] = self._mark(stream)

    def _mark(self, stream):
        if not self.on_gpu:
            return time.perf_counter()
        import cupy
        ev = cupy.cuda.Event()
        ev.record(stream)
        return ev

    @contextmanager
    def span(self, lane: str, stage: str, *, chunk: int, device: int = 0, stream=None):
        """Time the work queued inside the block on ``stream`` as one bar of ``lane``."""
        if device not in self._zero:
            raise RuntimeError(f"Timeline.begin(device={device}) must come before its spans")
        start = self._mark(stream)
        yield
        self._spans.append((lane, stage, chunk, device, start, self._mark(stream)))

    def rows(self) -> list[dict]:
        """One dict per span, times in ms after its device's time zero (call after synchronizing)."""
        out = []
        for lane, stage, chunk, device, start, end in self._spans:
            zero = self._zero[device]
            out.append({"lane": lane, "stage": stage, "chunk": chunk, "device": device,
                        "start_ms": self._ms(zero, start), "end_ms": self._ms(zero, end)})
        return out

    def _ms(self, a, b) -> float:
        if not self.on_gpu:
            return (b - a) * 1e3
        import cupy
        return float(cupy.cuda.get_elapsed_time(a, b))


def overlap_ms(rows: list[dict], stage_a: str, stage_b: str) -> float:
    """How long, in ms, some ``stage_a`` span and some ``stage_b`` span ran at the same time on one
    device (the union of the intersections): 0 where the stages never overlapped."""
    total = 0.0
    for dev in sorted({r["device"] for r in rows}):
        a = _union([(r["start_ms"], r["end_ms"]) for r in rows if r["device"] == dev and r["stage"] == stage_a])
        b = _union([(r["start_ms"], r["end_ms"]) for r in rows if r["device"] == dev and r["stage"] == stage_b])
        for s0, e0 in a:
            for s1, e1 in b:
                total += max(0.0, min(e0, e1) - max(s0, s1))
    return total


def _union(spans):
    out: list[list[float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [tuple(x) for x in out]


def plot_timeline(rows: list[dict], *, ax=None, title: str | None = None, label_chunks: bool = True):
    """A Gantt chart of ``rows`` (Timeline.rows()): a line per lane, a bar per span, coloured by stage,
    each bar labelled with its sub-batch.  Returns the figure."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    lanes = list(dict.fromkeys(r["lane"] for r in rows))
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.2, 0.55 * len(lanes) + 1.4))   # with its legend, under 1,000 px
    else:
        fig = ax.figure
    end = max((r["end_ms"] for r in rows), default=1.0) or 1.0
    for r in rows:
        y = lanes.index(r["lane"])
        # At least 0.8% of the axis: a copy of microseconds (every copy on the CPU executor, a
        # memcpy) still shows as a sliver beside forwards of milliseconds, instead of vanishing.
        # A sliver is drawn over its neighbours, without the white edge that would cover it.
        sliver = r["end_ms"] - r["start_ms"] < end * 8e-3
        width = end * 8e-3 if sliver else r["end_ms"] - r["start_ms"]
        ax.barh(y, width, left=r["start_ms"], height=0.62, color=STAGE_COLOURS.get(r["stage"], "#8172B3"),
                edgecolor="none" if sliver else "white", linewidth=0.5, zorder=3 if sliver else 2)
        if label_chunks and width > end * 0.03:
            ax.text(r["start_ms"] + width / 2, y, str(r["chunk"]), ha="center", va="center",
                    fontsize=7, color="white")
    ax.set_yticks(range(len(lanes)), lanes)
    ax.invert_yaxis()
    ax.set_xlabel("ms after the first copy was queued")
    ax.set_xlim(0, end * 1.01)
    stages = list(dict.fromkeys(r["stage"] for r in rows))
    ax.legend(handles=[Patch(color=STAGE_COLOURS.get(s, "#8172B3"), label=s) for s in stages],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize=8)   # beside the bars
    if title:
        ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
