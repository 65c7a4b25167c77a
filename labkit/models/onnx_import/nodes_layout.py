"""The ops that move values without computing new ones, beyond reshapes: Transpose, Slice, Split,
and ReduceMean and ReduceMax over the spatial axes (a global average or max pool), as torchvision's ShuffleNetV2 writes
them (its channel shuffle is Reshape to 5 axes, Transpose, Reshape; its halves are a Split; its head
a ReduceMean over H and W).  Each spec checks its attributes and computes its output's shape, as
nodes.py's do; the kernels are pool_pad.cu's permute and slice_copy, and global_avg_pool.
"""
from __future__ import annotations

import numpy as np

from .nodes import Spec, check_attrs, const_input, ints_attr_or_input, numel, refuse

__all__ = ["Transpose", "Slice", "SplitPart", "Gather", "ReduceMean", "ReduceMax", "split_parts", "LAYOUT_SPECS"]

MAX_RANK = 6          # pool_pad.cu's permute


class Transpose(Spec):
    """The axes reordered by ``perm`` (default: reversed); the batch axis stays first."""
    ATTRS = ("perm",)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        perm = node.attrs.get("perm")
        if perm is not None and (not isinstance(perm, tuple) or not all(isinstance(p, int) for p in perm)):
            refuse(node, f"perm {perm!r} must be a list of ints")
        self.perm = perm

    def resolved(self, rank: int) -> tuple:
        perm = tuple(reversed(range(rank))) if self.perm is None else self.perm
        if sorted(perm) != list(range(rank)):
            refuse(self.node, f"perm {perm} does not order the {rank} axes of its input")
        if rank > MAX_RANK:
            refuse(self.node, f"input of rank {rank}: labkit transposes tensors of up to {MAX_RANK} axes")
        if perm[0] != 0:
            refuse(self.node, f"perm {perm} moves the batch axis: labkit keeps it first")
        return perm

    def shape(self, shapes):
        x = shapes[0]
        return tuple(x[p] for p in self.resolved(len(x)))

    def flops(self, shapes, out):
        return 0

    def fold(self, values):
        return np.transpose(values[0], self.resolved(values[0].ndim))


