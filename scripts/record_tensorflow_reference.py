"""Record TensorFlow's outputs on the fixed convolution cases (for machines without TensorFlow).

    .venv/bin/python scripts/record_tensorflow_reference.py

Writes data/reference/tensorflow_conv_cases.npz: one output per case of
labkit.reference.tensorflow_cases.CASES, and the TensorFlow version and date.
"""
from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labkit.reference import tensorflow_cases as tc  # noqa: E402


def main() -> None:
    import tensorflow as tf
    outs = {f"y{i}": tc.tensorflow_conv2d(x, w, b, **kw) for i, (_, x, w, b, kw) in enumerate(tc.make_inputs())}
    meta = {"tensorflow": tf.__version__, "date": datetime.now(timezone.utc).date().isoformat(),
            "cases": [c[0] for c in tc.CASES]}
    tc.RECORD.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(tc.RECORD, meta=np.array(json.dumps(meta)), **outs)
    print(f"wrote {tc.RECORD} ({tc.RECORD.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
