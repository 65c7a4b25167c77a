"""Moved: the implicit-GEMM convolution is labkit.ops.implicit; its tile sweep and its comparison
with cuDNN are labkit.ladder.implicit; layer shapes are labkit.shapes.  Old names resolve from their
new homes:

    ImplicitConv2d, conv2d_implicit, Tiles, tiles_for, default_tiles, candidates, SMALL_TILES,
    k_taps, pack_weights_tf32, round_to_tf32, prepare_weights, PRECISIONS, TOLERANCE, TABLE,
    ConvLayer, ALEXNET_CONVS                           -> labkit.ops.implicit (the shapes: labkit.shapes)
    sweep_implicit, record_tiles, compare, summarize, table   -> labkit.ladder.implicit
    random_case                                        -> labkit.ladder.harness
    SHARED_LIMIT, DYNAMIC_SHARED_LIMIT                 -> labkit.backends.limits
"""
from .moved import forwarding

__getattr__, __dir__ = forwarding(__name__, "labkit.ops.implicit", {
    **{n: "labkit.ladder.implicit" for n in ("sweep_implicit", "record_tiles", "compare", "summarize", "table")},
    "random_case": "labkit.ladder.harness",
    "SHARED_LIMIT": "labkit.backends.limits:SHARED_MEM_PER_BLOCK",
    "DYNAMIC_SHARED_LIMIT": "labkit.backends.limits:SHARED_MEM_OPTIN_MAX",
})
