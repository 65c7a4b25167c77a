"""Shape arithmetic, done on the host: what an exporter writes for ``x.view(x.size(0), -1)`` with a
dynamic batch (Shape, Gather, Unsqueeze, Concat, then Reshape).  The values are int arrays computed
from the shapes of one batch size, in ``infer``, before any launch; no kernel runs them.

    Shape(x) -> Gather(indices 0) -> Unsqueeze(axes 0) -> Concat([n, -1]) -> Reshape(x, that)

Only these ops take part, and only on int values that come from shapes or constants: Shape, Gather,
Unsqueeze, Squeeze, Concat, Cast, Add, Sub, Mul, Div, Identity, Slice, Range (the index arithmetic of
an ``as_strided`` view, as torch.onnx's dynamo exporter writes one: Range over the batch, Mul, Add).
Each value has at most MAX_ELEMENTS elements.  A host value read by a kernel as data is refused; it
may be a Reshape's target, a Slice's bounds or a Gather's indices.
"""
from __future__ import annotations

import numpy as np

from .nodes import Spec, refuse

__all__ = ["HOST_OPS", "HostOp"]

HOST_OPS = {"Shape": ("start", "end"), "Gather": ("axis",), "Unsqueeze": ("axes",), "Squeeze": ("axes",),
            "Concat": ("axis",), "Cast": ("to", "saturate"), "Add": (), "Sub": (), "Mul": (), "Div": (),
            "Identity": (), "Slice": ("starts", "ends", "axes"), "Range": ()}
_INT_TYPES = (6, 7)       # ONNX's INT32 and INT64: what a Cast of shape values may ask for
# Shape vectors are short; index arithmetic over a batch is N times a layer's width.  Beyond this a
# file's arithmetic is refused (a hostile one could ask for any size): 32 MiB of int64 at most.
MAX_ELEMENTS = 1 << 22


class HostOp(Spec):
    """One node of shape arithmetic: ``evaluate(args)`` with the Shape's input shape, or the int arrays
    of its inputs."""
    host = True

    def __init__(self, node, ctx):
        self.ATTRS = HOST_OPS[node.op]
        super().__init__(node, ctx)
        self.inputs = [v for v in node.inputs if v]
        if node.op == "Cast" and node.attrs.get("to") not in _INT_TYPES:
            refuse(node, "a Cast in shape arithmetic must be to INT32 or INT64")
        self.axes = None
        if node.op in ("Unsqueeze", "Squeeze"):
            if ctx.opset >= 13 and len(node.inputs) > 1 and node.inputs[1]:
                axes = ctx.consts.get(node.inputs[1])
                if axes is None:
                    refuse(node, "its axes must be a constant")
                self.axes = tuple(int(v) for v in np.asarray(axes).reshape(-1))
                self.inputs = self.inputs[:1]
            else:
                self.axes = node.attrs.get("axes")
            if self.axes is None and node.op == "Unsqueeze":
                refuse(node, "name the axes")      # (a Squeeze without axes drops every axis of size 1)

    def evaluate(self, args: list) -> np.ndarray:
        op, at = self.node.op, self.node.attrs
        if op == "Shape":
            shape = np.asarray(args[0], dtype=np.int64)
            return shape[at.get("start", 0):at.get("end", len(shape))]
        a = [np.asarray(v) for v in args]
        if any(v.dtype.kind not in "iub" or v.size > MAX_ELEMENTS for v in a):
            refuse(self.node, f"shape arithmetic takes int arrays of at most {MAX_ELEMENTS} elements only")
        a = [v.astype(np.int64) for v in a]
        try:
            if op == "Gather":
                axis = at.get("axis", 0)
                self._bounded(a[1].size * (a[0].size // max(1, a[0].shape[axis])))
                return np.take(a[0], a[1], axis=axis)
            if op == "Unsqueeze":
                return np.expand_dims(a[0], tuple(sorted(x % (a[0].ndim + len(self.axes)) for x in self.axes)))
            if op == "Squeeze":
                return np.squeeze(a[0], None if self.axes is None else tuple(x % a[0].ndim for x in self.axes))
            if op == "Range":
                start, limit, delta = (int(v.reshape(-1)[0]) for v in a[:3])
                if delta == 0 or not 0 <= -(-(limit - start) // delta) <= MAX_ELEMENTS:
                    refuse(self.node, f"Range({start}, {limit}, {delta}): a step of 0, or over {MAX_ELEMENTS} values")
                return np.arange(start, limit, delta, dtype=np.int64)
            if op == "Concat":
                return np.concatenate(a, axis=at.get("axis", 0))
            if op in ("Cast", "Identity"):
                return a[0]
            if op == "Slice":         # x.shape[2:] and the like
                starts, ends, axes, steps = (a[1:] + [None] * 4)[:4] if len(a) > 1 else \
                    (np.asarray(at.get("starts", ())), np.asarray(at.get("ends", ())), at.get("axes"), None)
                axes = range(len(starts)) if axes is None else [int(v) for v in np.asarray(axes).reshape(-1)]
                steps = [1] * len(starts) if steps is None else [int(v) for v in steps.reshape(-1)]
                index = [slice(None)] * a[0].ndim
                for s0, e0, ax, st in zip(starts.reshape(-1), ends.reshape(-1), axes, steps):
                    index[ax] = slice(int(s0), int(e0), st)
                return a[0][tuple(index)]
            # Add, Sub, Mul, Div: broadcasting can make a large array of two small ones, so its size is asked first
            self._bounded(int(np.prod(np.broadcast_shapes(a[0].shape, a[1].shape), dtype=np.int64)))
            return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.floor_divide}[op](a[0], a[1])
        except (ValueError, IndexError, np.exceptions.AxisError) as exc:
            refuse(self.node, f"on shape values {[v.tolist() for v in a]}: {exc}")

    def _bounded(self, size: int) -> None:
        """Refuse an op whose result would have more than MAX_ELEMENTS values (before it is made)."""
        if size > MAX_ELEMENTS:
            refuse(self.node, f"shape arithmetic of {size} values, over {MAX_ELEMENTS} values")

    def shape(self, shapes):
        raise AssertionError("host values are evaluated, not run")

    def flops(self, shapes, out):
        return 0
