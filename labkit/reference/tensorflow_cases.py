"""TensorFlow's answers on fixed convolution cases, live or as recorded.

The NumPy reference is checked against TensorFlow.  Where TensorFlow is
installed (this machine's environment, CI) the check calls it; on a machine
without it (the GPU machine of the course, where TensorFlow is too large to
install) the check reads the outputs TensorFlow computed for the same inputs,
recorded by ``scripts/record_tensorflow_reference.py`` into
``data/reference/tensorflow_conv_cases.npz``, whose metadata names the
TensorFlow version that wrote it.
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from ..data.npz import read_npz
from ..results import DATA_DIR

RECORD = DATA_DIR / "reference" / "tensorflow_conv_cases.npz"

# (name, N, C, H, W, M, K, stride, pad, groups): the seed model's two layers and the
# awkward cases (odd sizes, stride 4, padding, groups, K = 1..11).
CASES = [
    ("fashion layer 1", 2, 1, 48, 48, 6, 5, 1, 0, 1),
    ("fashion layer 2", 2, 6, 22, 22, 16, 5, 1, 0, 1),
    ("odd 13x17, K3, pad 1", 3, 5, 13, 17, 7, 3, 1, 1, 1),
    ("stride 4, K11 (AlexNet conv1 style)", 1, 3, 59, 59, 8, 11, 4, 0, 1),
    ("2 groups, K5, pad 2", 2, 8, 15, 15, 6, 5, 1, 2, 2),
    ("K1 pointwise", 2, 9, 11, 7, 4, 1, 1, 0, 1),
    ("K7", 1, 2, 20, 19, 3, 7, 1, 0, 1),
]


def make_inputs(seed: int = 408):
    """The fixed inputs of every case (x, w, b), in float32."""
    rng = np.random.default_rng(seed)
    out = []
    for name, n, c, h, w, m, k, s, p, g in CASES:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        out.append((name, x, wt, b, dict(stride=s, pad=p, groups=g)))
    return out


def import_tensorflow():
    """``import tensorflow``, with its start-up log kept off stderr.  TensorFlow's C++ logging (absl)
    writes to file descriptor 2 before any Python-side setting applies, and a notebook would show
    those lines in a red box after every first import; so the descriptor points at /dev/null while
    the module loads.  An ImportError is raised as usual."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    saved, null = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)
    return tensorflow


def tensorflow_conv2d(x, w, b, *, stride=1, pad=0, groups=1) -> np.ndarray:
    """TensorFlow's conv2d on NCHW/MCKK arrays (it computes in NHWC on the CPU)."""
    tf = import_tensorflow()
    xt = tf.constant(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))).transpose(0, 2, 3, 1))
    wt = tf.constant(w.transpose(2, 3, 1, 0))  # (K, K, C/groups, M)
    y = tf.nn.conv2d(xt, wt, strides=stride, padding="VALID") + b
    return y.numpy().transpose(0, 3, 1, 2)


def tensorflow_available() -> bool:
    try:
        import_tensorflow()             # importable is the question
        return True
    except Exception:
        return False


def tensorflow_outputs() -> tuple[list[np.ndarray], str]:
    """TensorFlow's outputs for every case, and where they came from."""
    if tensorflow_available():
        tf = import_tensorflow()
        outs = [tensorflow_conv2d(x, w, b, **kw) for _, x, w, b, kw in make_inputs()]
        return outs, f"TensorFlow {tf.__version__}, run now"
    f = read_npz(RECORD, max_bytes=16 * 2**20)
    meta = json.loads(str(f["meta"]))
    outs = [f[f"y{i}"] for i in range(len(CASES))]
    return outs, f"TensorFlow {meta['tensorflow']}, recorded {meta['date']} (not installed here)"
