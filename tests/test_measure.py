"""labkit.measure, labkit.plots, labkit.results: timers, sweeps, roofline floors, figures.

Timings are of time.sleep, so only lower bounds are checked (a sleep lasts at
least its duration); nothing asserts that anything is fast.
"""
from __future__ import annotations

import math
import time

import matplotlib

matplotlib.use("Agg")  # no display in tests

import numpy as np
import pytest
from matplotlib.figure import Figure

import labkit.backends
from labkit import plots
from labkit.device_query import CPU_LABEL, Ceilings, device
from labkit.measure import (ROW_KEYS, Cost, Timing, achieved, bound, conv2d_cost, dense_cost, floor_ms,
                            gemm_cost, load_results, load_rows, percent_of_floor, redraw, save_rows, sweep,
                            time_fn, time_region)
from labkit.results import REPO_ROOT, results_dir


# The published anchor ceilings of the series' H100.
H100 = Ceilings(copy_GBps=2956.0, fp32_TFLOPs=51.0, device="NVIDIA H100 80GB HBM3", backend="cuda")


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("LABKIT_RESULTS_DIR", str(tmp_path / "results"))
    return device()


# --- timer ---------------------------------------------------------------------------------

@pytest.mark.check
def test_time_fn_on_sleep(cpu):
    calls = []

    def nap():
        calls.append(1)
        time.sleep(0.005)

    t = time_fn(nap, warmup=2, repeat=5)
    assert isinstance(t, Timing)
    assert len(calls) == 2 + 5
    assert t.repeat == 5 and len(t.times_ms) == 5
    assert t.min_ms <= t.median_ms
    assert t.min_ms >= 4.9  # a sleep of 5 ms lasts at least 5 ms
    assert t.backend == "cpu" and t.device == CPU_LABEL
    assert "ms median" in str(t)


def test_time_fn_rejects_no_repeats(cpu):
    with pytest.raises(ValueError):
        time_fn(lambda: None, repeat=0)


def test_time_region(cpu):
    with time_region() as r:
        assert r.ms is None
        time.sleep(0.01)
    assert r.ms >= 9.9
    assert r.backend == "cpu" and r.device == CPU_LABEL

    with pytest.raises(KeyError):
        with time_region() as r2:
            raise KeyError("inside")
    assert r2.ms is None


# --- sweep ---------------------------------------------------------------------------------

def nap_for(batch):
    time.sleep(0)  # set-up, not timed
    return lambda: time.sleep(batch * 1e-4)


@pytest.mark.check
def test_sweep_rows(cpu, capsys):
    rows = sweep(nap_for, [1, 10, 30], warmup=1, repeat=3, progress=False)
    assert [r["batch"] for r in rows] == [1, 10, 30]
    for r in rows:
        assert tuple(r) == ROW_KEYS
        assert r["label"] == "nap_for"  # the default label is the function's name
        assert r["repeat"] == 3 and r["device"] == CPU_LABEL and r["backend"] == "cpu"
        assert r["median_ms"] >= r["min_ms"] >= r["batch"] * 0.1 * 0.99
    assert capsys.readouterr().err == ""  # progress=False: no bar


def test_sweep_label_and_progress_bar(cpu):
    rows = sweep(nap_for, [1, 2], label="naps", warmup=0, repeat=1, progress=True)
    assert [r["label"] for r in rows] == ["naps", "naps"]


def test_sweep_needs_a_callable(cpu):
    with pytest.raises(TypeError, match="zero-argument callable"):
        sweep(lambda b: 42, [1], progress=False)


@pytest.mark.check
def test_save_load_round_trip(cpu, tmp_path):
    rows = sweep(nap_for, [np.int64(1), np.int64(4)], label="naps", warmup=0, repeat=2, progress=False)
    path = save_rows(rows, tmp_path / "out" / "naps.json", meta={"layer": (1, 48, 48), "note": "test"})
    assert path.is_file()
    back = load_rows(path)
    assert back == [{**r, "batch": int(r["batch"])} for r in rows]
    doc = load_results(path)
    assert doc["device"] == cpu.name and "not GPU timings" in doc["device"]
    assert doc["device_label"] == CPU_LABEL and doc["backend"] == "cpu"
    assert doc["versions"]["python"] and doc["versions"]["numpy"] == np.__version__
    assert doc["date"].endswith("+00:00")
    assert doc["meta"] == {"layer": [1, 48, 48], "note": "test"}
    seen = []                                  # redraw: the plot called on the file's rows, its .png beside it

    def plot(rows_, label, png):
        seen.append((rows_, label, png))
        return png
    assert redraw(path, plot) == path.with_suffix(".png")
    assert seen == [(doc["rows"], CPU_LABEL, path.with_suffix(".png"))]


