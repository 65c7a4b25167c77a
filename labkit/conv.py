"""Moved: the direct convolution rungs are labkit.ops.conv; the face of the whole ladder is
labkit.conv2d (labkit.ops.rungs).  Old names resolve from their new homes:

    conv2d, Conv2d, conv_launch_config, kernel_resources, format_resources, VARIANTS,
    CONST_WEIGHT_FLOATS, CONST_BIAS_FLOATS           -> labkit.ops.conv
    ACTIVATIONS                                      -> labkit.checks
    SHARED_MEM_LIMIT, CONSTANT_MEMORY_LIMIT          -> labkit.backends.limits (SHARED_MEM_PER_BLOCK, CONSTANT_MEMORY)
"""
from .moved import forwarding

__getattr__, __dir__ = forwarding(__name__, "labkit.ops.conv", {
    "ACTIVATIONS": "labkit.checks",
    "SHARED_MEM_LIMIT": "labkit.backends.limits:SHARED_MEM_PER_BLOCK",
    "CONSTANT_MEMORY_LIMIT": "labkit.backends.limits:CONSTANT_MEMORY",
})
