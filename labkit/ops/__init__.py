"""The ops: one module per kernel family, each launching its kernels and nothing else.

    conv          conv_naive / conv_tiled / conv_constant / conv_tuned.cu   the direct rungs
    tuned_config  conv_tuned.cu's launch parameters and the tuned table's winners
    unroll        im2col.cu                     im2col, col2im, the convolution as im2col + GEMM
    implicit      conv_implicit(_tf32).cu       the implicit-GEMM convolution, FP32 and TF32
    depthwise     depthwise.cu                  depthwise 3x3 (MobileNetV2): naive and shared-memory tiles
    depthwise_any depthwise_any.cu              depthwise of any kernel, stride, padding and dilation
    gemm          gemm.cu                       the GEMM ladder, few-row streaming, split-K, Dense
    dense_tf32    conv_implicit_tf32.cu         a dense layer on the tensor cores (a 1x1 convolution, GPU only)
    pool_softmax  pool_softmax.cu               max-pooling, global average pooling, softmax
    lrn           lrn.cu                        local response normalization
    conv_pool     conv_pool.cu                  conv + bias + tanh + 2x2 max-pool, fused
    conv_transpose conv_implicit.cu             conv_transpose2d: each output phase a stride-1 implicit GEMM
    pointwise     pointwise.cu                  activations, a per-channel affine map, Add/Mul with broadcasting
    pool_pad      pool_pad.cu                   pooling of any window and padding, constant padding, concatenation
    conv_auto     (all of the above)            conv2d's variant="auto": every family's candidates, one search
    rungs         the ladder's rungs in order, and conv2d() that reaches each (or "auto")

Each resolves once per shape what never changes (function, grid, block, shared memory, int32
arguments: a plan) and checks only the new input on a call.  Studies of the ops (ladders of timings,
sweeps, comparisons with cuDNN) live in labkit.ladder.
"""
from __future__ import annotations

from . import (conv, conv_auto, conv_pool, conv_transpose, dense_tf32, depthwise, depthwise_any, gemm, implicit, lrn,
               pointwise, pool_pad, pool_softmax, rungs, tuned_config, unroll)
from .conv_auto import AutoConv2d
from .conv_transpose import ConvTranspose2d, conv_transpose2d
from .conv import Conv2d
from .conv_pool import ConvPoolTanh, conv_pool_tanh
from .depthwise import DepthwiseConv2d, depthwise_conv2d
from .depthwise_any import DepthwiseAnyConv2d, depthwise_any_conv2d
from .dense_tf32 import DenseTF32
from .gemm import Dense
from .implicit import ImplicitConv2d
from .lrn import LRN
from .pool_softmax import GlobalAvgPool, MaxPool2d, Softmax, global_avg_pool, max_pool2d, softmax
from .rungs import RUNG_NAMES, RUNGS, Rung, conv2d

__all__ = ["conv", "conv_auto", "conv_pool", "conv_transpose", "AutoConv2d", "ConvTranspose2d", "conv_transpose2d",
           "dense_tf32", "DenseTF32", "depthwise", "depthwise_any", "gemm", "implicit", "lrn", "pointwise", "pool_pad", "pool_softmax", "rungs",
           "tuned_config", "unroll",
           "conv2d", "RUNGS", "RUNG_NAMES", "Rung", "Conv2d", "ImplicitConv2d", "Dense", "MaxPool2d", "Softmax",
           "LRN", "ConvPoolTanh", "max_pool2d", "softmax", "conv_pool_tanh", "DepthwiseConv2d", "depthwise_conv2d",
           "DepthwiseAnyConv2d", "depthwise_any_conv2d", "GlobalAvgPool", "global_avg_pool"]
