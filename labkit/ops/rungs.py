"""The convolution ladder's rungs, in the order the notebooks climb them, and one call that reaches each.

    for r in RUNGS: print(r.name, r.kernel, r.idea)
    y = conv2d(x, w, b, stride=1, pad=0, groups=1, variant="implicit")

Every rung computes the same convolution (float32 NCHW x, MCKK w, bias and activation fused); they
differ in how the kernel gets its data.  A rung that cannot do a shape says so before anything is
compiled: the direct rungs (naive .. tuned) are the seed's valid convolutions (stride 1, no padding,
one group), the unrolled rung takes square kernels without dilation; TF32 needs a GPU.  Beside the
rungs, ``variant="auto"`` (the default) runs whichever kernel is fastest for the shape on this GPU
(labkit.ops.conv_auto).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import backends
from ..backends.cuda import current_device_id
from ..checks import check_array
from ..shapes import ConvLayer
from . import conv, conv_auto, implicit, unroll

__all__ = ["Rung", "RUNGS", "RUNG_NAMES", "VARIANTS", "conv2d"]


class Rung(NamedTuple):
    name: str       # conv2d's variant=
    kernel: str     # the kernel(s) it launches, in labkit/kernels/
    idea: str       # what it adds to the rung before it
    notebook: str   # where the series builds it


RUNGS: tuple[Rung, ...] = (
    Rung("naive", "conv_naive.cu: conv_naive",
         "one thread per output element, every read from global memory", "02"),
    Rung("tiled", "conv_tiled.cu: conv_tiled",
         "the block's input tile and its halo staged in shared memory, read K*K times from there", "03"),
    Rung("constant", "conv_constant.cu: conv_constant",
         "tiled, with the weights and bias in __constant__ memory: one broadcast read per warp", "04"),
    Rung("tuned", "conv_tuned.cu: conv_tuned_const / conv_tuned_smem",
         "compiled for the layer's shape: whole images in shared memory, all channels per thread, "
         "launch parameters swept per GPU", "05"),
    Rung("unrolled", "im2col.cu: im2col, then gemm.cu: gemm_dbuf",
         "the convolution as a matrix multiply: im2col writes the column matrix, one GEMM per image and group",
         "06"),
    Rung("implicit", "conv_implicit.cu: conv_implicit",
         "the same GEMM with the column matrix never written: tiles gathered from x as they are needed, "
         "the whole batch one launch", "06"),
    Rung("implicit_tf32", "conv_implicit_tf32.cu: conv_implicit_tf32",
         "the implicit GEMM on the tensor cores: TF32 mma.sync, cp.async stages (GPU only)", "06"),
)
RUNG_NAMES: tuple[str, ...] = tuple(r.name for r in RUNGS)
VARIANTS: tuple[str, ...] = ("auto",) + RUNG_NAMES
_DIRECT = conv.VARIANTS
_OPTIONS = {**{v: ("tile_width", "check", "config") for v in _DIRECT},
            "unrolled": ("gemm_variant", "params"), "implicit": ("tiles",),
            "implicit_tf32": ("tiles", "round_tf32"), "auto": ()}
# The functional auto's choice per shape, batch and options on this device, so that a call after the
# first makes only the chosen family's layer (labkit.autotune's disk cache keeps it across processes).
_AUTO_CHOICES: dict[tuple, dict] = {}


def conv2d(x, w, b=None, *, stride=1, pad=0, dilation=1, groups: int = 1, variant: str = "auto",
           activation: str | None = None, out=None, **options):
    """y = act(conv(x, w) + b), PyTorch's conv2d (cross-correlation) with a fused bias and activation.

    x float32 (N, C, H, W); w float32 (M, C/groups, KH, KW); b float32 (M,) or None; on the backend
    (``labkit.xp`` arrays).  ``stride``, ``pad`` (zeros on both sides) and ``dilation``: an int or an
    (h, w) pair; the output is (N, M, Ho, Wo) with Ho = (H + 2*ph - dh*(KH-1) - 1) // sh + 1, as in
    PyTorch.  ``activation``: None, "tanh", "relu" or "relu6" (NaN stays NaN, as in PyTorch).

    ``variant``: "auto" (the default: the fastest correct kernel for the shape on this GPU,
    labkit.ops.conv_auto) or a rung of the ladder (``RUNG_NAMES``), each refusing, before anything
    compiles, a shape it cannot run.  ``options`` go to the rung: naive .. tuned take ``tile_width``,
    ``check``, ``config`` (labkit.ops.conv.conv2d); unrolled ``gemm_variant``, ``params``
    (labkit.ops.unroll.conv2d_unrolled); implicit ``tiles``, and implicit_tf32 also ``round_tf32``
    (labkit.ops.implicit.conv2d_implicit).
    """
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(map(repr, VARIANTS))}, got {variant!r}")
    unknown = sorted(set(options) - set(_OPTIONS[variant]))
    if unknown:
        raise TypeError(f"variant {variant!r} takes no option {', '.join(map(repr, unknown))} (its options: "
                        f"{', '.join(_OPTIONS[variant]) or 'none'})")
    if variant == "auto":
        return _auto(x, w, b, stride, pad, dilation, groups, activation, out)
    if variant in ("implicit", "implicit_tf32"):
        return implicit.conv2d_implicit(x, w, b, stride=stride, pad=pad, dilation=dilation, groups=groups,
                                        activation=activation, out=out,
                                        precision="tf32" if variant == "implicit_tf32" else "fp32", **options)
    # The ladder's other rungs take one int stride and padding, no dilation, and square kernels (their
    # own checks say so of the kernel, naming TensorFlow's KKCM layout where the weights look like it).
    ints_only = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (stride, pad, dilation))
    if not ints_only or dilation != 1:
        raise ValueError(f"variant {variant!r} takes square kernels, one int stride and padding and no dilation; "
                         f"got stride={stride!r}, pad={pad!r}, dilation={dilation!r}: use variant='auto' or "
                         "variant='implicit'")
    if variant in _DIRECT:
        if (stride, pad, groups) != (1, 0, 1):
            raise ValueError(f"variant {variant!r} computes the seed's valid convolutions (stride 1, pad 0, "
                             f"groups 1), got stride={stride}, pad={pad}, groups={groups}: use "
                             "variant='auto' or variant='implicit' for strides, padding and groups")
        return conv.conv2d(x, w, b, variant=variant, activation=activation, out=out, **options)
    gemm_variant = options.pop("gemm_variant", "dbuf")
    return unroll.conv2d_unrolled(x, w, b, stride=stride, pad=pad, groups=groups, activation=activation,
                                  variant=gemm_variant, out=out, **options)


def _auto(x, w, b, stride, pad, dilation, groups, activation, out):
    backend = backends.current()
    check_array(x, "x", "NCHW", 4, backend)
    check_array(w, "w", "(M, C/groups, KH, KW)", 4, backend)
    (N, C, H, W), (M, _, KH, KW) = (tuple(int(v) for v in a.shape) for a in (x, w))
    layer = ConvLayer.of(C, H, W, M, (KH, KW), stride, pad, dilation, groups)
    layer.check()
    if C // groups != int(w.shape[1]):
        raise ValueError(f"w must have shape {(M, C // groups, KH, KW)} (M, C/groups, KH, KW) for x of {C} "
                         f"channels and groups={groups}, got {tuple(w.shape)}")
    layer_obj = conv_auto.AutoConv2d(w, b, layer, activation=activation)
    key = (backend, current_device_id() if backend == "cuda" else 0, layer, N, b is not None, activation)
    config = _AUTO_CHOICES.get(key)
    if config is None:
        config = _AUTO_CHOICES[key] = layer_obj.choice(N)
        return layer_obj(x, out)
    return layer_obj.make(config)(x, out)
