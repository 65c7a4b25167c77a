"""Plots of timings: batch-size curves and stacked breakdown bars (matplotlib only).

    fig = plots.batch_curves(rows, title="conv layer 1")      # one line per label, log-log
    plots.save_figure(fig, results_dir() / "conv_layer1.png")
    fig = plots.stacked_bars(["batch 100", "batch 1000"],
                             {"H2D": [..], "kernel": [..], "D2H": [..]}, "where the time goes", "ms")

Every figure names the device it was measured on; on the CPU executor that name says
the timings are not GPU timings.  Functions return the Figure (assign it, e.g.
``fig = ...``, so a notebook does not show it twice).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.transforms import offset_copy

from .device_query import device

DPI = 120


def _current_label() -> str:
    return device().label


def _device_text(rows: Sequence[dict] = ()) -> str:
    """The device label(s) the rows were measured on, else the current device's label."""
    seen = []
    for r in rows:
        d = r.get("device")
        if d and d not in seen:
            seen.append(d)
    return ", ".join(seen) if seen else _current_label()


def _titled(ax, title: str | None, device_text: str) -> None:
    ax.set_title(f"{title}\n{device_text}" if title else device_text, fontsize=10)


def _finish_bars(fig: Figure, ax, title: str | None, ylabel: str, device: str | None) -> Figure:
    """The bar charts' common finish: y label, horizontal grid, legend, title with the device."""
    ax.set_ylabel(ylabel)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _titled(ax, title, device or _current_label())
    fig.tight_layout()
    return fig


def _scale(ax, axis: str, values: Sequence[float], log: bool) -> None:
    """A log axis where the values span a decade or more; a linear one where they span less (a few
    CPU-sized points), whose log ticks would read 2x10^0, 3x10^0 or be missing altogether."""
    vals = [v for v in values if v is not None and v > 0]
    if log and vals and max(vals) >= 10 * min(vals):
        getattr(ax, f"set_{axis}scale")("log")


def batch_curves(rows: Sequence[dict], *, y: str = "median_ms", by: str = "label", title: str | None = None,
                 ax=None, logx: bool = True, logy: bool = True, ylabel: str = "time (ms)",
                 shipped: Sequence[dict] = ()) -> Figure:
    """One line with markers per value of ``by`` (default: label), x = batch, y = ``y``; returns the Figure.

    ``shipped``: rows measured elsewhere (``labkit.results.shipped_rows``), drawn dashed beside the
    local ones where they come from another device (see ``shipped_lines``).  The title carries the
    device label of the rows (or of the current device).
    """
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
    else:
        fig = ax.figure
    groups: dict[object, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        groups[r.get(by)].append((r["batch"], r[y]))
    colours = {}
    for name, pts in groups.items():
        pts.sort()
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=str(name))
        colours[name] = line.get_color()
    other = shipped_lines(ax, shipped, x="batch", y=y, by=by, beside=rows, colours=colours)
    xs = [p[0] for pts in groups.values() for p in pts] + [r["batch"] for r in other]
    ys = [p[1] for pts in groups.values() for p in pts] + [r[y] for r in other]
    _scale(ax, "x", xs, logx)
    _scale(ax, "y", ys, logy)
    if len(set(xs)) == 1:              # one batch size (a CPU run's): the batch is a tick, not an axis
        ax.set_xticks(sorted(set(xs)))
    ax.set_xlabel("batch size")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if other:                          # many lines: the legend under the axes, where it hides no point
        below = offset_copy(ax.transAxes, fig=fig, y=-40, units="points")   # past the tick labels and x label
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below, ncol=2)
    elif any(name is not None for name in groups):
        ax.legend(fontsize=8)
    _titled(ax, title, _device_text(rows) + _shipped_text(other))
    fig.tight_layout()
    return fig


def shipped_lines(ax, shipped: Sequence[dict], *, x: str, y: str, by: str = "label", beside: Sequence[dict] = (),
                  colours: dict | None = None) -> list[dict]:
    """Draw the ``shipped`` rows (measured elsewhere: ``labkit.results.shipped_rows``) on ``ax``, dashed,
    one line per value of ``by``, each labelled "<name> — <device>, shipped"; rows from a device that
    also measured ``beside`` (the local rows: on the H100 the local run is the newer one) are left
    out.  ``colours`` maps a name to the local line's colour, so a shipped line matches its local twin.
    Returns the rows drawn."""
    local = {r["device"] for r in beside if r.get("device")} or {_current_label()}
    rows = [r for r in shipped if r.get("device") not in local]
    groups: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        groups[(r.get(by), r.get("device"))].append((r[x], r[y]))
    for (name, dev), pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="--", marker="x", alpha=0.75,
                color=(colours or {}).get(name), label=f"{name} — {_short(dev)}, shipped")
    return rows


