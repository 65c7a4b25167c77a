"""Plots of timings: batch-size curves and stacked breakdown bars (matplotlib only).

    fig = plots.batch_curves(rows, title="conv layer 1")      # one line per label, log-log
    plots.save_figure(fig, results_dir() / "conv_layer1.png")
    fig = plots.stacked_bars(["batch 100", "batch 1000"],
                             {"H2D": [..], "kernel": [..], "D2H": [..]}, "where the time goes", "ms")
    fig = plots.warp_picture(labkit.measure.warp.warp_instructions(rows))   # one warp's addresses

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

from .device_query import device

DPI = 120
# A figure at most this wide (inches, at DPI: 1,000 px) fits a notebook's page without being shrunk.
MAX_WIDTH_IN = 1000 / DPI
# Distinct colours, tab10's then tab20's lighter shades: a label keeps its colour across panels.
PALETTE = [plt.get_cmap("tab10")(i) for i in range(10)] + [plt.get_cmap("tab20")(2 * i + 1) for i in range(10)]


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


def _finish_bars(fig: Figure, ax, title: str | None, ylabel: str, device: str | None, *,
                 horizontal: bool = False) -> Figure:
    """The bar charts' common finish: value label, grid along the values, the legend outside the
    bars, title with the device."""
    (ax.set_xlabel if horizontal else ax.set_ylabel)(ylabel)
    ax.grid(True, axis="x" if horizontal else "y", alpha=0.3)
    legend_outside(ax, fontsize=8)
    _titled(ax, title, device or _current_label())
    fig.tight_layout()
    return fig


def colour_map(labels: Sequence[object]) -> dict:
    """One colour per distinct label, in the order the labels first appear: draw every panel of a
    figure from the same map and a run keeps its colour from one panel to the next.  More labels
    than the palette's 20 colours cycle through it again."""
    names = list(dict.fromkeys(labels))
    return {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(names)}


def legend_outside(ax, *, fontsize: float = 7, **kwargs):
    """The legend right of the axes, where it hides no data point; returns it (None without labels).
    A saved or shown figure (bbox_inches="tight") grows to take it in."""
    handles, names = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                     fontsize=fontsize, **kwargs)


def spans_decades(values: Sequence[float], decades: float = 1.0) -> bool:
    """True where the positive values span at least ``decades`` powers of ten (max >= 10**decades * min)."""
    vals = [float(v) for v in values if v is not None and v == v and v > 0]
    return bool(vals) and max(vals) >= 10 ** decades * min(vals)


def _scale(ax, axis: str, values: Sequence[float], log: bool) -> None:
    """A log axis where the values span a decade or more; a linear one where they span less (a few
    CPU-sized points), whose log ticks would read 2x10^0, 3x10^0 or be missing altogether."""
    if log and spans_decades(values):
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
        fig, ax = plt.subplots(figsize=(6.0, 4.2))
    else:
        fig = ax.figure
    groups: dict[object, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        groups[r.get(by)].append((r["batch"], r[y]))
    colours = colour_map(list(groups) + [r.get(by) for r in shipped])   # a shipped twin: its local line's colour
    for name, pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=str(name), color=colours[name])
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
    if other or any(name is not None for name in groups):
        legend_outside(ax)
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
    # A shipped line without a local twin gets a colour no local line has.
    colours = dict(colours or {})
    spare = iter(c for c in PALETTE * 2 if c not in colours.values())
    for name, _dev in groups:
        if name not in colours:
            colours[name] = next(spare)
    for (name, dev), pts in groups.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="--", marker="x", alpha=0.75,
                color=colours[name], label=f"{name} — {_short(dev)}, shipped")
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
        fig, ax = plt.subplots(figsize=(min(max(4.0, 1.1 * n + 2.5), MAX_WIDTH_IN - 1.5), 4.2))   # legend beside it
    else:
        fig = ax.figure
    x = list(range(n))
    bottom = [0.0] * n
    colours = colour_map(list(parts))
    for name, vals in parts.items():
        vals = [float(v) for v in vals]
        ax.bar(x, vals, bottom=bottom, label=name, width=0.6, color=colours[name])
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(x, list(categories))
    return _finish_bars(fig, ax, title, ylabel, device)


def grouped_bars(categories: Sequence[str], series: dict[str, Sequence[float]], title: str | None = None,
                 ylabel: str = "time (ms)", *, ax=None, device: str | None = None, horizontal: bool | None = None,
                 log: bool = True, reference: float | None = None) -> Figure:
    """Side-by-side bars, one group per category and one bar per series (e.g. labkit vs cuDNN per layer).

    ``horizontal``: a row per category, for many categories (None: chosen, for a figure of its own,
    when a vertical chart would be wider than the page, MAX_WIDTH_IN).  ``log``: a log value axis where the values span a
    decade or more.  ``reference``: a line at that value (1.0 for ratios to a floor).  One colour per
    series (``colour_map``)."""
    n, k = len(categories), len(series)
    for name, vals in series.items():
        if len(vals) != n:
            raise ValueError(f"series {name!r} has {len(vals)} values for {n} categories")
    wide = 0.35 * n * k + 3.0                  # inches a vertical chart needs for readable groups
    if horizontal is None:                     # too wide for the page: one row per category instead
        horizontal = ax is None and wide > MAX_WIDTH_IN
    if ax is None:                             # the legend beside it takes the last 1.5 inches of the page
        page = MAX_WIDTH_IN - 1.5
        size = (page, max(3.0, 0.11 * n * k + 1.5)) if horizontal else (min(max(5.0, wide), page), 4.2)
        fig, ax = plt.subplots(figsize=size)
    else:
        fig = ax.figure
    width = 0.8 / max(k, 1)
    colours = colour_map(list(series))
    values = []
    for i, (name, vals) in enumerate(series.items()):
        pos = [j + (i - (k - 1) / 2) * width for j in range(n)]
        vals = [float(v) for v in vals]
        values += vals
        (ax.barh if horizontal else ax.bar)(pos, vals, width, label=name, color=colours[name])
    if horizontal:
        ax.set_yticks(list(range(n)), list(categories), fontsize=7)
        ax.invert_yaxis()                      # the first category on top, as a table reads
    else:
        ax.set_xticks(list(range(n)), list(categories))
    if reference is not None:                  # e.g. 1.0 on a chart of ratios to a floor
        (ax.axvline if horizontal else ax.axhline)(reference, color="k", lw=0.8)
    _scale(ax, "x" if horizontal else "y", values, log)
    return _finish_bars(fig, ax, title, ylabel, device, horizontal=horizontal)


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


