"""From the file's nodes to the steps labkit runs: every node made a spec (or refused), constants
folded, shapes inferred, and what the kernels' epilogues can take fused into the step before it.

    specs, consts = lower(g)                       # g: reader.OnnxGraph
    shapes = infer(specs, consts, g.input_name, (N, C, H, W))
    specs = fuse(specs, consts, shapes, g.output_name)

A Transpose that moves the batch axis, with the layout ops after it that bring it back (the dynamo
exporter's adaptive average pool), becomes one step as it is lowered: nodes_plane.PlaneMap.

Fusions, each only where the value between the two is read by nothing else (and is not the
graph's output):

* BatchNormalization after a Conv or ConvTranspose: folded into its weights and bias (float64);
* Add after a Conv, the other operand of the conv's output shape: the residual the convolution's
  kernel adds in its epilogue (ResNet's skips: the implicit GEMM or, for 3x3 convolutions, Winograd),
  the step running where the Add was (both operands ready);
* Add of a constant after a MatMul (or Gemm): its bias;
* an activation after a Conv, ConvTranspose or Gemm (ReLU, ReLU6, tanh; ReLU, tanh and GELU for
  Gemm), or after an Add, Mul or a standalone batch normalization (any of pointwise.cu's);
* Mul by a constant per channel after a Transpose of a Gemm's output (ConvNeXt's layer scale): folded
  into the Gemm's weight columns and bias;
* Add after a Transpose, the other operand of its output's shape (ConvNeXt's skip): made in the copy;
* a MaxPool after an LRN (a square window, equal strides, no padding or dilation, the floor's output
  size, a plane narrow enough for lrn.cu's lrn_max_pool): one kernel, the normalized values never
  written (AlexNet's and GoogLeNet-era networks' LRN + pool);
* GELU written out as exporters before opset 20 write it, x * (1 + erf(x / sqrt 2)) * 0.5 (Div or Mul
  by the constant, Erf, Add 1, Mul by x, Mul 0.5, in either operand order): one unary gelu step
  instead of five passes over the tensor, itself fused into the Gemm before it (ConvNeXt's MLPs).
"""
from __future__ import annotations

import numpy as np

from ...errors import OnnxImportError
from ...ops.lrn import fused_band
from .nodes import (SPECS, LRN, BatchNorm, Binary, Concat, Conv, ConvTranspose, Ctx, Gemm, Pool, Unary, View,
                    constant_value, refuse)
from .host import HOST_OPS, HostOp
from .nodes_layout import LAYOUT_SPECS, Transpose, split_parts
from .nodes_plane import PlaneMap, plane_map_region
from .reader import OnnxGraph

__all__ = ["lower", "infer", "fuse", "free_batch", "is_host", "SUPPORTED_OPS"]

RUN_SPECS = {**SPECS, **LAYOUT_SPECS}
SUPPORTED_OPS = tuple(sorted(set(RUN_SPECS) | {"Constant", "Split"} | set(HOST_OPS)))


def lower(g: OnnxGraph) -> tuple[list, dict]:
    """(specs in run order, constants {name: host array}); OnnxImportError for a node labkit cannot run."""
    consts = dict(g.constants)
    ctx = Ctx(consts, g.opset)
    read = {v for n in g.nodes for v in n.inputs} | {g.output_name}
    reader_of: dict = {}
    for n in g.nodes:
        for v in dict.fromkeys(n.inputs):
            reader_of.setdefault(v, []).append(n)
    specs, taken = [], set()
    for i, node in enumerate(g.nodes):
        if node.name in taken:            # a node of a PlaneMap made at the chain's first node
            continue
        region = plane_map_region(g.nodes, i, consts, reader_of, g.output_name) if node.op == "Transpose" else None
        if region and node.inputs and node.inputs[0] not in consts and node.inputs[0] not in ctx.host:
            specs.append(PlaneMap(*region, ctx))
            taken.update(n.name for n in region[0][1:])
            continue
        if node.domain not in ("", "ai.onnx"):
            refuse(node, f"op of domain {node.domain!r}: labkit runs the default ONNX domain's ops")
        if node.op == "Constant":
            consts[node.outputs[0]] = constant_value(node)
            continue
        ins = [v for v in node.inputs if v]
        if node.op == "Range" and all(v in consts for v in ins):    # a constant: folded (bounded as host values)
            consts[node.outputs[0]] = HostOp(node, ctx).evaluate([consts[v] for v in ins])
            continue
        if node.op == "Shape" or (node.op in HOST_OPS and any(v in ctx.host for v in ins) and
                                  all(v in ctx.host or v in consts for v in ins)):
            specs.append(HostOp(node, ctx))
            ctx.host.add(node.outputs[0])
            continue
        # A Reshape's target, a Slice's bounds and a Gather's indices may come from shapes; nothing else does.
        data = ins[:1] if node.op in ("Reshape", "Slice", "Gather") else ins
        if any(v in ctx.host for v in data):
            refuse(node, "it reads values computed from shapes as data: labkit uses shape arithmetic only for "
                         "a Reshape's target, a Slice's bounds and a Gather's indices")
        if node.op == "Split":             # one slice per output
            for part in split_parts(node, ctx):
                if part.inputs[0] in consts:
                    consts[part.output] = part.fold([consts[part.inputs[0]]])
                else:
                    specs.append(part)
            continue
        cls = RUN_SPECS.get(node.op)
        if cls is None:
            refuse(node, f"op {node.op!r} is not supported; labkit runs {', '.join(SUPPORTED_OPS)}")
        extra = [o for o in node.outputs[1:] if o and o in read]
        if extra:
            refuse(node, f"its extra output {extra[0]!r} is read: labkit computes only the first output of {node.op}")
        spec = cls(node, ctx)
        if all(v in consts for v in spec.inputs) and hasattr(spec, "fold"):
            consts[spec.output] = spec.fold([consts[v] for v in spec.inputs])
            continue
        if spec.inputs[0] in consts and not isinstance(spec, (Binary, Concat)):
            refuse(node, f"its input {spec.inputs[0]!r} is a constant: labkit runs {node.op} on computed values only")
        specs.append(spec)
    if g.output_name in consts or g.output_name in ctx.host:
        raise OnnxImportError(f"{g.path}: the graph's output is a constant: there is nothing to run")
    if not any(not is_host(s) for s in specs):
        raise OnnxImportError(f"{g.path}: the graph computes nothing from its input")
    return specs, consts