def _short(device: str | None) -> str:
    """"NVIDIA H100 80GB HBM3" -> "H100": enough to tell a shipped line from a local one in a legend."""
    words = (device or "elsewhere").replace("NVIDIA ", "").split()
    return words[0] if words else "elsewhere"


def _shipped_text(rows: Sequence[dict]) -> str:
    devices = list(dict.fromkeys(r.get("device") for r in rows))
    return f"\ndashed: {', '.join(map(str, devices))} (shipped, benchmarks/results)" if devices else ""


def stacked_bars(categories: Sequence[str], parts: dict[str, Sequence[float]], title: str | None = None,
                 ylabel: str = "time (ms)", *, ax=None, device: str | None = None) -> Figure:
    """Stacked bars, one per category; ``parts`` maps a segment name (kernel, memcpy, ...) to one value per category.

    ``device`` overrides the device label shown under the title (default: the current device's).
    """
    n = len(categories)
    for name, vals in parts.items():
        if len(vals) != n:
            raise ValueError(f"part {name!r} has {len(vals)} values for {n} categories")
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * n + 2.5), 4.2))
    else:
        fig = ax.figure
    x = list(range(n))
    bottom = [0.0] * n
    for name, vals in parts.items():
        vals = [float(v) for v in vals]
        ax.bar(x, vals, bottom=bottom, label=name, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(x, list(categories))
    return _finish_bars(fig, ax, title, ylabel, device)


def grouped_bars(categories: Sequence[str], series: dict[str, Sequence[float]], title: str | None = None,
                 ylabel: str = "time (ms)", *, ax=None, device: str | None = None) -> Figure:
    """Side-by-side bars, one group per category and one bar per series (e.g. labkit vs cuDNN per layer)."""
    n, k = len(categories), len(series)
    for name, vals in series.items():
        if len(vals) != n:
            raise ValueError(f"series {name!r} has {len(vals)} values for {n} categories")
    if ax is None:
        fig, ax = plt.subplots(figsize=(max(5.0, 0.35 * n * k + 3.0), 4.2))
    else:
        fig = ax.figure
    width = 0.8 / max(k, 1)
    for i, (name, vals) in enumerate(series.items()):
        ax.bar([j + (i - (k - 1) / 2) * width for j in range(n)], [float(v) for v in vals], width=width,
               label=name)
    ax.set_xticks(list(range(n)), list(categories))
    return _finish_bars(fig, ax, title, ylabel, device)


def grouped_hbars(groups: dict[str, dict[str, float]], title: str | None = None, xlabel: str = "",
                  *, log: bool = False, ref: float | None = None, device: str | None = None) -> Figure:
    """Horizontal bars, one per item, in groups (``{group: {item: value}}``) read top to bottom, each
    group's name on its first bar's row; ``ref``: a vertical line (e.g. 100% of a floor)."""
    labels, values, colors, starts = [], [], [], []
    for i, (g, items) in enumerate(groups.items()):
        starts.append((len(labels), g))
        labels += list(items)
        values += [float(v) for v in items.values()]
        colors += [f"C{i % 10}"] * len(items)
    if not labels:
        raise ValueError("grouped_hbars needs at least one item")
    fig, ax = plt.subplots(figsize=(8.0, max(3.0, 0.17 * len(labels) + 1.5)))
    y = list(range(len(labels)))
    ax.barh(y, values, color=colors, height=0.75)
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    for start, g in starts:
        ax.axhline(start - 0.5, color="0.6", lw=0.6)
        ax.text(1.01, start, g, transform=ax.get_yaxis_transform(), fontsize=7, va="top", ha="left")
    if ref is not None:
        ax.axvline(ref, color="0.3", ls="--", lw=0.8)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    _titled(ax, title, device or _current_label())
    fig.tight_layout()
    return fig


# A per-kernel / per-memcpy breakdown is drawn as stacked bars.
bar_breakdown = stacked_bars


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save as PNG at 120 dpi (".png" added if the name has no suffix); returns the path."""
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", bbox_inches="tight")
    return path