class Slice(Spec):
    """Indices [start, end) of one axis after the batch, step 1 (ONNX's clamping of start and end to
    the axis, negative ones counted from its end); every other axis whole.  Its starts, ends, axes and
    steps are constants, or values computed from shapes (ShuffleNetV2's channel split, x.chunk(2, 1),
    exported as Shape, Gather, Add, Div: ``bounds_from``, resolved at each batch size by graph.infer)."""
    ATTRS = ("starts", "ends", "axes")

    def __init__(self, node, ctx):
        if ctx.opset >= 10:
            self.ATTRS = ()
        super().__init__(node, ctx)
        self.bounds_from = None
        if ctx.opset >= 10:
            names = [node.inputs[i] if i < len(node.inputs) else "" for i in range(1, 5)]
            if any(v and v in ctx.host for v in names):
                for v, what in zip(names, ("starts", "ends", "axes", "steps")):
                    if v and v not in ctx.host and v not in ctx.consts:
                        refuse(node, f"its {what} ({v!r}) is computed from data at run time; labkit takes it "
                                     "as a constant or as arithmetic on shapes")
                self.bounds_from = tuple(names)
                self.axis, self.start, self.end = 1, 0, 2**63 - 1      # until infer gives the bounds
                return
            starts, ends = (const_input(node, ctx, i, w) for i, w in ((1, "starts"), (2, "ends")))
            self.set_bounds(starts, ends, const_input(node, ctx, 3, "axes", optional=True),
                            const_input(node, ctx, 4, "steps", optional=True))
        else:
            self.set_bounds(node.attrs.get("starts", ()), node.attrs.get("ends", ()), node.attrs.get("axes"), None)

    def set_bounds(self, starts, ends, axes, steps) -> None:
        """The window from ONNX's starts, ends, axes (None: the first ones) and steps (None: 1)."""
        node = self.node
        starts, ends = (tuple(int(v) for v in np.asarray(a).reshape(-1)) for a in (starts, ends))
        if steps is not None and any(int(v) != 1 for v in np.asarray(steps).reshape(-1)):
            refuse(node, f"steps {np.asarray(steps).reshape(-1).tolist()}: labkit slices with step 1")
        axes = tuple(range(len(starts))) if axes is None else tuple(int(v) for v in np.asarray(axes).reshape(-1))
        if not len(starts) == len(ends) == len(axes):
            refuse(node, f"starts {starts}, ends {ends} and axes {axes} differ in length")
        # Axes sliced whole (start 0, end past it) change nothing: only one other may remain.
        cut = [(a, s, e) for a, s, e in zip(axes, starts, ends) if not (s == 0 and e >= 2**31 - 1)]
        if len(cut) > 1:
            refuse(node, f"it slices axes {[a for a, _, _ in cut]}: labkit slices one axis at a time")
        self.axis, self.start, self.end = cut[0] if cut else (1, 0, 2**63 - 1)

    def window(self, x: tuple) -> tuple:
        """(axis, offset, length) on an input of shape ``x``."""
        a = self.axis + len(x) if self.axis < 0 else self.axis
        if not 1 <= a < len(x):
            refuse(self.node, f"axis {self.axis} of shape {tuple(x)}: labkit slices an axis after the batch")
        n = x[a]
        start = min(max(self.start + n if self.start < 0 else self.start, 0), n)
        end = min(max(self.end + n if self.end < 0 else self.end, 0), n)
        if end <= start:
            refuse(self.node, f"[{self.start}, {self.end}) of axis {a} (size {n}) is empty")
        return a, start, end - start

    def shape(self, shapes):
        x = tuple(shapes[0])
        a, _, length = self.window(x)
        return x[:a] + (length,) + x[a + 1:]

    def flops(self, shapes, out):
        return 0

    def fold(self, values):      # (a constant sliced at bounds from shapes is a host op: graph.lower)
        a, start, length = self.window(values[0].shape)
        return np.take(values[0], range(start, start + length), axis=a)


class Gather(Spec):
    """Gather on a computed value: y = take(x, indices, axis), every index inside the axis (negative
    ones counted from its end).  The indices are a constant, or arithmetic on shapes: torch.onnx's
    dynamo exporter writes an ``as_strided`` view as a Gather of the flattened tensor at indices it
    computes from the batch size (Range, Mul, Add): ``indices_from``, resolved at each batch size by
    graph.infer."""
    ATTRS = ("axis",)

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        self.axis = int(node.attrs.get("axis", 0))
        name = node.inputs[1] if len(node.inputs) > 1 else ""
        if not name:
            refuse(node, "its indices (input 1) are missing")
        self.indices_from = name if name in ctx.host else None
        self.indices = None
        if self.indices_from is None:
            self.set_indices(const_input(node, ctx, 1, "indices"))

    def set_indices(self, v) -> None:
        v = np.asarray(v)
        if v.dtype.kind not in "iu":
            refuse(self.node, f"indices of dtype {v.dtype}: Gather takes int indices")
        self.indices = v.astype(np.int64)

    def _axis(self, x: tuple) -> int:
        a = self.axis + len(x) if self.axis < 0 else self.axis
        if not 0 <= a < len(x):
            refuse(self.node, f"axis {self.axis} of an input of shape {tuple(x)}")
        return a

    def positions(self, x: tuple) -> tuple[int, np.ndarray]:
        """(axis, the indices as positions 0 .. n-1 of it) on an input of shape ``x``."""
        a = self._axis(x)
        n, idx = x[a], self.indices
        if idx.size and (idx.min() < -n or idx.max() >= n):
            refuse(self.node, f"indices from {idx.min()} to {idx.max()} on an axis of {n}")
        return a, np.where(idx < 0, idx + n, idx)

    def shape(self, shapes):
        x = tuple(shapes[0])
        a, idx = self.positions(x)
        out = x[:a] + idx.shape + x[a + 1:]
        if not out:
            refuse(self.node, f"it gathers a single value of {x}: labkit's values keep at least one axis")
        return out

    def flops(self, shapes, out):
        return 0

    def fold(self, values):
        a, idx = self.positions(values[0].shape)
        return np.take(values[0], idx, axis=a)


