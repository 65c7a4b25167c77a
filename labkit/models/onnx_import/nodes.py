"""What each ONNX op the importer runs means: its attributes checked (anything else refused, naming
the op and the node), its output shape from its inputs' shapes, its FLOPs.  The kernels that run
each op are chosen in labkit.models.onnx_import.layers.

A spec is made from a node and the graph's constants (``Ctx``); ``inputs`` are the values it reads
at run time (constants among them only where an op takes a tensor, as Add, Mul and Concat do),
``output`` the value it writes.  Weights (a convolution's, a GEMM's) are held by the spec as float64
host arrays, so that folding batch normalization into them rounds once, to float32, at the end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import OnnxImportError
from ...ops.pointwise import broadcast_shape
from ...ops.pool_pad import pool_out_size
from .reader import Node

__all__ = ["Ctx", "Spec", "SPECS", "refuse", "numel", "constant_value", "resolve_pads", "check_finite", "check_attrs",
           "const_input", "ints_attr_or_input"]


@dataclass
class Ctx:
    """What a spec may read while it is made: the graph's constants so far, the opset, and the values
    shape arithmetic computes on the host (labkit.models.onnx_import.host)."""
    consts: dict
    opset: int
    host: set = field(default_factory=set)


def refuse(node: Node, why: str):
    raise OnnxImportError(f"{node.op} node {node.name!r}: {why}")


def numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_attrs(node: Node, allowed) -> None:
    extra = sorted(set(node.attrs) - set(allowed))
    if extra:
        refuse(node, f"attribute {extra[0]!r} is not supported (labkit reads {', '.join(sorted(allowed)) or 'none'})")
    for k, v in node.attrs.items():
        vals = v if isinstance(v, tuple) else (v,)
        # Clip's bounds may be infinite (no bound); no other float of a CNN's ops may be.
        if any(isinstance(u, float) and (np.isnan(u) or (np.isinf(u) and node.op != "Clip")) for u in vals):
            refuse(node, f"attribute {k} = {v!r} is not a finite number")


def check_finite(spec) -> None:
    """Refuse, naming the node, weights (after any folding) that hold NaN or infinity: a variance
    below -epsilon, say, would make every output of the channel NaN."""
    for name in ("w", "b", "scale", "shift"):
        a = getattr(spec, name, None)
        # Arrays only: a Clip's bounds (floats named a and b) may be infinite, where it has no bound.
        if isinstance(a, np.ndarray) and not np.isfinite(a).all():
            refuse(spec.node, f"its {name} holds NaN or infinity (after folding batch normalization, if any)")


def const_input(node: Node, ctx: Ctx, i: int, what: str, *, optional: bool = False):
    """Input ``i`` of the node as a host array; it must be a constant (an initializer or a Constant)."""
    name = node.inputs[i] if i < len(node.inputs) else ""
    if not name:
        if optional:
            return None
        refuse(node, f"its {what} (input {i}) is missing")
    if name not in ctx.consts:
        refuse(node, f"its {what} ({name!r}) is computed at run time; labkit takes it only as a constant "
                     "(an initializer or a Constant node)")
    return ctx.consts[name]


def ints_attr_or_input(node: Node, ctx: Ctx, name: str, index: int, since: int):
    """An int list that ONNX moved from an attribute to input ``index`` at opset ``since`` (Squeeze's
    axes, Split's split, ReduceMean's axes): the form of the graph's opset, or None where absent."""
    if ctx.opset < since:
        return node.attrs.get(name)
    if name in node.attrs:
        refuse(node, f"{name} is an input from opset {since} on, not an attribute")
    v = const_input(node, ctx, index, name, optional=True)
    return None if v is None else tuple(int(u) for u in v.reshape(-1))


def _ints(node: Node, name: str, n: int, default):
    v = node.attrs.get(name, default)
    if not isinstance(v, tuple) or len(v) != n or not all(isinstance(u, int) for u in v):
        refuse(node, f"attribute {name} must be {n} ints for a 2-D op, got {v!r}")
    return v


def constant_value(node: Node) -> np.ndarray:
    """A Constant node's value (value, value_float(s), value_int(s)); others refused."""
    check_attrs(node, {"value", "value_float", "value_floats", "value_int", "value_ints"})
    if len(node.attrs) != 1:
        refuse(node, "a Constant holds exactly one value attribute")
    (key, v), = node.attrs.items()
    if key == "value":
        return v
    return np.asarray(v, dtype=np.float32 if "float" in key else np.int64)


