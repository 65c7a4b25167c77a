"""A ResNet-18-shaped network written as an ONNX file with onnx.helper, no PyTorch needed: the nodes
torch.onnx.export writes for torchvision's resnet18 in eval mode with training=TrainingMode.PRESERVE,
which leaves out the exporter's own folding of batch normalization: every Conv followed by its
BatchNormalization, Relu, an Add for each skip, MaxPool, GlobalAveragePool, Flatten, Gemm; its
initializers named as torchvision's state_dict names them, its nodes named after torchvision's
modules.  The weights are seeded random numbers: the network classifies nothing, but it has
resnet18's shapes (at ``width`` 64 and 1000 classes, resnet18's own), so labkit's kernels do
resnet18's work on it.

    weights = synthetic_weights(width=64, classes=1000)      # {torchvision's name: float32 array}
    path = write("resnet18.onnx", weights, hw=224)           # input (N, 3, 224, 224), N left open
    logits = reference_logits(weights, x)                    # the same graph in float64 NumPy, node by node

``torch_forward`` (labkit.peers.torch_twins) runs the same weights in PyTorch.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import reference
from ..errors import check_int

__all__ = ["BLOCKS", "BN_EPS", "OPSET", "blocks", "parameter_shapes", "synthetic_weights", "graph_nodes", "write",
           "reference_logits"]

BLOCKS = (2, 2, 2, 2)      # BasicBlocks per stage: resnet18
BN_EPS = 1e-5              # torchvision's BatchNorm2d default
OPSET = 13


def blocks(width: int = 64) -> list[tuple[str, int, int, int]]:
    """(module prefix, input channels, output channels, stride) of each BasicBlock, in order."""
    out, c_in = [], width
    for stage, count in enumerate(BLOCKS):
        c_out = width * 2 ** stage
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            out.append((f"layer{stage + 1}.{i}", c_in, c_out, stride))
            c_in = c_out
    return out


def _bn_shapes(prefix: str, c: int) -> dict:
    return {f"{prefix}.{p}": (c,) for p in ("weight", "bias", "running_mean", "running_var")}


def parameter_shapes(width: int = 64, classes: int = 1000) -> dict[str, tuple]:
    """{torchvision's state_dict name: shape} of the network's parameters (num_batches_tracked left out)."""
    check_int(width, "width")
    check_int(classes, "classes")
    shapes = {"conv1.weight": (width, 3, 7, 7), **_bn_shapes("bn1", width)}
    for prefix, c_in, c_out, stride in blocks(width):
        shapes[f"{prefix}.conv1.weight"] = (c_out, c_in, 3, 3)
        shapes.update(_bn_shapes(f"{prefix}.bn1", c_out))
        shapes[f"{prefix}.conv2.weight"] = (c_out, c_out, 3, 3)
        shapes.update(_bn_shapes(f"{prefix}.bn2", c_out))
        if stride != 1 or c_in != c_out:
            shapes[f"{prefix}.downsample.0.weight"] = (c_out, c_in, 1, 1)
            shapes.update(_bn_shapes(f"{prefix}.downsample.1", c_out))
    shapes["fc.weight"] = (classes, width * 8)
    shapes["fc.bias"] = (classes,)
    return shapes


def synthetic_weights(width: int = 64, classes: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 weights of the right shapes: convolutions Kaiming-normal (fan out, as torchvision
    initializes them), batch normalization with random scales, shifts and running statistics (so that
    folding them matters), a small random classifier."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in parameter_shapes(width, classes).items():
        if len(shape) == 4:
            v = rng.normal(0.0, np.sqrt(2.0 / (shape[0] * shape[2] * shape[3])), shape)
        elif name.startswith("fc."):
            v = rng.normal(0.0, 1.0 / np.sqrt(shape[-1]) if name.endswith("weight") else 0.1, shape)
        elif name.endswith("running_var"):
            v = rng.uniform(0.5, 1.5, shape)
        elif name.endswith("running_mean"):
            v = rng.normal(0.0, 0.1, shape)
        elif name.endswith("weight"):
            v = rng.uniform(0.5, 1.0, shape)      # BN's gamma: below 1, so that eight skips do not blow up
        else:
            v = rng.normal(0.0, 0.1, shape)       # BN's beta
        out[name] = v.astype(np.float32)
    return out


def _widths(weights: dict) -> tuple[int, int]:
    try:
        width, classes = int(weights["conv1.weight"].shape[0]), int(weights["fc.weight"].shape[0])
    except (KeyError, AttributeError, IndexError, TypeError):
        raise ValueError("weights must hold torchvision's resnet18 names, 'conv1.weight' and 'fc.weight' among them") \
            from None
    want = parameter_shapes(width, classes)
    wrong = [k for k, s in want.items() if k not in weights or tuple(np.shape(weights[k])) != s]
    if wrong or set(weights) - set(want):
        extra = sorted(set(weights) - set(want))
        raise ValueError(f"weights do not match a ResNet-18 of width {width} and {classes} classes: "
                         f"{'missing or misshapen ' + repr(wrong[:3]) if wrong else ''}"
                         f"{' unexpected ' + repr(extra[:3]) if extra else ''}")
    return width, classes


def graph_nodes(weights: dict) -> list:
    """The graph's nodes (onnx NodeProto), input 'x', output 'logits', in the exporter's order."""
    from onnx import helper
    width, _ = _widths(weights)
    nodes = []

    def node(op, ins, name, **attrs):
        nodes.append(helper.make_node(op, ins, [f"{name}:out"], name=name, **attrs))
        return f"{name}:out"

    def conv_bn(x, conv, bn, k, stride, pad):
        h = node("Conv", [x, f"{conv}.weight"], conv, kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4)
        return node("BatchNormalization", [h] + [f"{bn}.{p}" for p in ("weight", "bias", "running_mean",
                                                                         "running_var")], bn, epsilon=BN_EPS)

    h = node("Relu", [conv_bn("x", "conv1", "bn1", 7, 2, 3)], "relu")
    h = node("MaxPool", [h], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for prefix, c_in, c_out, stride in blocks(width):
        skip = h
        h = node("Relu", [conv_bn(h, f"{prefix}.conv1", f"{prefix}.bn1", 3, stride, 1)], f"{prefix}.relu")
        h = conv_bn(h, f"{prefix}.conv2", f"{prefix}.bn2", 3, 1, 1)
        if stride != 1 or c_in != c_out:
            skip = conv_bn(skip, f"{prefix}.downsample.0", f"{prefix}.downsample.1", 1, stride, 0)
        h = node("Relu", [node("Add", [h, skip], f"{prefix}.add")], f"{prefix}.relu_1")
    h = node("Flatten", [node("GlobalAveragePool", [h], "avgpool")], "flatten", axis=1)
    nodes.append(helper.make_node("Gemm", [h, "fc.weight", "fc.bias"], ["logits"], name="fc", transB=1))
    return nodes


def write(path: str | os.PathLike, weights: dict, *, hw: int = 224) -> Path:
    """Write the network as an ONNX file (opset 13): input 'x' (N, 3, hw, hw) with N left open,
    output 'logits' (N, classes).  Returns the path."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    check_int(hw, "hw", 32)      # five halvings leave a plane of at least 1x1
    _, classes = _widths(weights)
    graph = helper.make_graph(
        graph_nodes(weights), "resnet18",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, hw, hw])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])],
        initializer=[numpy_helper.from_array(np.ascontiguousarray(v, dtype=np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="labkit")
    onnx.checker.check_model(model)
    path = Path(path)
    onnx.save(model, str(path))
    return path


def _bn(v: np.ndarray, weights: dict, prefix: str) -> np.ndarray:
    g, b, m, var = (weights[f"{prefix}.{p}"].astype(np.float64)[None, :, None, None]
                    for p in ("weight", "bias", "running_mean", "running_var"))
    return (v - m) / np.sqrt(var + BN_EPS) * g + b


def reference_logits(weights: dict, x: np.ndarray) -> np.ndarray:
    """The graph's output for x (N, 3, H, W) in float64 NumPy, node by node as the file writes them:
    each convolution, then its batch normalization from the running statistics (nothing folded)."""
    width, _ = _widths(weights)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    relu = reference.relu
    h = relu(_bn(reference.conv2d(x, w["conv1.weight"], stride=2, pad=3), w, "bn1"))
    h = reference.max_pool2d(h, 3, 2, pad=1)
    for prefix, c_in, c_out, stride in blocks(width):
        skip = h
        h = relu(_bn(reference.conv2d(h, w[f"{prefix}.conv1.weight"], stride=stride, pad=1), w, f"{prefix}.bn1"))
        h = _bn(reference.conv2d(h, w[f"{prefix}.conv2.weight"], pad=1), w, f"{prefix}.bn2")
        if stride != 1 or c_in != c_out:
            skip = _bn(reference.conv2d(skip, w[f"{prefix}.downsample.0.weight"], stride=stride),
                       w, f"{prefix}.downsample.1")
        h = relu(h + skip)
    return reference.global_avg_pool(h) @ w["fc.weight"].T + w["fc.bias"]