# --- roofline ------------------------------------------------------------------------------

@pytest.mark.check
def test_anchor_conv_layer_floors():
    """The published floors of the ECE408 conv layers at batch 10,000 on the anchor H100."""
    c1 = conv2d_cost(10000, 1, 48, 48, 6, 5)
    assert c1.out_shape == (10000, 6, 44, 44)
    assert c1.flops == 2 * 10000 * 6 * 44 * 44 * 1 * 25
    assert c1.bytes == 4 * (10000 * 48 * 48 + 6 * 25 + 6 + 10000 * 6 * 44 * 44)
    f1 = floor_ms(c1, H100)
    assert f1 == pytest.approx(0.19, abs=0.005)
    assert bound(c1, H100) == "memory"

    c2 = conv2d_cost(10000, 6, 22, 22, 16, 5)
    assert c2.out_shape == (10000, 16, 18, 18)
    f2 = floor_ms(c2, H100)
    assert f2 == pytest.approx(0.31, abs=0.01)
    assert bound(c2, H100) == "compute"


def test_conv_stride_pad_groups():
    c = conv2d_cost(2, 4, 9, 9, 8, 3, stride=2, pad=1, groups=2, dtype_bytes=2, bias=False)
    assert c.out_shape == (2, 8, 5, 5)
    assert c.flops == 2 * 2 * 8 * 5 * 5 * 2 * 9
    assert c.bytes == 2 * (2 * 4 * 81 + 8 * 2 * 9 + 2 * 8 * 25)
    with pytest.raises(ValueError):
        conv2d_cost(1, 3, 8, 8, 4, 3, groups=2)
    with pytest.raises(ValueError):
        conv2d_cost(1, 1, 4, 4, 1, 5)


def test_gemm_dense_and_sums():
    g = gemm_cost(64, 32, 16)
    assert g == Cost(2 * 64 * 32 * 16, 4 * (64 * 16 + 16 * 32 + 64 * 32), (64, 32))
    d = dense_cost(10, 100, 5)
    assert d.flops == 2 * 10 * 100 * 5
    assert d.bytes == 4 * (10 * 100 + 100 * 5 + 5 + 10 * 5)
    s = g + d
    assert s.flops == g.flops + d.flops and s.out_shape == d.out_shape
    assert g.intensity == g.flops / g.bytes


def test_percent_of_floor_and_achieved():
    c = gemm_cost(8192, 8192, 8192)
    f = floor_ms(c, H100)
    assert f == pytest.approx(2 * 8192**3 / 51e12 * 1e3)
    assert percent_of_floor(f, c, H100) == pytest.approx(100.0)
    assert percent_of_floor(2 * f, c, H100) == pytest.approx(50.0)
    tflops, gbps = achieved(f, c)
    assert tflops == pytest.approx(51.0)
    assert gbps == pytest.approx(c.bytes / (f * 1e-3) / 1e9)
    # A plain dict of ceilings works too.
    assert floor_ms(c, {"copy_GBps": 2956.0, "fp32_TFLOPs": 51.0}) == pytest.approx(f)
    with pytest.raises(ValueError):
        percent_of_floor(0, c, H100)
    with pytest.raises(ValueError):
        floor_ms(c, {"copy_GBps": 0, "fp32_TFLOPs": 51.0})


# --- plots and results ---------------------------------------------------------------------

def fake_rows():
    rows = []
    for label, scale in (("conv_naive", 1.0), ("conv_tiled", 0.5)):
        for b in (1, 10, 100, 1000):
            rows.append({"batch": b, "label": label, "median_ms": scale * b * 0.01 + 0.005,
                         "min_ms": scale * b * 0.01, "repeat": 3, "device": CPU_LABEL, "backend": "cpu"})
    return rows


