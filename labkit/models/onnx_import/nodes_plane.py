"""Layout ops that move the batch axis away and bring it back, run as one linear map of each image's
planes.

torch.onnx's dynamo exporter writes an ``adaptive_avg_pool2d`` that one AveragePool cannot do (an
output larger than its input: AlexNet's and VGG's head on a 64x64 image; windows of uneven sizes) as

    Transpose (N, C, H, W) -> (H, W, N, C)      the batch axis moved to the back
    GatherND of each output's window of pixels  (Ho, k, Wo, k, N, C)
    Transpose -> (N, C, Ho, k, Wo, k)           and to the front again
    ReduceMean over the two window axes         (N, C, Ho, Wo)

and, for uneven windows, a Where that zeroes the padding taps, Gathers and Adds of the taps and a Div
by each window's size instead of the ReduceMean.  labkit keeps the batch axis first, so it runs no
such Transpose alone.  The region of nodes that follows it (REGION_OPS, each reading only the
region's values and constants) must end in one value read outside it; if that value is NCHW again
and each (image, channel) plane of it is a linear map of the same plane of the input, the region is
y[n, c] = x[n, c] @ P with the planes flattened.  P (H*W, Ho*Wo) is found when the input's shape is
known, by running the region in float64 on the host on every pixel alone (H*W planes of one pixel
each, MAX_PIXELS at most), then checked on random planes of two images of three channels: a region
that mixes images or channels, or adds a constant, is refused as before.  The kernel is gemm.cu's
dense layer over the N*C planes (onnx_import.layers).
"""
from __future__ import annotations

import numpy as np

from .nodes import Spec, check_attrs, numel, refuse

__all__ = ["PlaneMap", "plane_map_region", "REGION_OPS"]

REGION_OPS = ("Transpose", "GatherND", "ReduceMean", "Gather", "Where", "Add", "Sub", "Mul", "Div")
MAX_REGION = 64
MAX_PIXELS = 4096       # the probe's planes: H*W x H*W float64 values (128 MiB at most)


def plane_map_region(nodes: list, i: int, consts: dict, reader_of: dict, output: str) -> tuple[list, str] | None:
    """(the region's nodes in run order, the one value read outside it) for the region starting at
    ``nodes[i]``, a Transpose that moves axis 0: each later node of REGION_OPS whose inputs are the
    region's values or constants; None where there is no such region (none gathers, or more than one
    of its values is read outside it).  ``reader_of``: {value name: the nodes reading it}."""
    first = nodes[i]
    perm = first.attrs.get("perm")
    if first.op != "Transpose" or not isinstance(perm, tuple) or not perm or perm[0] == 0:
        return None
    region, inside = [first], {first.outputs[0]}
    for n in nodes[i + 1:]:
        data = [v for v in n.inputs if v and v not in consts]
        if n.op in REGION_OPS and n.outputs and data and all(v in inside for v in data):
            region.append(n)
            inside.add(n.outputs[0])
            if len(region) > MAX_REGION:
                return None
    names = {n.name for n in region}
    leaving = [v for v in inside if v == output or any(r.name not in names for r in reader_of.get(v, []))]
    if len(leaving) != 1 or not any(n.op in ("GatherND", "Gather") for n in region):
        return None
    return region, leaving[0]


