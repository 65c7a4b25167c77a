"""One convolution layer from host arrays to a host result, part by part (notebook 02): the copies
in, the kernel, the copy out, as nvprof's summary shows them.

    bd = conv_breakdown(x_host, w_host, b_host, variant="tuned", activation="tanh")
    print(bd.table())            # Time(%)  Time  Name, one line per part, then op time and whole time
"""
from __future__ import annotations

import numpy as np

from .. import backends, reference
from ..measure import Breakdown, breakdown
from ..ops.conv import conv2d
from .harness import check_output, reference_activation

__all__ = ["conv_breakdown"]


def conv_breakdown(x_host, w_host, b_host=None, *, variant: str = "naive", activation: str | None = None,
                   tile_width: int = 16, warmup: int = 2, repeat: int = 10) -> Breakdown:
    """One convolution layer from host arrays to a host result: copies in, the kernel, the copy out.

    ``x_host``, ``w_host``, ``b_host`` are NumPy float32 arrays (NCHW, MCKK, (M,)); the device
    buffers are allocated once, beforehand, so the parts are the copies and the kernel alone.  The
    whole pass runs once first and its first two images are checked against the float64 reference.
    """
    xp = backends.xp()
    on_gpu = backends.current() == "cuda"
    arrays = {"x": x_host, "w": w_host} | ({} if b_host is None else {"b": b_host})
    for k, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{k}_host must be a NumPy array (host memory), got {type(a).__name__}")
    dev = {k: xp.empty(a.shape, dtype=a.dtype) for k, a in arrays.items()}
    N, _, H, W = x_host.shape
    M, _, K, _ = w_host.shape
    y_dev = xp.empty((N, M, H - K + 1, W - K + 1), dtype=xp.float32)
    y_host = np.empty(y_dev.shape, dtype=np.float32)

    def h2d(k):
        src, dst = arrays[k], dev[k]
        return (lambda: dst.set(src)) if on_gpu else (lambda: np.copyto(dst, src))

    def d2h():
        if on_gpu:
            y_dev.get(out=y_host)
        else:
            np.copyto(y_host, y_dev)

    # nvprof's names on a GPU; on the CPU executor the "device" is host memory too.
    to_dev, to_host = ("[CUDA memcpy HtoD]", "[CUDA memcpy DtoH]") if on_gpu else \
        ("[host copy, as HtoD]", "[host copy, as DtoH]")
    steps = [(f"{to_dev} {k} {arrays[k].nbytes / 1e6:.1f} MB", "H2D", h2d(k)) for k in arrays]
    steps.append((f"conv_{variant}", "kernel",
                  lambda: conv2d(dev["x"], dev["w"], dev.get("b"), variant=variant,
                                 activation=activation, tile_width=tile_width, out=y_dev)))
    steps.append((f"{to_host} y {y_host.nbytes / 1e6:.1f} MB", "D2H", d2h))
    ref = reference_activation(reference.conv2d(x_host[:2], w_host, b_host), activation)
    check_output(f"conv_{variant} from host to host", lambda: [fn() for _, _, fn in steps], y_host, ref, tol=1e-5)
    return breakdown(steps, warmup=warmup, repeat=repeat,
                     meta={"variant": variant, "batch": int(N)})