def infer(specs: list, consts: dict, input_name: str, input_shape: tuple) -> dict:
    """{value name: shape} of every value, from the input's shape (the batch included)."""
    shapes = {input_name: tuple(int(v) for v in input_shape)}
    shapes.update({k: tuple(v.shape) for k, v in consts.items()})
    host: dict = {}
    for s in specs:
        if is_host(s):
            args = [shapes[v] if s.node.op == "Shape" else host.get(v, consts.get(v)) for v in s.inputs]
            host[s.output] = s.evaluate(args)
            shapes[s.output] = tuple(host[s.output].shape)
            continue
        if getattr(s, "target_from", None):
            s.target = tuple(int(v) for v in host[s.target_from].reshape(-1))
        if getattr(s, "bounds_from", None):
            s.set_bounds(*[None if not v else host.get(v, consts.get(v)) for v in s.bounds_from])
        if getattr(s, "indices_from", None):
            s.set_indices(host[s.indices_from])
        shapes[s.output] = tuple(int(v) for v in s.shape([shapes[v] for v in s.inputs]))
    return shapes


def is_host(spec) -> bool:
    """Does the spec compute shape arithmetic on the host (no kernel, no buffer)?"""
    return getattr(spec, "host", False)


def free_batch(specs: list, shapes: dict, batch: int) -> None:
    """Let a file exported at a fixed batch size run at any: a Reshape whose target keeps the batch
    axis, written as the literal ``batch`` the file was exported with ([1, 400] for x.view(x.size(0),
    -1) traced at batch 1), copies that axis instead (target 0).  At the exported batch nothing changes.
    ``shapes``: every value's shape at that batch."""
    for s in specs:
        if isinstance(s, View) and s.node.op == "Reshape" and not s.allowzero and s.target and \
                s.target_from is None and \
                s.target[0] == batch and shapes[s.inputs[0]][0] == batch:
            s.target = (0,) + s.target[1:]


def _readers(specs: list) -> dict:
    count: dict[str, int] = {}
    for s in specs:
        for v in s.inputs:
            count[v] = count.get(v, 0) + 1
    return count


def fuse(specs: list, consts: dict, shapes: dict, output: str) -> list:
    """The specs with the fusions of the module docstring made (specs of fused nodes removed)."""
    specs = list(specs)
    for step in (_fold_batch_norm, _fuse_gelu, _fuse_residual, _fuse_bias, _fold_channel_scale, _fuse_activation,
                 _fuse_transpose_add, _fuse_lrn_pool):
        specs = step(specs, consts, shapes, output)
    return specs


def _writers(specs):
    return {s.output: i for i, s in enumerate(specs) if s is not None}


def _sole(v: str, readers: dict, output: str) -> bool:
    return readers.get(v, 0) == 1 and v != output


def _absorb(first, second) -> None:
    """``first`` now also does ``second``'s work (and whatever ``second`` had absorbed: a GELU's five
    nodes) and writes its output."""
    first.ops.extend(second.ops)
    first.names.extend(second.names)
    first.output = second.output


