"""The convolution ladder's rungs, in the order the notebooks climb them, and one call that reaches each.

    for r in RUNGS: print(r.name, r.kernel, r.idea)
    y = conv2d(x, w, b, stride=1, pad=0, groups=1, variant="implicit")

Every rung computes the same convolution (float32 NCHW x, MCKK w, bias and activation fused); they
differ in how the kernel gets its data.  A rung that cannot do a shape says so before anything is
compiled: the direct rungs (naive .. tuned) are the seed's valid convolutions (stride 1, no padding,
one group); TF32 needs a GPU.
"""
from __future__ import annotations

from typing import NamedTuple

from . import conv, implicit, unroll

__all__ = ["Rung", "RUNGS", "RUNG_NAMES", "conv2d"]


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
_DIRECT = conv.VARIANTS
_OPTIONS = {**{v: ("tile_width", "check", "config") for v in _DIRECT},
            "unrolled": ("gemm_variant", "params"), "implicit": ("tiles",),
            "implicit_tf32": ("tiles", "round_tf32")}


def conv2d(x, w, b=None, *, stride: int = 1, pad: int = 0, groups: int = 1, variant: str = "naive",
           activation: str | None = None, out=None, **options):
    """y = act(conv(x, w) + b) on any rung of the ladder.

    x float32 (N, C, H, W); w float32 (M, C/groups, K, K); b float32 (M,) or None; on the backend
    (``labkit.xp`` arrays).  ``variant``: a name of ``RUNG_NAMES``.  ``options`` go to the rung:
    naive .. tuned take ``tile_width``, ``check``, ``config`` (labkit.ops.conv.conv2d); unrolled
    ``gemm_variant``, ``params`` (labkit.ops.unroll.conv2d_unrolled); implicit ``tiles``, and
    implicit_tf32 also ``round_tf32`` (labkit.ops.implicit.conv2d_implicit).
    """
    if not isinstance(variant, str) or variant not in RUNG_NAMES:
        raise ValueError(f"variant must be one of {', '.join(map(repr, RUNG_NAMES))}, got {variant!r}")
    unknown = sorted(set(options) - set(_OPTIONS[variant]))
    if unknown:
        raise TypeError(f"variant {variant!r} takes no option {', '.join(map(repr, unknown))} (its options: "
                        f"{', '.join(_OPTIONS[variant]) or 'none'})")
    if variant in _DIRECT:
        if (stride, pad, groups) != (1, 0, 1):
            raise ValueError(f"variant {variant!r} computes the seed's valid convolutions (stride 1, pad 0, "
                             f"groups 1), got stride={stride}, pad={pad}, groups={groups}: use "
                             "variant='implicit' (or 'unrolled') for strides, padding and groups")
        return conv.conv2d(x, w, b, variant=variant, activation=activation, out=out, **options)
    if variant == "unrolled":
        gemm_variant = options.pop("gemm_variant", "dbuf")
        return unroll.conv2d_unrolled(x, w, b, stride=stride, pad=pad, groups=groups, activation=activation,
                                      variant=gemm_variant, out=out, **options)
    return implicit.conv2d_implicit(x, w, b, stride=stride, pad=pad, groups=groups, activation=activation,
                                    precision="tf32" if variant == "implicit_tf32" else "fp32", out=out, **options)
