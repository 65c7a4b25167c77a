"""The recorded TensorFlow outputs (for machines without TensorFlow) are right and current."""
from __future__ import annotations

import json

import numpy as np
import pytest

from labkit import reference
from labkit.reference import tensorflow_cases as tc


def _recorded():
    with np.load(tc.RECORD, allow_pickle=False) as f:
        return [f[f"y{i}"] for i in range(len(tc.CASES))], json.loads(str(f["meta"]))


@pytest.mark.check
def test_record_covers_every_case():
    outs, meta = _recorded()
    assert meta["cases"] == [c[0] for c in tc.CASES]
    assert all(np.isfinite(y).all() for y in outs)


@pytest.mark.check
def test_numpy_reference_matches_the_record():
    outs, _ = _recorded()
    for (name, x, w, b, kw), y_tf in zip(tc.make_inputs(), outs):
        y = reference.conv2d(x, w, b, **kw)
        err = np.linalg.norm(y - y_tf) / np.linalg.norm(y)
        assert err < 1e-5, f"{name}: {err:.2e}"


def test_record_matches_tensorflow_run_now():
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed: the record cannot be re-checked here")
    outs, _ = _recorded()
    live, source = tc.tensorflow_outputs()
    assert "run now" in source
    for (name, *_), a, b in zip(tc.CASES, outs, live):
        assert np.linalg.norm(a - b) / np.linalg.norm(b) < 1e-6, name


def test_importing_tensorflow_leaves_stderr_clean():
    # TensorFlow's C++ start-up log would show in a notebook's red stderr box after its first import.
    import subprocess
    import sys
    pytest.importorskip("tensorflow", reason="TensorFlow is the reference extra (tensorflow-cpu)")
    code = ("from labkit.reference.tensorflow_cases import import_tensorflow, tensorflow_conv2d\n"
            "import numpy as np\n"
            "tf = import_tensorflow()\n"
            "y = tensorflow_conv2d(np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 3, 3), np.float32), np.zeros(1))\n"
            "print(tf.__version__, float(y.sum()))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split()[1] == "81.0" and run.stderr == "", run.stderr
