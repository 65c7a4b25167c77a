"""labkit.device_query: the device query, the measured ceilings and their cache, sizes().

The CPU-executor tests run everywhere (one real measurement of the ceilings, about
3 s on 2 cores); the GPU test needs CuPy and a GPU and is skipped otherwise.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import labkit.backends
import labkit.device_query as lkdevice
from labkit.device_query import CPU_LABEL, Ceilings, Device, device, sizes

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def cpu(monkeypatch, tmp_path):
    """The CPU executor, with the ceilings cache in a fresh folder."""
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path / "cache"))
    return device()


@pytest.mark.check
def test_cpu_device_fields(cpu):
    assert isinstance(cpu, Device)
    assert cpu.backend == "cpu" and not cpu.is_gpu
    assert cpu.name.startswith("CPU executor (")
    assert f"{os.cpu_count()} cores" in cpu.name
    assert cpu.name.endswith("timings are not GPU timings")
    assert cpu.sm_count == os.cpu_count()
    assert cpu.warp_size == 32
    assert cpu.shared_mem_per_block == 48 * 1024
    assert cpu.constant_memory_bytes == 64 * 1024
    assert cpu.max_threads_per_block == 1024
    # What a CPU has no counterpart of is None, not a made-up number.
    assert cpu.compute_capability is None and cpu.l2_cache_bytes is None
    assert cpu.sm_clock_mhz is None and cpu.registers_per_block is None
    assert cpu.theoretical_bandwidth_GBps is None


def test_cpu_label_says_not_gpu_timings(cpu):
    assert cpu.label == CPU_LABEL
    assert "not GPU timings" in cpu.label


@pytest.mark.check
def test_summary_is_a_table(cpu):
    text = cpu.summary()
    lines = text.splitlines()
    assert lines[0] == cpu.name
    for key in ("warp size", "shared memory per block", "constant memory", "max threads per block"):
        assert any(line.strip().startswith(key) for line in lines), key
    assert "49,152 bytes" in text and "65,536 bytes" in text


def test_device_is_cached_per_backend(cpu):
    assert device() is cpu
    import labkit
    assert labkit.device() is cpu


def test_ceilings_measured_cached_reused_and_refreshed(cpu, monkeypatch, tmp_path):
    cache = tmp_path / "cache" / "ceilings.json"
    c = cpu.ceilings()
    assert c.copy_GBps > 0 and c.fp32_TFLOPs > 0
    assert c.h2d_pageable_GBps is None and c.h2d_pinned_GBps is None
    assert c.device == cpu.name and c.backend == "cpu" and c.date
    assert c.measured_with["numpy"] and c.measured_with["python"]
    assert "FP32 GEMM" in c.summary() and "n/a (GPU only)" in c.summary()

    data = json.loads(cache.read_text())
    assert cpu.name in data and data[cpu.name]["copy_GBps"] == c.copy_GBps

    # A second call reads the cache: measuring again would fail here.
    def no_measuring(dev):
        raise AssertionError("measured again although the cache holds this device")
    monkeypatch.setattr(lkdevice, "_measure_cpu", no_measuring)
    assert cpu.ceilings() == c

    # refresh=True measures again and rewrites the entry, keeping other devices' entries.
    data["Some GPU"] = {"copy_GBps": 1.0, "fp32_TFLOPs": 2.0}
    cache.write_text(json.dumps(data))
    fresh = Ceilings(copy_GBps=123.0, fp32_TFLOPs=4.5, device=cpu.name, backend="cpu", date="now")
    monkeypatch.setattr(lkdevice, "_measure_cpu", lambda dev: fresh)
    assert cpu.ceilings(refresh=True) == fresh
    data = json.loads(cache.read_text())
    assert data[cpu.name]["copy_GBps"] == 123.0
    assert data["Some GPU"]["fp32_TFLOPs"] == 2.0
    assert cpu.ceilings() == fresh


def test_unreadable_cache_is_remeasured(cpu, monkeypatch, tmp_path):
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "ceilings.json").write_text("{not json")
    fresh = Ceilings(copy_GBps=1.0, fp32_TFLOPs=1.0, device=cpu.name)
    monkeypatch.setattr(lkdevice, "_measure_cpu", lambda dev: fresh)
    assert cpu.ceilings() == fresh
    # An entry missing a field is measured again too.
    (tmp_path / "cache" / "ceilings.json").write_text(json.dumps({cpu.name: {"copy_GBps": 5.0}}))
    assert cpu.ceilings() == fresh


@pytest.mark.check
def test_sizes_follow_the_backend(monkeypatch):
    monkeypatch.setenv("LABKIT_BACKEND", "cpu")
    assert sizes(gpu=[100, 1000, 10000], cpu=[10, 100]) == [10, 100]
    assert sizes(gpu=(1, 2), cpu=(3,)) == [3]
    monkeypatch.setattr(labkit.backends, "current", lambda: "cuda")
    assert sizes(gpu=[100, 1000], cpu=[10]) == [100, 1000]


def test_package_level_device_and_sizes(tmp_path):
    """``import labkit; labkit.device(); labkit.sizes(...)`` in a fresh interpreter."""
    env = {**os.environ, "LABKIT_BACKEND": "cpu", "LABKIT_CACHE_DIR": str(tmp_path),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    code = ("import labkit; d = labkit.device(); print(d.backend, labkit.sizes([1], [2]));"
            "import labkit.measure; print(labkit.device().label)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["cpu [2]", CPU_LABEL]


@pytest.mark.gpu
def test_gpu_device_and_ceilings(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_CACHE_DIR", str(tmp_path))
    dev = device()
    assert dev.backend == "cuda" and dev.is_gpu and dev.label == dev.name and dev.name
    assert dev.sm_count > 0 and dev.total_memory_bytes > 0 and dev.warp_size == 32
    assert dev.shared_mem_per_block == 48 * 1024
    assert dev.shared_mem_per_block_optin >= dev.shared_mem_per_block
    assert dev.constant_memory_bytes == 64 * 1024
    assert dev.max_threads_per_block == 1024
    assert len(dev.compute_capability) == 2 and dev.compute_capability >= (3, 0)
    assert dev.summary().splitlines()[0] == dev.name
    c = dev.ceilings()
    assert c.copy_GBps > 0 and c.fp32_TFLOPs > 0
    assert c.h2d_pageable_GBps > 0 and c.h2d_pinned_GBps > 0
    assert c.measured_with["cupy"]
    print(dev.summary())
    print(c.summary())


@pytest.mark.check
def test_use_backend_restores_the_previous_choice(monkeypatch):
    from labkit import backends
    monkeypatch.setenv("LABKIT_BACKEND", "auto")
    with backends.use("cpu"):
        assert backends.current() == "cpu"
    assert os.environ["LABKIT_BACKEND"] == "auto"
    monkeypatch.delenv("LABKIT_BACKEND")
    with backends.use("cpu"):
        assert backends.current() == "cpu"
    assert "LABKIT_BACKEND" not in os.environ
    with pytest.raises(backends.BackendUnavailable, match="not a backend"):
        backends.use("tpu")