@pytest.mark.check
def test_batch_curves(cpu, tmp_path):
    fig = plots.batch_curves(fake_rows(), title="conv layer 1")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    lines = ax.get_lines()
    assert len(lines) == 2
    assert sorted(line.get_label() for line in lines) == ["conv_naive", "conv_tiled"]
    assert list(lines[0].get_xdata()) == [1, 10, 100, 1000]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "conv layer 1" in ax.get_title() and CPU_LABEL in ax.get_title()
    assert "not GPU timings" in ax.get_title()
    path = plots.save_figure(fig, results_dir() / "curves")
    assert path.suffix == ".png" and path.parent == tmp_path / "results"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_batch_curves_other_column_and_existing_axes(cpu):
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2)
    out = plots.batch_curves(fake_rows(), y="min_ms", ax=b, logy=False, ylabel="min (ms)")
    assert out is fig and len(b.get_lines()) == 2 and not a.get_lines()
    assert b.get_yscale() == "linear" and b.get_ylabel() == "min (ms)"
    assert b.get_title() == CPU_LABEL  # no title: the device label alone


def test_stacked_bars(cpu):
    parts = {"H2D": [1.0, 10.0, 100.0], "kernel": [0.5, 5.0, 50.0], "D2H": [0.2, 2.0, 20.0]}
    fig = plots.stacked_bars(["100", "1000", "10000"], parts, "where the time goes", "time (ms)")
    ax = fig.axes[0]
    assert len(ax.patches) == 9
    assert "where the time goes" in ax.get_title() and CPU_LABEL in ax.get_title()
    tops = [max(p.get_y() + p.get_height() for p in ax.patches if abs(p.get_x() + p.get_width() / 2 - i) < 1e-9)
            for i in range(3)]
    assert tops == pytest.approx([1.7, 17.0, 170.0])
    assert plots.bar_breakdown is plots.stacked_bars
    with pytest.raises(ValueError):
        plots.stacked_bars(["a", "b"], {"x": [1.0]}, "t", "ms")


def test_results_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_RESULTS_DIR", str(tmp_path / "a" / "b"))
    assert results_dir() == tmp_path / "a" / "b" and results_dir().is_dir()
    monkeypatch.delenv("LABKIT_RESULTS_DIR")
    assert results_dir() == REPO_ROOT / "results"
    assert (REPO_ROOT / "labkit").is_dir()


# --- on a GPU ------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_time_fn_and_region():
    import cupy
    dev = device()
    x = cupy.ones(1 << 24, cupy.float32)
    y = cupy.empty_like(x)
    for sync in (True, False):
        t = time_fn(lambda: cupy.multiply(x, 2.0, out=y), warmup=3, repeat=10, sync=sync)
        assert t.backend == "cuda" and t.device == dev.name
        assert 0 < t.min_ms <= t.median_ms and len(t.times_ms) == 10
        assert all(math.isfinite(v) for v in t.times_ms)
    with time_region() as r:
        cupy.multiply(x, 3.0, out=y)
    assert r.ms > 0
    rows = sweep(lambda b: (lambda: cupy.multiply(x[: b << 20], 2.0)), [1, 4, 16], progress=False)
    assert [r["batch"] for r in rows] == [1, 4, 16] and all(r["backend"] == "cuda" for r in rows)


# --- breakdowns of kernels and copies ---------------------------------------------------------
@pytest.mark.check
def test_conv_breakdown_parts_and_totals():
    from labkit.ladder import conv_breakdown
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 2, 11, 13)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    bd = conv_breakdown(x, w, b, variant="tiled", activation="tanh", warmup=1, repeat=2)
    assert [p.kind for p in bd.parts] == ["H2D", "H2D", "H2D", "kernel", "D2H"]
    assert bd.parts[3].name == "conv_tiled"
    assert bd.op_ms == bd.parts[3].median_ms > 0
    assert bd.by_kind()["H2D"] == sum(p.median_ms for p in bd.parts[:3])
    assert abs(sum(r["share"] for r in bd.rows()) - 1.0) < 1e-9
    assert all(r["device"] == labkit.device().label for r in bd.rows())
    text = bd.table()
    assert "op time (kernels)" in text and "whole time" in text and "conv_tiled" in text