def resolve_pads(node: Node, auto_pad: str, pads, size, kernel, stride, dilation) -> tuple:
    """(top, left, bottom, right) for a 2-D window on ``size`` (H, W): ``pads`` as given (ONNX's
    order begin_h, begin_w, end_h, end_w), or what auto_pad makes of the input."""
    if auto_pad in ("NOTSET", ""):
        return pads
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        refuse(node, f"auto_pad {auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    begin, end = [], []
    for n, k, s, d in zip(size, kernel, stride, dilation):
        out = -(-n // s)
        total = max(0, (out - 1) * s + d * (k - 1) + 1 - n)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


class Spec:
    """One step of the graph: ``op`` (with what was fused into it, e.g. "Conv+BatchNormalization+Relu"),
    ``name`` (the node's), ``inputs``, ``output``; ``view``: it only renames or reshapes its input."""
    ATTRS: tuple = ()
    view = False

    def __init__(self, node: Node, ctx: Ctx):
        check_attrs(node, self.ATTRS)
        if not node.outputs or not node.outputs[0]:
            refuse(node, "it names no output")
        self.node, self.name, self.ops, self.names = node, node.name, [node.op], [node.name]
        self.inputs = [node.inputs[0]] if node.inputs and node.inputs[0] else []
        if not self.inputs:
            refuse(node, "its first input is missing")
        self.output = node.outputs[0]
        self.activation = None       # (name, a, b) once an activation node is fused in
        self.opset = ctx.opset

    @property
    def op(self) -> str:
        return "+".join(self.ops)

    def shape(self, shapes: list) -> tuple:
        raise NotImplementedError

    def flops(self, shapes: list, out: tuple) -> int:
        return numel(out)

    def weight_count(self) -> int:
        return 0

    def _rank(self, shape, ranks, what="input"):
        if len(shape) not in ranks:
            refuse(self.node, f"its {what} has shape {tuple(shape)}; labkit runs it on tensors of rank "
                              f"{' or '.join(map(str, ranks))}")


class Conv(Spec):
    ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
    FUSABLE = ("relu", "relu6", "tanh")      # the implicit GEMM's (and auto's families') epilogues

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        w = const_input(node, ctx, 1, "weight")
        if w.ndim != 4:
            refuse(node, f"weight of shape {w.shape}: labkit runs 2-D convolutions (NCHW, weight MCKK)")
        b = const_input(node, ctx, 2, "bias", optional=True)
        if b is not None and b.shape != (w.shape[0],):
            refuse(node, f"bias of shape {b.shape}, expected ({w.shape[0]},)")
        self.w = w.astype(np.float64)
        self.b = None if b is None else b.astype(np.float64)
        self.group = node.attrs.get("group", 1)
        if not isinstance(self.group, int) or self.group < 1 or w.shape[0] % self.group:
            refuse(node, f"group {self.group!r} must be an int >= 1 dividing the {w.shape[0]} output channels")
        self.kernel = tuple(int(v) for v in w.shape[2:])
        if _ints(node, "kernel_shape", 2, self.kernel) != self.kernel:
            refuse(node, f"kernel_shape {node.attrs['kernel_shape']} differs from the weight's {self.kernel}")
        self.strides = _ints(node, "strides", 2, (1, 1))
        self.dilations = _ints(node, "dilations", 2, (1, 1))
        self.pads = _ints(node, "pads", 4, (0, 0, 0, 0))
        if min(self.strides + self.dilations) < 1 or min(self.pads) < 0:
            refuse(node, f"strides {self.strides} and dilations {self.dilations} must be >= 1, pads {self.pads} >= 0")
        self.auto_pad = node.attrs.get("auto_pad", "NOTSET")
        resolve_pads(node, self.auto_pad, self.pads, (1, 1), self.kernel, self.strides, self.dilations)
        self.residual = None         # the value added in the epilogue, once an Add is fused in

    def fold_batch_norm(self, scale: np.ndarray, shift: np.ndarray) -> None:
        """conv followed by y = s * v + t is the conv with weights w * s and bias b * s + t (float64)."""
        self.w = self.w * scale[:, None, None, None]
        self.b = (0.0 if self.b is None else self.b) * scale + shift

    def geometry(self, x: tuple) -> tuple:
        """(pads (t, l, b, r), (Ho, Wo)) for input shape x."""
        self._rank(x, (4,))
        C = x[1]
        if C != self.w.shape[1] * self.group:
            refuse(self.node, f"input of {C} channels, but the weight {self.w.shape} with group {self.group} takes "
                              f"{self.w.shape[1] * self.group}")
        pads = resolve_pads(self.node, self.auto_pad, self.pads, x[2:], self.kernel, self.strides, self.dilations)
        out = []
        for n, k, s, d, p0, p1 in zip(x[2:], self.kernel, self.strides, self.dilations, pads[:2], pads[2:]):
            span = n + p0 + p1 - d * (k - 1) - 1
            if span < 0:
                refuse(self.node, f"a {self.kernel} kernel (dilation {self.dilations}) does not fit input {x} with "
                                  f"pads {pads}")
            out.append(span // s + 1)
        return pads, tuple(out)

    def shape(self, shapes):
        x = shapes[0]
        _, (ho, wo) = self.geometry(x)
        return (x[0], self.w.shape[0], ho, wo)

    def flops(self, shapes, out):
        return 2 * numel(out) * self.w.shape[1] * self.kernel[0] * self.kernel[1]

    def weight_count(self):
        return self.w.size + (0 if self.b is None else self.b.size)


class ConvTranspose(Spec):
    ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides")
    FUSABLE = ("relu", "relu6", "tanh")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        w = const_input(node, ctx, 1, "weight")
        if w.ndim != 4:
            refuse(node, f"weight of shape {w.shape}: labkit runs 2-D transposed convolutions")
        b = const_input(node, ctx, 2, "bias", optional=True)
        self.group = node.attrs.get("group", 1)
        if not isinstance(self.group, int) or self.group < 1 or w.shape[0] % self.group:
            refuse(node, f"group {self.group!r} must be an int >= 1 dividing the {w.shape[0]} input channels")
        M = w.shape[1] * self.group
        if b is not None and b.shape != (M,):
            refuse(node, f"bias of shape {b.shape}, expected ({M},)")
        self.w, self.b = w.astype(np.float64), None if b is None else b.astype(np.float64)
        self.kernel = tuple(int(v) for v in w.shape[2:])
        if _ints(node, "kernel_shape", 2, self.kernel) != self.kernel:
            refuse(node, f"kernel_shape {node.attrs['kernel_shape']} differs from the weight's {self.kernel}")
        self.strides = _ints(node, "strides", 2, (1, 1))
        self.dilations = _ints(node, "dilations", 2, (1, 1))
        self.output_padding = _ints(node, "output_padding", 2, (0, 0))
        pads = _ints(node, "pads", 4, (0, 0, 0, 0))
        self.auto_pad = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
        if self.auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
            refuse(node, f"auto_pad {self.auto_pad!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
        if self.auto_pad == "VALID":
            pads = (0, 0, 0, 0)
        if min(pads) < 0:
            refuse(node, f"pads {pads} must not be negative")
        # output_shape (the output's H, W, or its whole shape) or auto_pad SAME_*: the pads follow from
        # the input's size (ONNX's ConvTranspose: they are then computed, and pads is ignored)
        self.output_shape = None
        if "output_shape" in node.attrs:
            raw = node.attrs["output_shape"]
            if not (isinstance(raw, (list, tuple)) and len(raw) in (2, 4) and all(isinstance(v, int) and v > 0 for v in raw)):
                refuse(node, f"output_shape {raw!r} must be 2 (H, W) or 4 positive ints")
            self.output_shape = tuple(raw[-2:])
        self._set_pads(pads)

    def _set_pads(self, pads) -> None:
        # labkit's transposed convolution crops both ends of an axis alike: it runs the even part,
        # min(begin, end), and ``crop`` (top, left, bottom, right) takes the rest off afterwards.
        self.pad = (min(pads[0], pads[2]), min(pads[1], pads[3]))
        self.crop = tuple(p - self.pad[i % 2] for i, p in enumerate(pads))

    def pads_for(self, size) -> tuple:
        """(begin_h, begin_w, end_h, end_w) for an input plane ``size`` where output_shape or auto_pad
        SAME_* asks for an output size (ONNX's rule: the total padding is the full output's size less
        the one asked for; SAME_UPPER puts the smaller half first, the others the larger)."""
        target = self.output_shape or tuple(n * s for n, s in zip(size, self.strides))
        begin, end = [], []
        for n, k, s, d, op, want in zip(size, self.kernel, self.strides, self.dilations, self.output_padding, target):
            total = s * (n - 1) + op + (k - 1) * d + 1 - want
            if total < 0:
                refuse(self.node, f"an output of {want} rows or columns asked for, more than the {want + total} a "
                                  "transposed convolution of this input makes (the rest would be bias alone)")
            small, big = total // 2, total - total // 2
            begin.append(small if self.auto_pad == "SAME_UPPER" else big)
            end.append(big if self.auto_pad == "SAME_UPPER" else small)
        return (begin[0], begin[1], end[0], end[1])

    def fold_batch_norm(self, scale: np.ndarray, shift: np.ndarray) -> None:
        """As Conv's: the weights (C_in, M/g, KH, KW) of output channel g * M/g + j are w[group g's
        inputs, j], scaled by that channel's s."""
        C, mg = self.w.shape[:2]
        g = self.group
        w = self.w.reshape(g, C // g, mg, *self.kernel) * scale.reshape(g, 1, mg, 1, 1)
        self.w = w.reshape(self.w.shape)
        self.b = (0.0 if self.b is None else self.b) * scale + shift

    def shape(self, shapes):
        x = shapes[0]
        self._rank(x, (4,))
        if x[1] != self.w.shape[0]:
            refuse(self.node, f"input of {x[1]} channels, but the weight {self.w.shape} takes {self.w.shape[0]}")
        if self.output_shape is not None or self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            self._set_pads(self.pads_for(x[2:]))
        even = tuple((n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, k, s, p, op, d in
                     zip(x[2:], self.kernel, self.strides, self.pad, self.output_padding, self.dilations))
        hw = (even[0] - self.crop[0] - self.crop[2], even[1] - self.crop[1] - self.crop[3])
        if min(hw) < 1:
            refuse(self.node, f"output plane {hw} is empty")
        return (x[0], self.w.shape[1] * self.group) + hw

    def flops(self, shapes, out):
        x = shapes[0]
        return 2 * numel(x) * self.w.shape[1] * self.kernel[0] * self.kernel[1]

    def weight_count(self):
        return self.w.size + (0 if self.b is None else self.b.size)


class BatchNorm(Spec):
    """Batch normalization at inference: y = s * x + t per channel, s and t computed once (float64)."""
    ATTRS = ("epsilon", "momentum", "spatial", "training_mode")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        if node.attrs.get("training_mode", 0) or node.attrs.get("spatial", 1) != 1:
            refuse(node, "training_mode = 1 or spatial = 0: labkit runs batch normalization at inference, per channel")
        eps = float(node.attrs.get("epsilon", 1e-5))
        g, beta, mean, var = (const_input(node, ctx, i, what).astype(np.float64) for i, what in
                              enumerate(("scale", "B", "mean", "var"), start=1))
        if not (g.ndim == 1 and g.shape == beta.shape == mean.shape == var.shape):
            refuse(node, f"scale, B, mean and var must be (C,) each, got {g.shape}, {beta.shape}, {mean.shape}, "
                         f"{var.shape}")
        if not (var + eps > 0).all():
            refuse(node, f"a variance plus epsilon ({eps}) is not positive: the normalization divides by its root")
        self.scale = g / np.sqrt(var + eps)
        self.shift = beta - mean * self.scale

    def shape(self, shapes):
        x = shapes[0]
        if len(x) < 2 or x[1] != self.scale.shape[0]:
            refuse(self.node, f"input of shape {x} for {self.scale.shape[0]} channels")
        return tuple(x)

    def flops(self, shapes, out):
        return 2 * numel(out)


class Unary(Spec):
    """Relu, Clip, LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Erf, Gelu (exact, or its tanh
    approximation): ``kind`` is pointwise.cu's name, ``fused_as`` the epilogue's name where one can
    take it (relu, relu6, tanh: a convolution's or a dense layer's; gelu, gelu_tanh: a dense layer's)."""
    ATTRS_OF = {"Relu": (), "Sigmoid": (), "Tanh": (), "HardSwish": (), "LeakyRelu": ("alpha",),
                "HardSigmoid": ("alpha", "beta"), "Clip": ("min", "max"), "Erf": (), "Gelu": ("approximate",)}

    def __init__(self, node, ctx):
        self.ATTRS = self.ATTRS_OF[node.op]
        super().__init__(node, ctx)
        op, at = node.op, node.attrs
        self.fused_as = None
        if op == "Clip":
            lo, hi = self._clip_bounds(node, ctx)
            self.kind, self.a, self.b = "clip", lo, hi
            if lo == 0.0 and hi == 6.0:
                self.fused_as = "relu6"
            elif lo == 0.0 and hi == np.inf:
                self.kind, self.fused_as = "relu", "relu"
        elif op == "LeakyRelu":
            self.kind, self.a, self.b = "leaky_relu", float(at.get("alpha", 0.01)), 0.0
        elif op == "HardSigmoid":
            self.kind, self.a, self.b = "hard_sigmoid", float(at.get("alpha", 0.2)), float(at.get("beta", 0.5))
        elif op == "Gelu":
            how = at.get("approximate", "none")
            how = how.decode() if isinstance(how, bytes) else how
            if how not in ("none", "tanh"):
                refuse(node, f"approximate={how!r}: Gelu takes 'none' or 'tanh'")
            self.kind, self.a, self.b = ("gelu" if how == "none" else "gelu_tanh"), 0.0, 0.0
            self.fused_as = self.kind                 # a dense layer's epilogue takes it (gemm.cu)
        else:
            self.kind = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hard_swish",
                         "Erf": "erf"}[op]
            self.a = self.b = 0.0
            self.fused_as = self.kind if op in ("Relu", "Tanh") else None

    def _clip_bounds(self, node, ctx):
        at = node.attrs
        if ctx.opset < 11:
            return float(at.get("min", -np.inf)), float(at.get("max", np.inf))
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            v = const_input(node, ctx, i, "min" if i == 1 else "max", optional=True)
            if v is not None and v.size != 1:
                refuse(node, f"its {'min' if i == 1 else 'max'} must be a scalar, got shape {v.shape}")
            bounds.append(default if v is None else float(v.reshape(-1)[0]))
        return tuple(bounds)

    def shape(self, shapes):
        return tuple(shapes[0])


class Binary(Spec):
    """Add, Mul, Sub or Div of two tensors with broadcasting (a constant operand is uploaded once)."""
    FOLD = {"add": np.add, "mul": np.multiply, "sub": np.subtract, "div": np.divide}

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        if len(node.inputs) != 2 or not all(node.inputs):
            refuse(node, "it takes two inputs")
        self.inputs = list(node.inputs)
        self.kind = node.op.lower()

    def shape(self, shapes):
        try:
            out = broadcast_shape(*shapes)
        except ValueError as exc:
            refuse(self.node, str(exc))
        if len(out) > 4:
            refuse(self.node, f"output of rank {len(out)}: labkit's broadcasting kernel takes up to 4 dimensions")
        return out

    def fold(self, values):
        return self.FOLD[self.kind](*values)


class Gemm(Spec):
    """Gemm (and MatMul by a constant, with a bias once an Add is fused in) as a dense layer:
    y = x @ w + b with w (in, out), b (out,), made once from B, alpha, beta and C."""
    ATTRS = ("alpha", "beta", "transA", "transB")
    FUSABLE = ("relu", "tanh", "gelu", "gelu_tanh")    # gemm.cu's epilogue

    def __init__(self, node, ctx):
        self.ATTRS = self.ATTRS if node.op == "Gemm" else ()
        super().__init__(node, ctx)
        at = node.attrs
        B = const_input(node, ctx, 1, "B (weights)")
        if B.ndim != 2:
            refuse(node, f"B of shape {B.shape}: labkit multiplies by a 2-D constant")
        if node.op == "Gemm":
            if at.get("transA", 0):
                refuse(node, "transA = 1: labkit's dense layer reads x as (rows, in); transposed activations are "
                             "not run")
            w = (B.T if at.get("transB", 0) else B).astype(np.float64) * float(at.get("alpha", 1.0))
            C = const_input(node, ctx, 2, "C (bias)", optional=True)
            self.w, self.b = w, None
            if C is not None:
                self.add_bias(C * float(at.get("beta", 1.0)))
        else:
            self.w, self.b = B.astype(np.float64), None

    def add_bias(self, c: np.ndarray) -> bool:
        """Take a constant added to the output as the bias, if it broadcasts along the rows only."""
        out = self.w.shape[1]
        c = np.asarray(c, dtype=np.float64)
        if c.ndim > 2 or (c.ndim == 2 and c.shape[0] != 1) or c.size not in (1, out):
            return False
        self.b = (0.0 if self.b is None else self.b) + np.broadcast_to(c.reshape(-1), (out,))
        return True

    def shape(self, shapes):
        x = shapes[0]
        # Gemm is 2-D; MatMul by a matrix multiplies the last axis of any input of rank 2 to 4 (ConvNeXt's
        # Linear layers on channels-last pixels): its leading axes are rows of one dense layer.
        self._rank(x, (2,) if self.node.op == "Gemm" else (2, 3, 4))
        if x[-1] != self.w.shape[0]:
            refuse(self.node, f"input of shape {x}, but the weights take {self.w.shape[0]} columns")
        return tuple(x[:-1]) + (self.w.shape[1],)

    def flops(self, shapes, out):
        return 2 * numel(out) * self.w.shape[0]

    def weight_count(self):
        return self.w.size + (0 if self.b is None else self.b.size)


class Pool(Spec):
    """MaxPool and AveragePool: window, strides, dilations, pads (auto_pad too), ceil_mode,
    count_include_pad."""
    ATTRS_OF = {"MaxPool": ("auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"),
                "AveragePool": ("auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads",
                                "strides")}

    def __init__(self, node, ctx):
        self.ATTRS = self.ATTRS_OF[node.op]
        super().__init__(node, ctx)
        at = node.attrs
        if "kernel_shape" not in at:
            refuse(node, "kernel_shape is required")
        self.mode = "max" if node.op == "MaxPool" else "avg"
        self.kernel = _ints(node, "kernel_shape", 2, None)
        self.strides = _ints(node, "strides", 2, (1, 1))
        self.dilations = _ints(node, "dilations", 2, (1, 1))
        self.pads = _ints(node, "pads", 4, (0, 0, 0, 0))
        if min(self.kernel + self.strides + self.dilations) < 1 or min(self.pads) < 0:
            refuse(node, "kernel_shape, strides and dilations must be >= 1 and pads >= 0")
        if at.get("storage_order", 0):
            refuse(node, "storage_order = 1 (column-major indices) is not run")
        self.ceil_mode = bool(at.get("ceil_mode", 0))
        self.count_include_pad = bool(at.get("count_include_pad", 0))
        self.auto_pad = at.get("auto_pad", "NOTSET")
        resolve_pads(node, self.auto_pad, self.pads, (1, 1), self.kernel, self.strides, self.dilations)

    def geometry(self, x):
        self._rank(x, (4,))
        pads = resolve_pads(self.node, self.auto_pad, self.pads, x[2:], self.kernel, self.strides, self.dilations)
        if self.auto_pad in ("SAME_UPPER", "SAME_LOWER", "VALID"):
            # ONNX's auto_pad sizes are ceil(H / s) (SAME) and ceil((H - window + 1) / s) (VALID): the
            # pads computed above give exactly those with floor division.
            ceil = False
        else:
            ceil = self.ceil_mode
        try:
            hw = tuple(pool_out_size(n, k, s, d, p0, p1, ceil) for n, k, s, d, p0, p1 in
                       zip(x[2:], self.kernel, self.strides, self.dilations, pads[:2], pads[2:]))
        except ValueError as exc:
            refuse(self.node, f"{exc} (input {tuple(x)})")
        if any(p0 >= (k - 1) * d + 1 for p0, k, d in zip(pads, self.kernel * 2, self.dilations * 2)):
            refuse(self.node, f"pads {pads} as large as the window {self.kernel}: a window of padding alone has "
                              "no value")
        return pads, hw, ceil

    def shape(self, shapes):
        x = shapes[0]
        _, hw, _ = self.geometry(x)
        return (x[0], x[1]) + hw

    def flops(self, shapes, out):
        return numel(out) * self.kernel[0] * self.kernel[1]


class GlobalAveragePool(Spec):
    def shape(self, shapes):
        x = shapes[0]
        self._rank(x, (4,))
        return (x[0], x[1], 1, 1)

    def flops(self, shapes, out):
        return numel(shapes[0])


class GlobalMaxPool(GlobalAveragePool):
    """The largest value of each plane (NaN wins, as in PyTorch)."""


class Concat(Spec):
    ATTRS = ("axis",)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        if "axis" not in node.attrs:
            refuse(node, "axis is required")
        if not node.inputs or not all(node.inputs):
            refuse(node, "an input is missing")
        self.inputs, self.axis = list(node.inputs), int(node.attrs["axis"])

    def resolved_axis(self, rank: int) -> int:
        a = self.axis + rank if self.axis < 0 else self.axis
        if not 1 <= a < rank:
            refuse(self.node, f"axis {self.axis} on rank {rank}: labkit concatenates along an axis after the batch")
        return a

    def shape(self, shapes):
        rank = len(shapes[0])
        a = self.resolved_axis(rank)
        for s in shapes:
            if len(s) != rank or s[:a] != shapes[0][:a] or s[a + 1:] != shapes[0][a + 1:]:
                refuse(self.node, f"inputs of shapes {[tuple(v) for v in shapes]} differ off axis {a}")
        return shapes[0][:a] + (sum(s[a] for s in shapes),) + shapes[0][a + 1:]

    def flops(self, shapes, out):
        return 0


class View(Spec):
    """Flatten, Reshape, Squeeze, Unsqueeze, Identity, Dropout: the same values, another shape (no
    kernel runs, the output is a view of the input)."""
    ATTRS_OF = {"Flatten": ("axis",), "Reshape": ("allowzero",), "Squeeze": ("axes",), "Unsqueeze": ("axes",),
                "Identity": (), "Dropout": ("ratio", "seed")}
    view = True

    def __init__(self, node, ctx):
        self.ATTRS = self.ATTRS_OF[node.op]
        super().__init__(node, ctx)
        op = node.op
        self.target = self.axes = self.target_from = None
        if op == "Reshape":
            self.allowzero = bool(node.attrs.get("allowzero", 0))
            if len(node.inputs) > 1 and node.inputs[1] in ctx.host:
                self.target_from = node.inputs[1]      # computed from shapes at each batch size (infer)
            else:
                self.target = tuple(int(v) for v in const_input(node, ctx, 1, "shape").reshape(-1))
        elif op in ("Squeeze", "Unsqueeze"):
            self.axes = ints_attr_or_input(node, ctx, "axes", 1, since=13)
            if self.axes is None:
                refuse(node, "no axes given: squeezing every axis of size 1 would squeeze a batch of one too; "
                             "name the axes")
        elif op == "Dropout":
            if len(node.inputs) > 2 and node.inputs[2]:
                mode = ctx.consts.get(node.inputs[2])
                if mode is None or bool(np.asarray(mode).reshape(-1)[0]):
                    refuse(node, "training_mode is not a constant false: labkit runs inference, where Dropout is "
                                 "the identity")

    def shape(self, shapes):
        x, op = tuple(shapes[0]), self.node.op
        if op in ("Identity", "Dropout"):
            return x
        if op == "Flatten":
            a = self.node.attrs.get("axis", 1)
            a = a + len(x) if a < 0 else a
            if not 0 <= a <= len(x):
                refuse(self.node, f"axis {a} on rank {len(x)}")
            return (numel(x[:a]), numel(x[a:]))
        if op == "Reshape":
            t = [x[i] if v == 0 and not self.allowzero and i < len(x) else v for i, v in enumerate(self.target)]
            if t.count(-1) > 1 or any(v < -1 for v in t):
                refuse(self.node, f"shape {self.target}: at most one -1, no other negative size")
            if -1 in t:
                rest = numel(v for v in t if v != -1)
                if rest == 0 or numel(x) % rest:
                    refuse(self.node, f"cannot reshape {x} to {self.target}")
                t[t.index(-1)] = numel(x) // rest
            if numel(t) != numel(x):
                refuse(self.node, f"cannot reshape {x} ({numel(x)} values) to {tuple(t)}")
            return tuple(t)
        rank = len(x) + (len(self.axes) if op == "Unsqueeze" else 0)
        axes = sorted(a + rank if a < 0 else a for a in self.axes)
        if len(set(axes)) != len(axes) or not all(0 <= a < rank for a in axes):
            refuse(self.node, f"axes {self.axes} on rank {rank}")
        if op == "Squeeze":
            if 0 in axes or any(x[a] != 1 for a in axes):
                refuse(self.node, f"cannot squeeze axes {self.axes} of {x} (the batch axis stays)")
            return tuple(d for i, d in enumerate(x) if i not in axes)
        if 0 in axes:
            refuse(self.node, "unsqueezing axis 0 would move the batch axis")
        out, it = [], iter(x)
        for i in range(rank):
            out.append(1 if i in axes else next(it))
        return tuple(out)

    def flops(self, shapes, out):
        return 0

    def fold(self, values):
        return np.asarray(values[0]).reshape(self.shape([values[0].shape]))


class Softmax(Spec):
    ATTRS = ("axis",)

    def rows(self, x) -> tuple:
        """(rows, D): the softmax runs over D values per row (opset 13: one axis, the last; before: the
        axes from ``axis`` on, as ONNX then defined it)."""
        axis = self.node.attrs.get("axis", -1 if self.opset >= 13 else 1)
        a = axis + len(x) if axis < 0 else axis
        if not 0 <= a < len(x):
            refuse(self.node, f"axis {axis} on rank {len(x)}")
        if self.opset >= 13 and a != len(x) - 1:
            refuse(self.node, f"axis {axis} of shape {tuple(x)}: labkit's softmax runs along the last axis")
        return numel(x[:a]), numel(x[a:])

    def shape(self, shapes):
        self.rows(shapes[0])
        return tuple(shapes[0])

    def flops(self, shapes, out):
        return 3 * numel(out)


class LRN(Spec):
    ATTRS = ("alpha", "beta", "bias", "size")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        at = node.attrs
        size = at.get("size")
        if not isinstance(size, int) or size < 1 or size % 2 == 0:
            refuse(node, f"size {size!r}: labkit's LRN takes an odd window (centred on the channel)")
        self.radius = (size - 1) // 2
        # ONNX divides alpha by the window's size; lrn.cu takes TensorFlow's alpha, which it does not.
        self.alpha = float(at.get("alpha", 1e-4)) / size
        self.beta, self.bias = float(at.get("beta", 0.75)), float(at.get("bias", 1.0))
        if self.bias <= 0 or self.alpha < 0:
            refuse(node, f"bias {self.bias} must be > 0 and alpha >= 0")
        self.pool = None        # (k, s) once a max-pool after it is fused in (graph.fuse)

    def shape(self, shapes):
        self._rank(shapes[0], (4,))
        if self.pool:
            (k, s), (N, C, H, W) = self.pool, shapes[0]
            return (N, C, (H - k) // s + 1, (W - k) // s + 1)
        return tuple(shapes[0])

    def flops(self, shapes, out):
        lrn = numel(shapes[0]) * (2 * (2 * self.radius + 1) + 3)
        return lrn + (numel(out) * self.pool[0] ** 2 if self.pool else 0)


class LayerNorm(Spec):
    """LayerNormalization (opset 17): over the axes from ``axis`` on, with a constant Scale and
    optional B of that shape; only its first output (the mean and inverse deviation are refused)."""
    ATTRS = ("axis", "epsilon", "stash_type")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        at = node.attrs
        self.axis, self.eps = int(at.get("axis", -1)), float(at.get("epsilon", 1e-5))
        if not np.isfinite(self.eps) or self.eps < 0:
            refuse(node, f"epsilon {self.eps} must be a finite number >= 0")
        if int(at.get("stash_type", 1)) != 1:
            refuse(node, "stash_type other than 1 (float32 statistics) is not run")
        self.scale = const_input(node, ctx, 1, "Scale").astype(np.float64)
        bias = const_input(node, ctx, 2, "B", optional=True)
        self.bias = np.zeros_like(self.scale) if bias is None else bias.astype(np.float64)
        self.inputs = [node.inputs[0]]

    def normalized(self, x: tuple) -> tuple:
        axis = self.axis + len(x) if self.axis < 0 else self.axis
        if not 1 <= axis < len(x):
            refuse(self.node, f"axis {self.axis} of an input of rank {len(x)}: labkit normalizes trailing axes, "
                              "never the batch")
        return tuple(x[axis:])

    def shape(self, shapes):
        x = shapes[0]
        self._rank(x, (2, 3, 4))
        norm = self.normalized(x)
        for name, v in (("Scale", self.scale), ("B", self.bias)):
            if v.size != numel(norm) or (v.ndim and tuple(v.shape) != norm[len(norm) - v.ndim:]):
                refuse(self.node, f"{name} of shape {v.shape} for normalized axes {norm}")
        return tuple(x)

    def flops(self, shapes, out):
        return 8 * numel(out)

    def weight_count(self):
        return self.scale.size + self.bias.size


class Pad(Spec):
    ATTRS = ("mode", "pads", "value")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        mode = node.attrs.get("mode", "constant")
        if mode != "constant":
            refuse(node, f"mode {mode!r}: labkit pads with a constant only")
        if ctx.opset >= 11:
            if "pads" in node.attrs:
                refuse(node, "pads is an input from opset 11 on")
            pads = tuple(int(v) for v in const_input(node, ctx, 1, "pads").reshape(-1))
            v = const_input(node, ctx, 2, "constant_value", optional=True)
            self.value = 0.0 if v is None else float(np.asarray(v).reshape(-1)[0])
            if len(node.inputs) > 3 and node.inputs[3]:
                refuse(node, "the axes input is not supported: give pads for every axis")
        else:
            pads, self.value = node.attrs.get("pads", ()), float(node.attrs.get("value", 0.0))
        if len(pads) % 2:
            refuse(node, f"pads {pads}: two per axis")      # a negative one crops
        n = len(pads) // 2
        self.before, self.after = pads[:n], pads[n:]
        if n and (self.before[0] or self.after[0]):
            refuse(node, "padding the batch axis is not run")

    def shape(self, shapes):
        x = shapes[0]
        if len(self.before) != len(x) or len(x) > 4:
            refuse(self.node, f"pads {self.before + self.after} for input {tuple(x)}: labkit pads tensors of up to "
                              "4 axes, two pads per axis")
        out = tuple(n + b + a for n, b, a in zip(x, self.before, self.after))
        if min(out) < 1:
            refuse(self.node, f"pads {self.before + self.after} crop input {tuple(x)} to nothing ({out})")
        return out


SPECS = {"Conv": Conv, "ConvTranspose": ConvTranspose, "BatchNormalization": BatchNorm,
         **{op: Unary for op in Unary.ATTRS_OF}, "Add": Binary, "Mul": Binary, "Gemm": Gemm, "MatMul": Gemm,
         "MaxPool": Pool, "AveragePool": Pool, "GlobalAveragePool": GlobalAveragePool,
         "GlobalMaxPool": GlobalMaxPool, "Concat": Concat,
         **{op: View for op in View.ATTRS_OF}, "Softmax": Softmax, "LRN": LRN, "Pad": Pad,
         "Sub": Binary, "Div": Binary, "LayerNormalization": LayerNorm}
