"""Moved: im2col, col2im and the unrolled convolution are labkit.ops.unroll.  Old names resolve from there:

    im2col, col2im, conv2d_unrolled, out_size          -> labkit.ops.unroll
"""
from .moved import forwarding

__getattr__, __dir__ = forwarding(__name__, "labkit.ops.unroll", {})
