"""The peers every GPU time is compared with, in the same run: PyTorch's twins of labkit's networks
and layers (cuDNN and cuBLAS through PyTorch: ``torch_twins``), and cuDNN's own algorithm table
through libcudnn's C API (``cudnn``).

    if peers.cudnn_available():
        run = peers.cudnn_conv2d(x, w, b, activation="tanh")   # x, w, b: CuPy arrays (shared, no copy)
        t = measure.time_fn(run)                               # timed like labkit's kernels
    table = peers.cudnn.find_algorithms(layer, 256)             # cuDNN's find API, every algorithm

PyTorch is optional: without it (or without a GPU) ``cudnn_available()`` says why.
"""
from __future__ import annotations

from . import cudnn, torch_twins
from .torch_twins import (TorchResNetSmall, as_torch, cudnn_available, cudnn_conv2d, cudnn_fashion_net,
                          cudnn_fashion_net_graph, tf32_gemm_TFLOPs, torch_alexnet, torch_alexnet_graph, torch_capture,
                          torch_graph, torch_mobilenet_v2, torch_resnet18)

__all__ = ["cudnn", "torch_twins", "TorchResNetSmall", "as_torch", "cudnn_available", "cudnn_conv2d",
           "cudnn_fashion_net", "cudnn_fashion_net_graph", "tf32_gemm_TFLOPs", "torch_alexnet", "torch_alexnet_graph",
           "torch_capture", "torch_graph", "torch_mobilenet_v2", "torch_resnet18"]