def floor_bars(rows: Sequence[dict], title: str | None = None, *, top: int | None = None,
               device: str | None = None) -> Figure:
    """Where the time goes and how far each piece is from its floor: one horizontal bar per step of
    ``rows`` (``step``, ``measured_ms``, ``floor_ms``, ``percent_of_floor``; labkit.ladder.floors), the
    slowest on top (``top``: only that many), its floor drawn inside it in a darker shade and its % of
    floor written after it.  The gap between the two is what a better kernel could win there."""
    sel = sorted(rows, key=lambda r: -r["measured_ms"])[:top] if rows else []
    if not sel:
        raise ValueError("floor_bars needs at least one row")
    total = sum(r["measured_ms"] for r in rows)
    fig, ax = plt.subplots(figsize=(8.0, max(2.6, 0.26 * len(sel) + 1.4)))
    y = list(range(len(sel)))
    ax.barh(y, [r["measured_ms"] for r in sel], color="C0", alpha=0.45, height=0.75, label="measured")
    ax.barh(y, [min(r["floor_ms"], r["measured_ms"]) for r in sel], color="C0", height=0.75, label="floor")
    for i, r in enumerate(sel):
        ax.text(r["measured_ms"], i, f" {r['percent_of_floor']:.0f}% of floor, {100 * r['measured_ms'] / total:.0f}%"
                " of the time", va="center", fontsize=6.5)
    ax.set_yticks(y, [r["step"] for r in sel], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.45 * max(r["measured_ms"] for r in sel))
    return _finish_bars(fig, ax, title, "ms (each step alone)", device or _device_text(rows), horizontal=True)


# A per-kernel / per-memcpy breakdown is drawn as stacked bars.
bar_breakdown = stacked_bars


def _cost_text(ins: dict) -> str:
    lanes = len(ins["offsets"])
    if "sectors" in ins:
        need = -(-len(set(ins["offsets"].values())) * ins["size"] // 32)
        n = len(ins["sectors"])
        return (f"{lanes} lanes, {n} sector{'s' if n != 1 else ''} of 32 B "
                f"(its {len(set(ins['offsets'].values()))} distinct elements fit in {need})")
    return (f"{lanes} lanes, {ins['wavefronts']} wavefronts (fewest possible {ins['ideal']}: "
            f"{ins['wavefronts'] - ins['ideal']} bank conflicts)")


def warp_picture(instructions: Sequence[dict], titles: Sequence[str] | None = None, *,
                 label=None, title: str | None = None) -> Figure:
    """One strip per warp instruction (labkit.measure.warp.warp_instructions' dicts): a cell per lane,
    which element it touches written in it (``label(lane, ins)`` if given, else the flat index),
    coloured by the 32-byte sector (global memory; the sector number below) or the bank (shared
    memory; the bank below), and the cost in the strip's title.  Lanes that do not take part are
    blank.  Not a timing: no device name."""
    if not instructions:
        raise ValueError("warp_picture: no warp instruction to draw (warp_instructions returned none)")
    fig, axes = plt.subplots(len(instructions), 1, figsize=(13, 1.25 * len(instructions) + 0.4), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for k, (ax, ins) in enumerate(zip(axes[:, 0], instructions)):
        glob = "sectors" in ins
        for lane in range(32):
            if lane not in ins["offsets"]:
                ax.add_patch(plt.Rectangle((lane, 0), 1, 1, fill=False, ec="0.85", lw=0.5))
                continue
            off = ins["offsets"][lane]
            group = off // 32 if glob else ins["banks"][lane]
            ax.add_patch(plt.Rectangle((lane, 0), 1, 1, color=cmap(group % 20), ec="white", lw=0.5))
            text = label(lane, ins) if label else str(ins["elements"][lane])
            ax.text(lane + 0.5, 0.5, text, ha="center", va="center", fontsize=6, rotation=90 if len(text) > 3 else 0)
            ax.text(lane + 0.5, -0.3, f"s{group}" if glob else f"b{group}", ha="center", va="center", fontsize=5)
        ax.set_xlim(0, 32)
        ax.set_ylim(-0.6, 1)
        ax.set_yticks([])
        ax.set_xticks([i + 0.5 for i in range(0, 32, 4)], [str(i) for i in range(0, 32, 4)], fontsize=7)
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
        head = titles[k] if titles and k < len(titles) else f"{ins['kind']} of {ins['array']}"
        ax.set_title(f"{head}: {_cost_text(ins)}", fontsize=8, loc="left")
    axes[-1, 0].set_xlabel("lane (cells: the element it touches; below: its sector s, or bank b)", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save as PNG at 120 dpi (".png" added if the name has no suffix); returns the path."""
    path = Path(path)
    if not path.suffix:
        path = path.with_suffix(".png")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, format="png", bbox_inches="tight")
    return path
