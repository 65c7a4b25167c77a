"""labkit.autotune.tuning_status / describe: what is tuned for the device in use (notebook 00).  On the
CPU executor nothing is; a GPU's status is checked with the backend, the GPU's name and its disk cache
stood in for (the shipped tables are the real files)."""
from __future__ import annotations

import json

import pytest

from labkit import autotune, tuned
from labkit.autotune import status as status_mod
from labkit.autotune.cache import DiskCache

pytestmark = pytest.mark.check
H100 = "NVIDIA H100 80GB HBM3"
FP = {"gpu": H100, "compute_capability": [9, 0], "sms": 132, "cuda_runtime": 12080, "cuda_driver": 12080,
      "cupy": "13.6.0", "nvrtc": [12, 8]}


def test_on_the_cpu_executor_nothing_is_tuned(monkeypatch):
    monkeypatch.delenv(autotune.MODE_ENV, raising=False)
    s = autotune.tuning_status()
    assert (s["backend"], s["gpu"], s["fingerprint"], s["cache_path"], s["cache_entries"]) == ("cpu", None, None, None, 0)
    assert set(s["shipped"]) == set(status_mod.SHIPPED_TABLES) and not any(s["shipped"].values())
    assert s["mode"] == "auto"
    assert "Nothing is tuned here" in autotune.describe(s)


def _as_h100(monkeypatch, tmp_path):
    monkeypatch.setattr(status_mod.backends, "current", lambda: "cuda")
    monkeypatch.setattr(status_mod.tuned, "gpu_name", lambda: H100)
    cache = DiskCache(tmp_path / "fp.json", FP)
    monkeypatch.setattr(status_mod.DiskCache, "for_this_gpu", classmethod(lambda cls: cache))
    return cache


def test_a_gpu_sees_its_shipped_entries_and_its_disk_cache(monkeypatch, tmp_path):
    cache = _as_h100(monkeypatch, tmp_path)
    cache.put("conv_tuned|abc|def|C1_H48_W48_M6_K5_N2_tanh", {"config": {"threads": 64}, "ms": 0.1})
    monkeypatch.setenv(autotune.MODE_ENV, "0")
    monkeypatch.delenv(tuned.SHIPPED_ENV, raising=False)
    s = autotune.tuning_status()
    want = {name: len(json.loads(path.read_text())["gpus"].get(H100, {}))
            for name, path in status_mod.SHIPPED_TABLES.items()}
    assert s["shipped"] == want and all(want.values())       # every shipped table knows the H100
    assert (s["gpu"], s["fingerprint"], s["cache_entries"]) == (H100, FP, 1)
    assert s["cache_path"] == str(tmp_path / "fp.json")
    text = autotune.describe(s)
    assert f"GPU: {H100} (compute capability 9.0, 132 SMs" in text
    assert f"conv_tuned ({want['conv_tuned']} shapes)" in text
    assert "Disk cache: autotune/fp.json in the kernel cache folder" in text and str(tmp_path) not in text
    assert "1 winners so far." in text and "LABKIT_AUTOTUNE=0: no search" in text


@pytest.mark.parametrize("raw, words", [("1", "LABKIT_AUTOTUNE=1: each shape the disk cache lacks is searched"),
                                        ("auto", "LABKIT_AUTOTUNE=auto: a shape that neither")])
def test_the_mode_and_budget_are_said(monkeypatch, tmp_path, raw, words):
    _as_h100(monkeypatch, tmp_path)
    monkeypatch.setenv(autotune.MODE_ENV, raw)
    monkeypatch.setenv(autotune.BUDGET_ENV, "2.5")
    text = autotune.describe()
    assert words in text and "budget 2.5 s a search" in text and "0 winners so far." in text


def test_an_unknown_gpu_and_ignored_tables(monkeypatch, tmp_path):
    _as_h100(monkeypatch, tmp_path)
    monkeypatch.setattr(status_mod.tuned, "gpu_name", lambda: "Some Other GPU")
    s = autotune.tuning_status()
    assert not any(s["shipped"].values())
    assert "no entry for this GPU" in autotune.describe(s)
    monkeypatch.setenv(tuned.SHIPPED_ENV, "0")
    assert "ignored ($LABKIT_SHIPPED_TABLES=0)" in autotune.describe()


def test_history_table_shows_each_decision():
    rows = [{"family": "conv_tuned", "key": "C1_H48_W48_M6_K5_N512_tanh", "source": "search",
             "config": {"threads": 64, "weights": "shared"}, "candidates": 36, "ms": 0.0123, "first_ms": 0.02,
             "timed": 16, "failed": 0, "seconds": 1.5},
            {"family": "gemm", "key": "M512_N140_K5184_bias1", "source": "cache", "config": {"bm": 64},
             "candidates": 12, "ms": 0.5, "first_ms": 0.75, "timed": 12, "seconds": 2.0},
            {"family": "gemm", "key": "M512_N10_K140_bias1", "source": "default", "config": {"bm": 32},
             "candidates": 1}]
    lines = autotune.history_table(rows).splitlines()
    assert lines[0].split() == ["family", "key", "source", "config", "ms", "first", "ms", "timed"]
    assert lines[1].split() == ["conv_tuned", "C1_H48_W48_M6_K5_N512_tanh", "search", "threads=64",
                                "weights=shared", "0.012", "0.020", "16/36"]
    assert lines[2].split()[2:] == ["cache", "bm=64", "0.500", "0.750", "12/12"]
    assert lines[3].split()[2:] == ["default", "bm=32", "-", "-", "-"]
    assert "nothing asked the autotuner" in autotune.history_table([])
