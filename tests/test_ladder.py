"""labkit.ladder: the checks and comparisons notebooks 02-05 and the ladder benchmark share, and the
host cost of a launch (notebook 07)."""
from __future__ import annotations

import numpy as np
import pytest

import labkit
from labkit import ladder
from labkit.ladder import overhead


@pytest.mark.check
@pytest.mark.parametrize("variant", ["naive", "tiled", "constant", "tuned"])
def test_check_passes_every_rung(variant):
    v = ladder.check(variant, batch=2)
    assert v.ok is True and str(v) == "True" and "matches the float64 reference" in v.message


@pytest.mark.check
def test_check_fails_a_kernel_that_skips_outputs(monkeypatch):
    real = ladder.seed.conv2d

    def lazy(x, w, b, *, out, **kw):   # computes everything but leaves the last image unwritten
        full = real(x, w, b, **kw)
        out[:-1] = full[:-1]
        return out
    monkeypatch.setattr(ladder.seed, "conv2d", lazy)
    v = ladder.check("naive", batch=2)
    assert not v and v.ok is False and str(v).startswith("False: layer N=2")
    assert "NaN (never written" in v.message and "first wrong outputs (n, m, h, w): (1, 0, 0, 0)" in v.message, v.message


def test_check_fails_a_kernel_that_is_slightly_wrong(monkeypatch):
    real = ladder.seed.conv2d

    def off(x, w, b, *, out, **kw):    # every output off by one part in ten thousand
        real(x, w, b, out=out, **kw)
        out *= np.float32(1.0001)
        return out
    monkeypatch.setattr(ladder.seed, "conv2d", off)
    v = ladder.check("tiled", batch=2)
    assert v.ok is False and "0 NaN" in v.message and "largest error" in v.message, v.message


@pytest.mark.check
def test_compare_rows():
    layers = {"small": dict(C=2, H=11, W=9, M=3, K=3)}
    rows = ladder.compare({"naive": {"variant": "naive"}, "tiled 8": {"variant": "tiled", "tile_width": 8}},
                          batches=[1, 2], layers=layers, repeat=1, warmup=0, progress=False, peer=False)
    assert [(r["label"], r["batch"]) for r in rows] == [("naive", 1), ("tiled 8", 1), ("naive", 2), ("tiled 8", 2)]
    for r in rows:
        assert r["median_ms"] > 0 and r["floor_ms"] > 0 and 0 < r["pct_of_floor"]
        assert r["device"] == labkit.device().label
        assert r["ratio_to_cudnn"] is None      # peer=False: no cuDNN rows, no ratios
    text = ladder.table(rows)
    assert text.count("\n") == len(rows) and "tiled 8" in text


@pytest.mark.check
def test_compare_adds_the_peer_where_there_is_one():
    layers = {"small": dict(C=2, H=11, W=9, M=3, K=3)}
    rows = ladder.compare(["naive"], batches=[2], layers=layers, repeat=1, warmup=0, progress=False)
    if labkit.peers.cudnn_available() is None:
        assert [r["label"] for r in rows] == ["naive", ladder.PEER]
        assert rows[1]["ratio_to_cudnn"] == 1.0 and rows[0]["ratio_to_cudnn"] > 0
    else:
        assert [r["label"] for r in rows] == ["naive"] and rows[0]["ratio_to_cudnn"] is None


def test_compare_refuses_a_wrong_kernel(monkeypatch):
    real = ladder.seed.conv2d

    def off(x, w, b, *, out, **kw):
        real(x, w, b, out=out, **kw)
        out += np.float32(1.0)
        return out
    monkeypatch.setattr(ladder.seed, "conv2d", off)
    with pytest.raises(AssertionError, match="disagrees with the float64 reference"):
        ladder.compare(["naive"], batches=[1], layers={"s": dict(C=1, H=7, W=7, M=2, K=3)},
                       repeat=1, warmup=0, progress=False, peer=False)


@pytest.mark.check
def test_host_costs_time_every_op_and_layer(monkeypatch, tmp_path):
    # Notebook 07's table of what a call costs the host, at two timed calls each.
    monkeypatch.setenv("LABKIT_RESULTS_DIR", str(tmp_path))     # the trivial kernel's .cu goes there
    rows = overhead.host_costs(repeat=2, warmup=1)
    labels = [r["label"] for r in rows]
    assert "labkit.load + launch (checked)" in labels and "Conv2d(tuned) layer" in labels
    assert "ImplicitConv2d layer" in labels and "ConvPoolTanh layer" in labels and len(set(labels)) == len(labels)
    assert all(r["kind"] == "host_us" and r["calls"] == 2 and 0 < r["p10_us"] <= r["p90_us"] for r in rows)
    assert overhead.summary(rows).count("\n") == len(rows)