class SplitPart(Slice):
    """Output ``index`` of a Split: the parts' sizes from ``split`` (an attribute before opset 13, an
    input from 13), else ``num_outputs`` (opset 18) or as many equal parts as the node has outputs."""
    ATTRS = ("axis", "split", "num_outputs")

    def __init__(self, node, ctx, index: int):
        Spec.__init__(self, node, ctx)
        self.output, self.index = node.outputs[index], index
        # A step of its own (its buffer, its row in describe, a name replace() can take) per output.
        self.name = f"{node.name}[{index}]"
        self.names = [self.name]
        self.axis = int(node.attrs.get("axis", 0))
        self.sizes = ints_attr_or_input(node, ctx, "split", 1, since=13)
        self.parts = int(node.attrs.get("num_outputs", len(node.outputs)))
        if self.sizes is not None and (len(self.sizes) != len(node.outputs) or min(self.sizes) < 1):
            refuse(node, f"split {self.sizes} for {len(node.outputs)} outputs")
        if self.parts != len(node.outputs):
            refuse(node, f"num_outputs {self.parts} for {len(node.outputs)} outputs")

    def window(self, x: tuple) -> tuple:
        a = self.axis + len(x) if self.axis < 0 else self.axis
        if not 1 <= a < len(x):
            refuse(self.node, f"axis {self.axis} of shape {tuple(x)}: labkit splits an axis after the batch")
        n = x[a]
        if self.sizes is not None:
            sizes = self.sizes
        else:       # ONNX: equal parts, the last smaller where they do not divide the axis
            each = -(-n // self.parts)
            sizes = tuple(min(each, max(n - each * i, 0)) for i in range(self.parts))
        if sum(sizes) != n or min(sizes) < 1:
            refuse(self.node, f"parts {sizes} do not split axis {a} of size {n}")
        return a, sum(sizes[:self.index]), sizes[self.index]


def split_parts(node, ctx) -> list:
    """One SplitPart per output of a Split node (each a slice of its input)."""
    check_attrs(node, SplitPart.ATTRS)
    if not node.outputs or not all(node.outputs):
        refuse(node, "an output is unnamed")
    return [SplitPart(node, ctx, i) for i in range(len(node.outputs))]


class ReduceMean(Spec):
    """The mean over H and W of an NCHW tensor (keepdims 1: (N, C, 1, 1); 0: (N, C)): a global average
    pool.  Other axes are refused."""
    ATTRS = ("axes", "keepdims", "noop_with_empty_axes")

    def __init__(self, node, ctx):
        super().__init__(node, ctx)
        axes = ints_attr_or_input(node, ctx, "axes", 1, since=18)
        if not axes:
            refuse(node, "no axes: labkit reduces over the spatial axes (2, 3) only")
        self.axes, self.keepdims = axes, bool(node.attrs.get("keepdims", 1))

    def shape(self, shapes):
        x = tuple(shapes[0])
        if len(x) != 4 or sorted(a % 4 for a in self.axes) != [2, 3]:
            refuse(self.node, f"axes {self.axes} of shape {x}: labkit reduces over H and W of NCHW "
                              "tensors (axes 2 and 3)")
        return (x[0], x[1], 1, 1) if self.keepdims else (x[0], x[1])

    def flops(self, shapes, out):
        return numel(shapes[0])

    def fold(self, values):
        return np.mean(values[0], axis=(2, 3), keepdims=self.keepdims)


class ReduceMax(ReduceMean):
    """The largest value over H and W of an NCHW tensor (a global max pool: torch.amax over the plane,
    AdaptiveMaxPool2d(1)); NaN wins, as in PyTorch.  Other axes are refused."""

    def fold(self, values):
        return np.max(values[0], axis=(2, 3), keepdims=self.keepdims)


LAYOUT_SPECS = {"Transpose": Transpose, "Slice": Slice, "ReduceMean": ReduceMean, "ReduceMax": ReduceMax,
                "Gather": Gather}