class PlaneMap(Spec):
    """The region's nodes as one step: input (N, C, H, W), output (N, C, Ho, Wo), ``matrix(shape)`` P."""
    ATTRS = ("perm",)
    ATTRS_OF = {"Transpose": ("perm",), "GatherND": ("batch_dims",), "Gather": ("axis",),
                "ReduceMean": ("axes", "keepdims", "noop_with_empty_axes"), "Where": (), "Add": (), "Sub": (),
                "Mul": (), "Div": ()}

    def __init__(self, region: list, output: str, ctx):
        super().__init__(region[0], ctx)
        for n in region[1:]:
            check_attrs(n, self.ATTRS_OF[n.op])
            if n.op == "GatherND" and n.attrs.get("batch_dims", 0) != 0:
                refuse(n, f"batch_dims {n.attrs['batch_dims']}: labkit gathers with batch_dims 0")
        self.region, self._consts = region, ctx.consts     # the graph's constants, complete by shape time
        self.ops, self.names = [n.op for n in region], [n.name for n in region]
        self.output = output
        self._matrices: dict = {}      # (H, W) -> (P, (Ho, Wo))      # (H, W) -> (P, (Ho, Wo))

    def _const(self, node, i: int, what: str):
        name = node.inputs[i] if i < len(node.inputs) else ""
        if not name:
            return None
        if name not in self._consts:
            refuse(node, f"its {what} ({name!r}) is computed outside the region: labkit takes constants there")
        return np.asarray(self._consts[name])

    def _run(self, x: np.ndarray) -> np.ndarray:
        """The region on a host array, each op as ONNX defines it (numpy's broadcasting is ONNX's)."""
        env = {self.inputs[0]: x}
        for n in self.region:
            args = [env[v] if v in env else self._const(n, k, "input") for k, v in enumerate(n.inputs)]
            v = args[0]
            try:
                if n.op == "Transpose":
                    v = np.transpose(v, n.attrs.get("perm") or None)
                elif n.op == "GatherND":
                    idx = args[1]
                    if idx is None or idx.dtype.kind not in "iu" or idx.ndim < 1 or not 1 <= idx.shape[-1] <= v.ndim:
                        refuse(n, f"indices of shape {None if idx is None else idx.shape}: labkit takes int "
                                  f"indices whose last axis (at most {v.ndim}) names the gathered axes")
                    v = v[tuple(np.moveaxis(idx.astype(np.int64), -1, 0))]
                elif n.op == "Gather":
                    if args[1] is None or args[1].dtype.kind not in "iu":
                        refuse(n, "its indices must be int constants")
                    v = np.take(v, args[1].astype(np.int64), axis=int(n.attrs.get("axis", 0)))
                elif n.op == "ReduceMean":
                    axes = n.attrs.get("axes", args[1] if len(args) > 1 else None)
                    axes = () if axes is None else tuple(int(a) for a in np.asarray(axes).reshape(-1))
                    if axes or not n.attrs.get("noop_with_empty_axes", 0):
                        v = v.mean(axis=axes or None, keepdims=bool(n.attrs.get("keepdims", 1)))
                elif n.op == "Where":
                    v = np.where(np.asarray(args[0], dtype=bool), args[1], args[2])
                else:
                    v = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}[n.op](*args[:2])
            except (IndexError, ValueError, TypeError) as e:
                refuse(n, f"on inputs of shapes {[np.shape(a) for a in args]}: {e}")
            env[n.outputs[0]] = np.asarray(v, dtype=np.float64)
        return env[self.output]

    def matrix(self, x: tuple) -> np.ndarray:
        """P (H*W, Ho*Wo) of an input of shape ``x`` (N, C, H, W); OnnxImportError where the region is
        not one linear map per plane."""
        key = tuple(x[2:])
        if key in self._matrices:
            return self._matrices[key][0]
        first = self.region[0]
        if len(x) != 4:
            refuse(first, f"input of shape {tuple(x)}: perm {first.attrs['perm']} moves the batch axis, which "
                          "labkit runs only in a region that maps each plane of an NCHW tensor on its own")
        h, w = int(x[2]), int(x[3])
        if h * w > MAX_PIXELS:
            refuse(first, f"perm {first.attrs['perm']} moves the batch axis; labkit runs such a region as a map of "
                          f"each plane, of at most {MAX_PIXELS} pixels, not {h}x{w}")
        out = self._run(np.eye(h * w).reshape(h * w, 1, h, w))
        if out.ndim != 4 or out.shape[:2] != (h * w, 1):
            refuse(first, f"perm {first.attrs['perm']} moves the batch axis and the region ({'+'.join(self.ops)}) "
                          f"does not bring it back first (NCHW in, {out.ndim} axes out)")
        P = out.reshape(h * w, -1)
        probe = np.random.default_rng(0).standard_normal((2, 3, h, w))
        want = self._run(probe)
        got = (probe.reshape(6, h * w) @ P).reshape((2, 3) + out.shape[2:])
        if want.shape != got.shape or not np.allclose(want, got, rtol=1e-12, atol=1e-12):
            refuse(first, f"perm {first.attrs['perm']} moves the batch axis and the region ({'+'.join(self.ops)}) "
                          "mixes images or channels, or is not linear: labkit keeps the batch axis first")
        self._matrices[key] = (P, tuple(int(d) for d in out.shape[2:]))
        return P

    def shape(self, shapes):
        x = tuple(shapes[0])
        self.matrix(x)
        return (x[0], x[1]) + self._matrices[tuple(x[2:])][1]

    def flops(self, shapes, out):
        return 2 * numel(out) * shapes[0][2] * shapes[0][3]

    def weight_count(self):
        return sum(p.size for p, _ in self._matrices.values())
