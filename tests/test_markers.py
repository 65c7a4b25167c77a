"""The ``gpu`` marker of tests/conftest.py at work, in a pytest of its own: a marked test runs where
CuPy sees a device and the GPU backend is on, and is skipped elsewhere, saying why.  A stand-in CuPy
(a module that reports some number of devices) plays the GPU, so this runs on any machine."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.check

TESTS = Path(__file__).resolve().parent
FAKE_CUPY = "class cuda:\n    class runtime:\n        getDeviceCount = staticmethod(lambda: {n})\n"
MARKED = ("import pytest\n\n\n@pytest.mark.gpu\ndef test_on_a_gpu():\n    pass\n\n\n"
          "def test_anywhere():\n    pass\n")


def run_marked(tmp_path: Path, devices: int, backend: str | None = None) -> str:
    """pytest's report of MARKED beside a copy of conftest.py, CuPy seeing ``devices`` GPUs."""
    (tmp_path / "fake" / "cupy").mkdir(parents=True)
    (tmp_path / "fake" / "cupy" / "__init__.py").write_text(FAKE_CUPY.format(n=devices))
    (tmp_path / "suite").mkdir()
    shutil.copy(TESTS / "conftest.py", tmp_path / "suite" / "conftest.py")
    (tmp_path / "suite" / "test_marked.py").write_text(MARKED)
    env = {k: v for k, v in os.environ.items() if k != "LABKIT_BACKEND"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "fake"), str(TESTS.parent), env.get("PYTHONPATH", "")])
    if backend:
        env["LABKIT_BACKEND"] = backend
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:xdist",
                          "suite"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return out.stdout


def test_a_gpu_test_runs_where_cupy_sees_a_gpu(tmp_path):
    assert "2 passed" in run_marked(tmp_path, devices=1)


def test_without_a_gpu_it_is_skipped_saying_why(tmp_path):
    report = run_marked(tmp_path, devices=0)
    assert "1 passed, 1 skipped" in report
    assert "needs a GPU, and CuPy sees no CUDA device: run on a GPU machine" in report


def test_with_the_cpu_executor_forced_it_is_skipped_saying_so(tmp_path):
    report = run_marked(tmp_path, devices=1, backend="cpu")
    assert "1 passed, 1 skipped" in report and "LABKIT_BACKEND=cpu forces the CPU executor" in report
