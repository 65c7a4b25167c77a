"""NumPy references for the CNN layers of the course (NCHW activations, MCKK weights).

``layers`` holds the ground-truth layers every kernel is tested against;
``cpu_conv`` holds the three CPU convolutions of notebook 01.
"""
from __future__ import annotations

from .cpu_conv import conv2d_im2col, conv2d_loops, conv2d_vectorized, im2col
from .layers import (
    avg_pool2d,
    conv2d,
    conv_transpose2d,
    dense,
    global_avg_pool,
    layer_norm,
    lrn,
    max_pool2d,
    relu,
    relu6,
    softmax,
    tanh,
)

__all__ = [
    "conv2d",
    "conv_transpose2d",
    "max_pool2d",
    "avg_pool2d",
    "global_avg_pool",
    "relu",
    "relu6",
    "tanh",
    "lrn",
    "layer_norm",
    "dense",
    "softmax",
    "conv2d_loops",
    "conv2d_vectorized",
    "conv2d_im2col",
    "im2col",
]
