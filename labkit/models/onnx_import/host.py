"""Shape arithmetic, done on the host: what an exporter writes for ``x.view(x.size(0), -1)`` with a
dynamic batch (Shape, Gather, Unsqueeze, Concat, then Reshape).  The values are small int vectors
computed from the shapes of one batch size, in ``infer``, before any launch; no kernel runs them.

    Shape(x) -> Gather(indices 0) -> Unsqueeze(axes 0) -> Concat([n, -1]) -> Reshape(x, that)

Only these ops take part, and only on int values that come from shapes or constants: Shape, Gather,
Unsqueeze, Squeeze, Concat, Cast, Add, Sub, Mul, Div, Identity, Slice.  A host value read by a kernel (as
data, not as a Reshape's target) is refused.
"""
from __future__ import annotations

import numpy as np

from .nodes import Spec, refuse

__all__ = ["HOST_OPS", "HostOp"]

HOST_OPS = {"Shape": ("start", "end"), "Gather": ("axis",), "Unsqueeze": ("axes",), "Squeeze": ("axes",),
            "Concat": ("axis",), "Cast": ("to", "saturate"), "Add": (), "Sub": (), "Mul": (), "Div": (),
            "Identity": (), "Slice": ("starts", "ends", "axes")}
_INT_TYPES = (6, 7)       # ONNX's INT32 and INT64: what a Cast of shape values may ask for
_MAX_ELEMENTS = 64        # shape vectors are short; a longer one is not shape arithmetic


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
            if self.axes is None:
                refuse(node, "name the axes")

    def evaluate(self, args: list) -> np.ndarray:
        op, at = self.node.op, self.node.attrs
        if op == "Shape":
            shape = np.asarray(args[0], dtype=np.int64)
            return shape[at.get("start", 0):at.get("end", len(shape))]
        a = [np.asarray(v) for v in args]
        if any(v.dtype.kind not in "iub" or v.size > _MAX_ELEMENTS for v in a):
            refuse(self.node, "shape arithmetic takes short int vectors only")
        a = [v.astype(np.int64) for v in a]
        try:
            if op == "Gather":
                return np.take(a[0], a[1], axis=at.get("axis", 0))
            if op == "Unsqueeze":
                return np.expand_dims(a[0], tuple(sorted(x % (a[0].ndim + len(self.axes)) for x in self.axes)))
            if op == "Squeeze":
                return np.squeeze(a[0], tuple(x % a[0].ndim for x in self.axes))
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
            if op == "Div":
                return np.floor_divide(a[0], a[1])
            return {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[op](a[0], a[1])
        except (ValueError, IndexError, np.exceptions.AxisError) as exc:
            refuse(self.node, f"on shape values {[v.tolist() for v in a]}: {exc}")

    def shape(self, shapes):
        raise AssertionError("host values are evaluated, not run")

    def flops(self, shapes, out):
        return 0
