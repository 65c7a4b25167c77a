"""The layers a network is built from, in one place: objects that hold their weights on the backend
and prepare each input shape once, and the functions of the same operations.

    conv = layers.ImplicitConv2d(w, b, shapes.ConvLayer(3, 227, 227, 96, 11, stride=4), activation="relu")
    conv = layers.AutoConv2d(w, b, shapes.ConvLayer.of(64, 512, 512, 128, (5, 7), pad=(2, 3)))  # any geometry
    fc = layers.Dense(w6, b6, activation="relu")
    y = layers.max_pool2d(x, 3, 2)

Each lives with its kernels in labkit.ops; this module only gathers them.
"""
from __future__ import annotations

from .ops.conv import Conv2d
from .ops.conv_auto import AutoConv2d
from .ops.conv_backward import BackwardData
from .ops.conv_pool import CONV_POOL_THREADS, ConvPoolTanh, conv_pool_shared_bytes, conv_pool_tanh
from .ops.conv3x3_auto import Auto3x3, AutoWeightGrad3x3
from .ops.conv_small import SmallConv3x3, SmallWeightGrad
from .ops.conv_transpose import ConvTranspose2d, conv_transpose2d
from .ops.conv_winograd import WinogradConv3x3
from .ops.conv_winograd_wgrad import WinogradWeightGrad
from .ops.depthwise import DepthwiseConv2d, depthwise_conv2d
from .ops.depthwise_any import DepthwiseAnyConv2d, depthwise_any_conv2d
from .ops.dw_project import DepthwiseProject
from .ops.dense_tf32 import DenseTF32
from .ops.gemm import Dense
from .ops.implicit import ImplicitConv2d
from .ops.lrn import LRN, LRNMaxPool, lrn, lrn_max_pool
from .ops.pool_softmax import GlobalAvgPool, MaxPool2d, Softmax, global_avg_pool, max_pool2d, softmax

# Inference: the convolutions (any geometry on the fastest kernel for it, direct rungs, implicit GEMM,
# transposed, depthwise 3x3 and of any geometry, depthwise + projection fused, conv + tanh + pool
# fused), dense, pooling, LRN (and LRN + max-pool fused), softmax.  Training: the
# 3x3 block convolutions (direct and Winograd, forward and backward data) and their weight gradients,
# backward data of any convolution.
__all__ = ["AutoConv2d", "ConvTranspose2d", "conv_transpose2d", "Conv2d", "ImplicitConv2d", "DepthwiseConv2d", "DepthwiseAnyConv2d", "DepthwiseProject", "ConvPoolTanh",
           "Dense", "DenseTF32", "MaxPool2d", "GlobalAvgPool", "Softmax", "LRN", "LRNMaxPool",
           "SmallConv3x3", "WinogradConv3x3", "SmallWeightGrad", "WinogradWeightGrad", "Auto3x3", "AutoWeightGrad3x3",
           "BackwardData",
           "max_pool2d", "global_avg_pool", "softmax", "depthwise_conv2d", "depthwise_any_conv2d", "lrn", "lrn_max_pool",
           "conv_pool_tanh", "CONV_POOL_THREADS", "conv_pool_shared_bytes"]
