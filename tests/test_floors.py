"""labkit.ladder.floors (a network's steps beside their roofline floors) and plots.floor_bars, on the
CPU executor: the rows, the text table, the shipped runs, the bar chart."""
from __future__ import annotations

import matplotlib
import numpy as np
import pytest

import labkit

matplotlib.use("Agg")

from labkit import plots  # noqa: E402
from labkit.ladder import floors  # noqa: E402
from labkit.models import fashion_mnist as fm  # noqa: E402

pytestmark = pytest.mark.check      # under a second on the CPU executor: part of make check

CEILINGS = {"copy_GBps": 100.0, "fp32_TFLOPs": 1.0}


@pytest.fixture(scope="module")
def fashion_rows():
    return floors.measure_case("fashion", "fp32", 3, CEILINGS, repeat=1, warmup=0, seed=5)


def test_a_row_per_plan_step_with_its_floor(fashion_rows):
    names = [name for name, _ in fm.FashionNet(fm.load_weights()).plan(3).steps]
    assert [r["step"] for r in fashion_rows] == names
    costs = fm.FashionNet(fm.load_weights()).step_costs(3)
    for r in fashion_rows:
        c = costs[r["step"]]
        floor = max(c.bytes / (CEILINGS["copy_GBps"] * 1e9), c.flops / (CEILINGS["fp32_TFLOPs"] * 1e12)) * 1e3
        assert r["floor_ms"] == pytest.approx(floor)
        assert r["bound"] == ("memory" if c.bytes / 100e9 > c.flops / 1e12 else "compute")
        assert r["measured_ms"] > 0 and r["percent_of_floor"] == pytest.approx(100 * floor / r["measured_ms"])
        assert r["device"] and r["batch"] == 3
        if labkit.backend() == "cpu":
            assert r["autotune"] == {"note": "CPU executor: nothing is tuned"}
        else:                   # tuned first: each configuration from a search, the disk cache or a table
            assert r["autotune"]["decisions"] >= 1 and sum(r["autotune"]["sources"].values()) >= 1


def test_the_table_puts_the_slowest_first_and_sums_the_steps(fashion_rows):
    lines = floors.table(fashion_rows).splitlines()
    slowest = max(fashion_rows, key=lambda r: r["measured_ms"])
    assert lines[1].startswith(slowest["step"])
    total = sum(r["measured_ms"] for r in fashion_rows)
    floor = sum(r["floor_ms"] for r in fashion_rows)
    last = lines[-1].split()
    assert lines[-1].startswith("all steps") and float(last[2]) == pytest.approx(total, rel=1e-3)
    assert float(last[-1].rstrip("%")) == pytest.approx(100 * floor / total, abs=0.06)
    assert len(lines) == len(fashion_rows) + 2
    short = floors.table(fashion_rows, top=2).splitlines()
    assert len(short) == 5 and short[3].startswith(f"{len(fashion_rows) - 2} more") and short[-1] == lines[-1]


def test_the_shipped_runs_give_a_case_with_its_device():
    rows = floors.shipped_case("alexnet", "tf32", 1024, gpu="h100")
    assert [r["step"] for r in rows][:3] == ["conv1", "lrn1", "pool1"]
    assert all(r["device"].startswith("NVIDIA H100") for r in rows)
    assert {r["floor_precision"] for r in rows if r["step"].startswith("conv")} == {"tf32"}
    assert floors.shipped_case("alexnet", "fp32", 3) == []          # no run has that batch
    assert floors.shipped_case("fashion", "fp32", 10000, gpu="a100") == []   # no such file


def test_unknown_cases_are_refused():
    with pytest.raises(ValueError, match="net must be one of"):
        floors.build_case("lenet", "fp32", 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="precision"):
        floors.build_case("alexnet", "fp16", 2, np.random.default_rng(0))


def test_floor_bars_draws_each_step_and_its_floor(fashion_rows):
    fig = plots.floor_bars(fashion_rows, "FashionNet")
    ax = fig.axes[0]
    assert len(ax.patches) == 2 * len(fashion_rows)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == max(fashion_rows, key=lambda r: r["measured_ms"])["step"]
    assert any("% of floor" in t.get_text() for t in ax.texts)
    fig = plots.floor_bars(fashion_rows, top=2)
    assert len(fig.axes[0].patches) == 4
    with pytest.raises(ValueError):
        plots.floor_bars([])