def test_conv_breakdown_checks_the_result_before_it_times(monkeypatch):
    from labkit.ladder import breakdown as study
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 1, 7, 9)).astype(np.float32)
    w = rng.standard_normal((2, 1, 3, 3)).astype(np.float32)
    monkeypatch.setattr(study, "conv2d", lambda *args, out=None, **kwargs: out)     # a kernel that writes nothing
    with pytest.raises(AssertionError, match="conv_naive from host to host disagrees with the float64 reference"):
        study.conv_breakdown(x, w, warmup=0, repeat=1)


def test_breakdown_refuses_unknown_kinds_and_host_arrays_only():
    from labkit.ladder import conv_breakdown
    from labkit.measure import breakdown
    with pytest.raises(ValueError, match="kind must be one of"):
        breakdown([("copy", "memcpy", lambda: None)])
    with pytest.raises(TypeError, match="x_host must be a NumPy array"):
        conv_breakdown([[1.0]], np.zeros((1, 1, 1, 1), np.float32))


def test_batch_curves_stay_readable_at_cpu_sizes():
    """Log axes only where the values span a decade: a CPU run's one or two batch sizes get a linear
    axis with the batch as its tick, not a dot between 10^0-style ticks."""
    from labkit import plots
    wide = [{"label": "a", "batch": b, "median_ms": b * 0.01} for b in (1, 10, 100, 1000)]
    ax = plots.batch_curves(wide).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    cpu = [{"label": "a", "batch": 4, "median_ms": 3.0}, {"label": "b", "batch": 4, "median_ms": 5.5}]
    ax = plots.batch_curves(cpu).axes[0]
    assert ax.get_xscale() == "linear" and ax.get_yscale() == "linear" and list(ax.get_xticks()) == [4]


def test_shipped_rows_beside_a_local_run_on_another_device(cpu):
    """A CPU run's curves get the shipped H100 rows beside them, dashed and labelled with their device,
    in the local line's colour; on the device that measured them they are left out."""
    from labkit import plots
    from labkit.results import shipped_rows
    h100 = shipped_rows("conv_ladder_h100.json", layer="layer 1", label=["naive", "cuDNN"])
    assert {r["label"] for r in h100} == {"naive", "cuDNN"} and {r["batch"] for r in h100} == {100, 1000, 10000}
    assert all(r["device"].startswith("NVIDIA H100") for r in h100)
    local = [{"label": "naive", "batch": b, "median_ms": 40.0 * b, "device": CPU_LABEL} for b in (2, 4)]
    ax = plots.batch_curves(local, title="layer 1", shipped=h100).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"naive", "naive — H100, shipped", "cuDNN — H100, shipped"}
    dashed = lines["naive — H100, shipped"]
    assert dashed.get_linestyle() == "--" and list(dashed.get_xdata()) == [100, 1000, 10000]
    assert dashed.get_color() == lines["naive"].get_color()
    assert "dashed: NVIDIA H100" in ax.get_title() and CPU_LABEL in ax.get_title()
    assert ax.get_xscale() == "log"                      # 2 to 10,000: a log axis again
    on_h100 = [dict(r, median_ms=r["median_ms"] * 0.9) for r in h100]
    ax = plots.batch_curves(on_h100, shipped=h100).axes[0]
    assert len(ax.get_lines()) == 2 and "shipped" not in ax.get_title()


@pytest.mark.check
def test_shipped_reads_only_json_in_benchmarks_results():
    from labkit.results import shipped
    with pytest.raises(ValueError, match="name a .json file"):
        shipped("../../pyproject.toml")
    with pytest.raises(ValueError, match="name a .json file"):
        shipped("../results/conv_ladder_h100.json/..")


@pytest.mark.check
def test_result_files_are_named_by_the_gpus_short_name():
    from labkit.measure import device_tag
    assert device_tag("NVIDIA H100 80GB HBM3") == "h100" and device_tag("NVIDIA H200") == "h200"
    assert device_tag("NVIDIA A100-SXM4-80GB") == "a100" and device_tag("Tesla T4") == "t4"
    assert device_tag("NVIDIA GeForce RTX 4090") == "nvidia_geforce_rtx_4090"     # no model number glued to letters
    assert device_tag() == ("cpu" if labkit.backend() != "cuda" else device_tag(labkit.device().name))