def _fold_batch_norm(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    for i, s in enumerate(specs):
        if isinstance(s, BatchNorm):
            j = writer.get(s.inputs[0])
            conv = specs[j] if j is not None else None
            if isinstance(conv, (Conv, ConvTranspose)) and conv.activation is None and \
                    getattr(conv, "residual", None) is None and _sole(conv.output, readers, output):
                conv.fold_batch_norm(s.scale, s.shift)
                _absorb(conv, s)
                specs[i] = None
    return [s for s in specs if s is not None]


def _plain_adds(specs, writer):
    """(Add's index, the Add, its operand k's producer index or None, that producer, the other
    operand) for each operand of each Add with no activation of its own."""
    for i, s in enumerate(specs):
        if isinstance(s, Binary) and s.kind == "add" and s.activation is None:
            for k in (0, 1):
                j = writer.get(s.inputs[k])
                yield i, s, j, (specs[j] if j is not None else None), s.inputs[1 - k]


def _fuse_residual(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    fused = set()
    for i, s, j, conv, other in _plain_adds(specs, writer):
        if i in fused:
            continue
        if isinstance(conv, Conv) and conv.activation is None and conv.residual is None and \
                _sole(conv.output, readers, output) and other not in consts and \
                other != conv.output and shapes[other] == shapes[conv.output]:
            conv.residual = other
            conv.inputs.append(other)
            _absorb(conv, s)
            specs[i], specs[j] = conv, None      # it runs where the Add ran: both operands are ready there
            fused.add(i)
    return [s for s in specs if s is not None]


def _fuse_bias(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    fused = set()
    for i, s, _, g, c in _plain_adds(specs, writer):
        if i in fused:
            continue
        if isinstance(g, Gemm) and g.activation is None and c in consts and _sole(g.output, readers, output) \
                and g.add_bias(consts[c]):
            _absorb(g, s)
            specs[i] = None
            fused.add(i)
    return [s for s in specs if s is not None]


def _channel_scale(c, shape: tuple, axis: int) -> np.ndarray | None:
    """A constant ``c`` multiplied into a tensor of ``shape`` as one value per index of ``axis`` (or one
    value for all): those values, (shape[axis],) in float64; None if it varies along another axis or
    does not broadcast."""
    c = np.asarray(c, dtype=np.float64)
    if c.ndim > len(shape):
        return None
    dims = (1,) * (len(shape) - c.ndim) + c.shape
    if any(d != 1 and (k != axis or d != shape[axis]) for k, d in enumerate(dims)):
        return None
    return np.broadcast_to(c.reshape(-1), (shape[axis],)) if c.size > 1 else np.full(shape[axis], float(c.reshape(-1)[0]))


def _fold_channel_scale(specs, consts, shapes, output):
    """Gemm -> Transpose -> Mul by a constant per channel (ConvNeXt's layer scale after its channels-last
    MLP): the scale folded into the Gemm's weight columns and bias (x @ (w g) + b g = (x @ w + b) g,
    the Transpose moving the Gemm's last axis to where the constant varies); the Mul removed."""
    readers, writer = _readers(specs), _writers(specs)
    for i, s in enumerate(specs):
        if not (isinstance(s, Binary) and s.kind == "mul" and s.activation is None):
            continue
        for k in (0, 1):
            j, c = writer.get(s.inputs[k]), s.inputs[1 - k]
            t = specs[j] if j is not None else None
            if not (isinstance(t, Transpose) and len(t.inputs) == 1 and c in consts and
                    _sole(t.output, readers, output)):
                continue
            g_at = writer.get(t.inputs[0])
            g = specs[g_at] if g_at is not None else None
            if not (isinstance(g, Gemm) and g.activation is None and _sole(g.output, readers, output)):
                continue
            out = shapes[t.output]
            if shapes[s.output] != out:      # the constant must not broadcast the product to a larger shape
                continue
            scale = _channel_scale(consts[c], out, t.resolved(len(out)).index(len(out) - 1))
            if scale is None:
                continue
            g.w = g.w * scale[None, :]
            g.b = None if g.b is None else g.b * scale
            g.ops.append(s.node.op)
            g.names.append(s.name)
            t.output = s.output
            specs[i] = None
            break
    return [s for s in specs if s is not None]


def _fuse_transpose_add(specs, consts, shapes, output):
    """Transpose -> Add of a value of its output's shape (ConvNeXt's skip, after its channels-last MLP):
    the Add made in the copy (Permute(add=True)), which runs where the Add ran."""
    readers, writer = _readers(specs), _writers(specs)
    fused = set()
    for i, s, j, t, other in _plain_adds(specs, writer):
        if i in fused:
            continue
        if isinstance(t, Transpose) and len(t.inputs) == 1 and _sole(t.output, readers, output) and \
                other not in consts and other != t.output and shapes[other] == shapes[t.output]:
            t.inputs.append(other)
            _absorb(t, s)
            specs[i], specs[j] = t, None
            fused.add(i)
    return [s for s in specs if s is not None]


def _fuse_activation(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    for i, s in enumerate(specs):
        if not isinstance(s, Unary):
            continue
        j = writer.get(s.inputs[0])
        prev = specs[j] if j is not None else None
        if prev is None or prev.activation is not None or not _sole(prev.output, readers, output):
            continue
        if isinstance(prev, (Conv, ConvTranspose, Gemm)):
            if s.fused_as not in prev.FUSABLE:
                continue
            prev.activation = (s.fused_as, 0.0, 0.0)
        elif isinstance(prev, (Binary, BatchNorm)):
            prev.activation = (s.kind, s.a, s.b)
        else:
            continue
        _absorb(prev, s)
        specs[i] = None
    return [s for s in specs if s is not None]


def _scalar(v, consts) -> float | None:
    c = consts.get(v)
    return float(np.asarray(c).reshape(-1)[0]) if c is not None and np.asarray(c).size == 1 else None


def _other(s, v):
    """The operand of a two-input spec that is not ``v`` (None if both or neither are)."""
    a, b = s.inputs
    return b if a == v and b != v else a if b == v and a != v else None


def _fuse_gelu(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    reader_of = {}
    for i, s in enumerate(specs):
        for v in s.inputs:
            reader_of.setdefault(v, []).append(i)

    def sole_reader(v, kind):
        idx = reader_of.get(v, [])
        if len(idx) != 1 or not _sole(v, readers, output):
            return None
        s = specs[idx[0]]
        return idx[0] if isinstance(s, Binary) and s.kind == kind and s.activation is None else None

    for i, erf in enumerate(specs):
        if not (isinstance(erf, Unary) and erf.kind == "erf"):
            continue
        j = writer.get(erf.inputs[0])
        scaled = specs[j] if j is not None else None          # x / sqrt 2, or x * (1 / sqrt 2)
        if not (isinstance(scaled, Binary) and scaled.activation is None and _sole(scaled.output, readers, output)):
            continue
        if scaled.kind == "div" and _scalar(scaled.inputs[1], consts) is not None:
            x, ok = scaled.inputs[0], abs(_scalar(scaled.inputs[1], consts) - np.sqrt(2.0)) < 1e-5
        elif scaled.kind == "mul":
            c = next((v for v in scaled.inputs if _scalar(v, consts) is not None), None)
            x = _other(scaled, c) if c is not None else None
            ok = x is not None and abs(_scalar(c, consts) - np.sqrt(0.5)) < 1e-6
        else:
            continue
        k = sole_reader(erf.output, "add")
        if not ok or k is None or _scalar(_other(specs[k], erf.output) or "", consts) != 1.0:
            continue
        m = sole_reader(specs[k].output, "mul")
        if m is None or _other(specs[m], specs[k].output) != x:
            continue
        h = sole_reader(specs[m].output, "mul")
        if h is None or _scalar(_other(specs[h], specs[m].output) or "", consts) != 0.5:
            continue
        erf.kind, erf.fused_as, erf.inputs = "gelu", "gelu", [x]
        for q in (k, m, h):
            _absorb(erf, specs[q])
        erf.ops.insert(0, scaled.node.op)
        erf.names.insert(0, scaled.name)
        specs[j] = specs[k] = specs[m] = specs[h] = None
    return [s for s in specs if s is not None]


def _fuse_lrn_pool(specs, consts, shapes, output):
    readers, writer = _readers(specs), _writers(specs)
    for i, s in enumerate(specs):
        if not (isinstance(s, Pool) and s.mode == "max"):
            continue
        j = writer.get(s.inputs[0])
        lrn = specs[j] if j is not None else None
        if not (isinstance(lrn, LRN) and lrn.pool is None and _sole(lrn.output, readers, output)):
            continue
        x = shapes[s.inputs[0]]
        pads, hw, _ = s.geometry(x)
        (k, kw), (st, sw) = s.kernel, s.strides
        if k != kw or st != sw or any(pads) or s.dilations != (1, 1) or \
                hw != ((x[2] - k) // st + 1, (x[3] - k) // st + 1) or fused_band(x[2], x[3], k, st) == 0:
            continue
        lrn.pool = (k, st)
        _absorb(lrn, s)
        specs[i] = None
    return [s for s in specs if s is not None]


def as_float32(a: np.ndarray) -> np.ndarray:
    """A constant as the kernels read it; OnnxImportError for one that is not finite."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise OnnxImportError("a constant the graph computes with holds NaN or infinity")
    return a
