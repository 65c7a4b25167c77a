"""Any CNN from an ONNX file on labkit's kernels: ``labkit.import_onnx(path) -> model``.

    reader   the safe reader: sizes bounded before reading, dims checked against data, external
             data only inside the file's folder, nested graphs refused, nodes put in run order
    nodes    each supported op: attributes checked (others refused, naming the op and the node),
             output shapes, FLOPs
    nodes_layout  the ops that move values: Transpose, Slice, Split (a slice per output), and
             ReduceMean over H and W
    host     shape arithmetic on the host (Shape, Gather, Concat, ... feeding a Reshape's target)
    graph    nodes to steps: constants folded, shapes inferred, BN, bias, activation and residual
             fused into the step before
    layers   which labkit kernel runs each step
    model    OnnxModel: model(x), model.plan(N) (a CUDA graph), model.describe(N)
"""
from __future__ import annotations

from .graph import SUPPORTED_OPS
from .model import GraphPlan, OnnxModel, Table, import_onnx
from .reader import MAX_BYTES, OnnxGraph, read_graph

__all__ = ["import_onnx", "OnnxModel", "GraphPlan", "Table", "read_graph", "OnnxGraph", "SUPPORTED_OPS", "MAX_BYTES"]
