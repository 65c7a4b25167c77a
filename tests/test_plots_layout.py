"""labkit.plots' layout rules: log axes where values span decades, legends outside the data, one
colour per label across panels, figures no wider than a notebook's page."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display in tests

import matplotlib.pyplot as plt
import pytest

from labkit import plots
from labkit.ladder import streams
from labkit.pipeline import plot_timeline


def _saved_width_px(fig) -> int:
    """The width the figure has once saved or shown inline (bbox_inches="tight", legend included)."""
    bbox = fig.get_tightbbox(fig.canvas.get_renderer())
    return round(bbox.width * plots.DPI)


def _legend_right_of_axes(ax) -> bool:
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    return ax.get_legend().get_window_extent(renderer).x0 >= ax.get_window_extent(renderer).x1


def test_colour_map_is_stable_and_distinct():
    first = plots.colour_map(["a", "b", "a", "c"])
    assert list(first) == ["a", "b", "c"] and len(set(first.values())) == 3
    assert plots.colour_map(["a", "b", "c", "d"])["b"] == first["b"]      # the same label, the same colour
    many = plots.colour_map([f"run {i}" for i in range(20)])
    assert len(set(many.values())) == 20                                  # 20 labels: no colour reused


def test_spans_decades():
    assert plots.spans_decades([0.5, 5.0]) and not plots.spans_decades([1.0, 9.9])
    assert plots.spans_decades([1.0, 100.0], decades=2) and not plots.spans_decades([1.0, 99.0], decades=2)
    assert not plots.spans_decades([0.0, -1.0, None])


def test_batch_curves_legend_outside_and_shipped_colours_distinct():
    local = [{"label": n, "batch": b, "median_ms": 160.0 + b, "device": "CPU"} for n in ("a", "b") for b in (1, 2)]
    shipped = [{"label": n, "batch": b, "median_ms": 0.01 * b * (i + 1), "device": "NVIDIA H100 80GB HBM3"}
               for i, n in enumerate(("a", "b", "c", "d")) for b in (1, 16, 256)]
    fig = plots.batch_curves(local, shipped=shipped)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"      # 0.01 ms to 160 ms: decades
    assert _legend_right_of_axes(ax)
    colours = {}
    for line in ax.get_lines():
        colours.setdefault(line.get_label().split(" — ")[0], set()).add(matplotlib.colors.to_hex(line.get_color()))
    assert all(len(c) == 1 for c in colours.values())                  # a run and its shipped twin: one colour
    assert len({next(iter(c)) for c in colours.values()}) == 4         # four runs: four colours
    assert _saved_width_px(fig) <= 1000
    plt.close(fig)


def test_grouped_bars_many_layers_turn_horizontal_and_fit_the_page():
    names = [f"features.{i}" for i in range(21)]
    series = {"naive": [2.0] * 21, "tuned": [1.1] * 21, "cuDNN": [3.5] * 21}
    fig = plots.grouped_bars(names, series, title="depthwise", ylabel="x floor", reference=1.0)
    ax = fig.axes[0]
    assert _saved_width_px(fig) <= 1000
    assert [t.get_text() for t in ax.get_yticklabels()] == names      # a row per layer
    assert ax.get_xlabel() == "x floor" and ax.get_xscale() == "linear"   # 1.1 to 3.5: no decade
    assert any(line.get_xdata()[0] == 1.0 for line in ax.get_lines())  # the reference line, vertical
    assert _legend_right_of_axes(ax)
    plt.close(fig)
    steps = plots.grouped_bars(["c16 b64", "c16 b256", "c64 b1024"], {k: [1.0, 2.0, 3.0] for k in "abcd"})
    assert [t.get_text() for t in steps.axes[0].get_xticklabels()] == ["c16 b64", "c16 b256", "c64 b1024"]   # 12 bars: upright
    assert _saved_width_px(steps) <= 1000
    plt.close(steps)
    few = plots.grouped_bars(["a", "b"], {"x": [1.0, 200.0]})
    assert few.axes[0].get_yscale() == "log" and [t.get_text() for t in few.axes[0].get_xticklabels()] == ["a", "b"]
    plt.close(few)


def test_timeline_shows_short_copies_and_keeps_its_legend_off_the_bars():
    rows = [{"lane": "stream 0", "stage": s, "chunk": 0, "start_ms": a, "end_ms": b}
            for s, a, b in (("H2D", 0.0, 0.001), ("forward", 0.001, 50.0), ("D2H", 50.0, 50.001))]
    fig = plot_timeline(rows, title="t")
    ax = fig.axes[0]
    widths = {matplotlib.colors.to_hex(p.get_facecolor()): p.get_width() for p in ax.patches}
    assert min(widths.values()) >= 50.0 * 8e-3                           # each copy a visible sliver
    assert _legend_right_of_axes(ax) and _saved_width_px(fig) <= 1000
    plt.close(fig)


def test_bandwidth_plot_and_summary_say_what_was_measured():
    rows = [{"label": f"{d} {kind}", "bytes": b, "GBps": g, "device": "CPU"}
            for d in ("H2D", "D2H") for kind, scale in (("pinned", 50.0), ("pageable", 1.0))
            for b, g in ((4096, 0.5 * scale), (1 << 20, 1.0 * scale))]
    fig = streams.plot_bandwidth(rows)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"       # 0.5 to 50 GB/s
    assert _legend_right_of_axes(ax) and _saved_width_px(fig) <= 1000
    plt.close(fig)
    assert streams.bandwidth_summary(rows) == ["H2D, 4 KiB to 1 MiB: pinned / pageable from 50.0x to 50.0x",
                                               "D2H, 4 KiB to 1 MiB: pinned / pageable from 50.0x to 50.0x"]
    same = [dict(r, GBps=10.0 * (1.05 if "pinned" in r["label"] else 1.0)) for r in rows]
    assert streams.bandwidth_summary(same)[0] == "H2D, 4 KiB to 1 MiB: within 10% of each other at every size"


def test_timeline_slivers_lie_over_their_neighbours():
    rows = [{"lane": "s", "stage": s, "chunk": 0, "start_ms": a, "end_ms": b}
            for s, a, b in (("H2D", 0.0, 0.001), ("forward", 0.001, 50.0))]
    ax = plot_timeline(rows).axes[0]
    copy, forward = ax.patches
    assert copy.get_zorder() > forward.get_zorder() and copy.get_edgecolor()[3] == 0     # no edge over it
    plt.close(ax.figure)



def test_stacked_bars_fit_the_page_with_their_legend():
    fig = plots.stacked_bars([f"batch {2 ** i}" for i in range(9)], {"kernel": [1.0] * 9, "copy": [0.5] * 9})
    assert _saved_width_px(fig) <= 1000 and _legend_right_of_axes(fig.axes[0])
    plt.close(fig)
