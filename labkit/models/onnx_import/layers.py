"""The kernels that run each spec: labkit's layer objects, made once per input shape (weights
uploaded once), and per batch size a step that launches them into the plan's buffers.

    kernels = Kernels()
    kernels.prepare(spec, in_shapes)                      # at import: every layer made, every shape checked
    run, kernel = kernels.runner(spec, in_shapes, out_shape, alloc)   # per plan: run(inputs, out)

Which kernel runs what:

    Conv                  labkit.conv2d's auto choice (AutoConv2d: implicit GEMM, depthwise, Winograd, ...)
                          with bias and ReLU/ReLU6/tanh fused; with a residual fused, the families whose
                          epilogue adds one (implicit GEMM, Winograd and conv_small's direct 3x3);
                          asymmetric pads: pad_concat's pad4 first, then pad 0
    ConvTranspose         ConvTranspose2d (each output phase an implicit GEMM)
    Gemm, MatMul          Dense (gemm.cu), bias and ReLU/tanh fused
    MaxPool               max_pool2d (square window, no padding, floor) or pool_any
    AveragePool           pool_any;  GlobalAveragePool: global_avg_pool;  GlobalMaxPool, ReduceMax over H, W: pool_any
    BatchNormalization    channel_affine (where no convolution took it)
    activations           pointwise.cu's unary;  Add, Mul: binary_bcast
    Concat                concat_copy per input;  Pad: pad4;  Softmax: softmax_rows(_held);  LRN: lrn_across_channels
    LRN + MaxPool         lrn_max_pool (fused: graph.fuse)
    LayerNormalization    layer_norm_rows (layer_norm.cu), over the trailing axes
    Sub, Div; Erf, Gelu   binary_bcast, unary (pointwise.cu)
    Transpose             permute;  Slice, each output of a Split: slice_copy;  ReduceMean over H, W: global_avg_pool
    Transpose moving the batch, GatherND, ...   as one map of each plane (nodes_plane.PlaneMap): Dense (gemm.cu)
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ... import backends, layers
from ...checks import array_module
from ...ops.layer_norm import LayerNorm
from ...ops.pointwise import Binary as BinaryLayer, ChannelAffine, Unary as UnaryLayer
from ...ops.pool_pad import ConcatCopy, Pad4, Permute, Pool2d, SliceCopy, gather_axis
from ...ops.pool_softmax import softmax_kernel
from ...ops.conv_transpose import TransposeGeometry
from ...shapes import ConvLayer
from . import nodes
from .graph import as_float32

__all__ = ["Kernels"]


class Kernels:
    """The layer objects of one model on the backend in use, by (spec, input shape without the batch)."""

    def __init__(self) -> None:
        self.backend = backends.current()
        self.xp = array_module(self.backend)
        self._made: dict = {}

    def _dev(self, a):
        return None if a is None else self.xp.asarray(as_float32(a))

    def prepare(self, spec, in_shapes: list):
        """The spec's layer objects for these input shapes (made once: a shape error shows here)."""
        key = (id(spec), tuple(tuple(s[1:]) for s in in_shapes))
        made = self._made.get(key)
        if made is None:
            make = getattr(self, f"_make_{type(spec).__name__.lower()}", None)
            made = self._made[key] = make(spec, in_shapes) if make else None
        return made

    def runner(self, spec, in_shapes: list, out_shape: tuple, alloc: Callable) -> tuple[Callable, Callable]:
        """(run(inputs, out), kernel(): the name of what runs) for a batch of ``out_shape[0]``; ``alloc(tag,
        shape)`` gives a buffer of the plan's own (padded inputs, split-K workspaces)."""
        made = self.prepare(spec, in_shapes)
        return getattr(self, f"_run_{type(spec).__name__.lower()}")(spec, made, in_shapes, out_shape, alloc)

    # --- convolutions ----------------------------------------------------------------------------
    def _make_conv(self, spec: nodes.Conv, in_shapes):
        x = in_shapes[0]
        pads, _ = spec.geometry(x)
        t, l, b, r = pads
        w, bias = self._dev(spec.w), self._dev(spec.b)
        act = None if spec.activation is None else spec.activation[0]
        pad = None
        H, W = x[2], x[3]
        if (t, l) != (b, r):
            # labkit's kernels pad both sides of an axis alike: an explicit zero padding step first.
            pad = Pad4((0, 0, t, l), (0, 0, b, r))
            H, W, sym = H + t + b, W + l + r, (0, 0)
        else:
            sym = (t, l)
        geo = ConvLayer.of(x[1], H, W, spec.w.shape[0], spec.kernel, spec.strides, sym, spec.dilations, spec.group)
        geo.check()
        conv = layers.AutoConv2d(w, bias, geo, activation=act, residual=spec.residual is not None)
        return conv, pad

    def _run_conv(self, spec, made, in_shapes, out_shape, alloc):
        conv, pad = made
        N = out_shape[0]
        residual = spec.residual is not None
        padded = alloc("padded input", pad.out_shape(in_shapes[0])) if pad is not None else None

        def run(ins, out):
            x = ins[0]
            if pad is not None:
                x = pad(x, padded)
            if residual:
                conv(x, out, residual=ins[1])
            else:
                conv(x, out)

        def kernel():
            name = _auto_name(conv.choice(N)) + (" + residual" if residual else "")
            return ("pad4 + " if pad is not None else "") + name
        return run, kernel

    def _make_convtranspose(self, spec: nodes.ConvTranspose, in_shapes):
        x = in_shapes[0]
        geo = TransposeGeometry.of(x[1], x[2], x[3], spec.w.shape[1] * spec.group, spec.kernel, spec.strides, spec.pad,
                                   spec.output_padding, spec.dilations, spec.group)
        act = None if spec.activation is None else spec.activation[0]
        conv = layers.ConvTranspose2d(self._dev(spec.w), self._dev(spec.b), geo, activation=act)
        t, l, b, r = spec.crop
        # uneven pads: the even part's output, then pad4 with negative pads crops the rest
        crop = Pad4((0, 0, -t, -l), (0, 0, -b, -r)) if any(spec.crop) else None
        return conv, crop, (x[0], geo.M) + geo.out_hw

    def _run_convtranspose(self, spec, made, in_shapes, out_shape, alloc):
        conv, crop, even_shape = made
        name = "transposed conv: implicit GEMM per phase (conv_implicit.cu)"
        if crop is None:
            return (lambda ins, out: conv(ins[0], out)), (lambda: name)
        even = alloc("uncropped output", (out_shape[0],) + even_shape[1:])

        def run(ins, out):
            crop(conv(ins[0], even), out)
        return run, (lambda: name + " + pad4 crop")

    def _make_gemm(self, spec: nodes.Gemm, in_shapes):
        act = None if spec.activation is None else spec.activation[0]
        return layers.Dense(self._dev(spec.w), self._dev(spec.b), activation=act)

    def _run_gemm(self, spec, fc, in_shapes, out_shape, alloc):
        rows = int(np.prod(out_shape[:-1]))
        ws = alloc("split-K workspace", fc.workspace_shape(rows))
        if len(out_shape) == 2:
            return (lambda ins, out: fc(ins[0], out, workspace=ws)), (lambda: "dense (gemm.cu)")
        # a MatMul of a rank-3 or 4 input: its leading axes as the dense layer's rows (views, no copy)
        flat_in, flat_out = (rows, in_shapes[0][-1]), (rows, out_shape[-1])
        return ((lambda ins, out: fc(ins[0].reshape(flat_in), out.reshape(flat_out), workspace=ws)),
                (lambda: "dense (gemm.cu), leading axes as rows"))

    def _make_planemap(self, spec, in_shapes):
        return layers.Dense(self._dev(spec.matrix(in_shapes[0])), None)

    def _run_planemap(self, spec, fc, in_shapes, out_shape, alloc):
        # each (image, channel) plane a row: (N*C, H*W) @ P -> (N*C, Ho*Wo), views of x and y, no copy
        rows = out_shape[0] * out_shape[1]
        flat_in, flat_out = (rows, in_shapes[0][2] * in_shapes[0][3]), (rows, out_shape[2] * out_shape[3])
        ws = alloc("split-K workspace", fc.workspace_shape(rows))
        return ((lambda ins, out: fc(ins[0].reshape(flat_in), out.reshape(flat_out), workspace=ws)),
                (lambda: "dense over each plane (gemm.cu)"))

    # --- element-wise ----------------------------------------------------------------------------
    def _make_unary(self, spec: nodes.Unary, in_shapes):
        return UnaryLayer(spec.kind, spec.a, spec.b)

    def _run_unary(self, spec, act, in_shapes, out_shape, alloc):
        return (lambda ins, out: act(ins[0], out)), (lambda: f"unary {spec.kind} (pointwise.cu)")

    def _make_batchnorm(self, spec: nodes.BatchNorm, in_shapes):
        name, a, b = spec.activation or (None, 0.0, 0.0)
        return ChannelAffine(self._dev(spec.scale), self._dev(spec.shift), name, a, b)

    def _run_batchnorm(self, spec, affine, in_shapes, out_shape, alloc):
        return (lambda ins, out: affine(ins[0], out)), (lambda: "channel_affine (pointwise.cu)")

    def _make_binary(self, spec: nodes.Binary, in_shapes):
        name, a, b = spec.activation or (None, 0.0, 0.0)
        return BinaryLayer(spec.kind, name, a, b)

    def _run_binary(self, spec, op, in_shapes, out_shape, alloc):
        return (lambda ins, out: op(ins[0], ins[1], out)), (lambda: f"binary_bcast {spec.kind} (pointwise.cu)")

    # --- pooling, shapes, the rest ---------------------------------------------------------------
    def _make_pool(self, spec: nodes.Pool, in_shapes):
        pads, hw, ceil = spec.geometry(in_shapes[0])
        k, s = spec.kernel, spec.strides
        x = in_shapes[0]
        plain = (spec.mode == "max" and k[0] == k[1] and s[0] == s[1] and not any(pads) and
                 spec.dilations == (1, 1) and hw == ((x[2] - k[0]) // s[0] + 1, (x[3] - k[1]) // s[1] + 1))
        if plain:
            return layers.MaxPool2d(k[0], s[0]), "max_pool2d (pool_softmax.cu)"
        return (Pool2d(spec.mode, k, s, pads, spec.dilations, ceil_mode=ceil,
                       count_include_pad=spec.count_include_pad), f"pool_any {spec.mode} (pool_pad.cu)")

    def _run_pool(self, spec, made, in_shapes, out_shape, alloc):
        pool, name = made
        return (lambda ins, out: pool(ins[0], out)), (lambda: name)

    def _make_globalaveragepool(self, spec, in_shapes):
        return layers.GlobalAvgPool()

    def _run_globalaveragepool(self, spec, pool, in_shapes, out_shape, alloc):
        flat = out_shape[:2]
        return (lambda ins, out: pool(ins[0], out.reshape(flat))), (lambda: "global_avg_pool (pool_softmax.cu)")

    def _make_globalmaxpool(self, spec, in_shapes):
        return Pool2d("max", in_shapes[0][2:])        # one window of the whole plane

    def _run_globalmaxpool(self, spec, pool, in_shapes, out_shape, alloc):
        shape = out_shape[:2] + (1, 1)
        return (lambda ins, out: pool(ins[0], out.reshape(shape))), (lambda: "pool_any max (pool_pad.cu)")

    _make_reducemax, _run_reducemax = _make_globalmaxpool, _run_globalmaxpool

    def _make_concat(self, spec: nodes.Concat, in_shapes):
        return ConcatCopy(spec.resolved_axis(len(in_shapes[0])))

    def _run_concat(self, spec, copy, in_shapes, out_shape, alloc):
        a = copy.axis
        offsets = list(np.cumsum([0] + [s[a] for s in in_shapes[:-1]]))

        def run(ins, out):
            for x, off in zip(ins, offsets):
                copy(x, out, int(off))
        return run, (lambda: f"concat_copy x{len(in_shapes)} (pool_pad.cu)")

    def _make_view(self, spec, in_shapes):
        return ConcatCopy(0)

    def _run_view(self, spec, copy, in_shapes, out_shape, alloc):
        # Only where the view's input is the plan's source (read in place from the caller): the
        # values are copied into the plan's buffer.  Elsewhere a view is a reshape and runs nothing.
        return (lambda ins, out: copy(ins[0].reshape(out_shape), out)), (lambda: "copy (concat_copy, pool_pad.cu)")

    def _make_softmax(self, spec: nodes.Softmax, in_shapes):
        return layers.Softmax()

    def _run_softmax(self, spec, sm, in_shapes, out_shape, alloc):
        rows = spec.rows(in_shapes[0])
        return ((lambda ins, out: sm(ins[0].reshape(rows), out.reshape(rows))),
                (lambda: f"{softmax_kernel(rows[1])} (pool_softmax.cu)"))

    def _make_layernorm(self, spec: nodes.LayerNorm, in_shapes):
        norm = spec.normalized(in_shapes[0])
        return LayerNorm(self._dev(spec.scale.reshape(norm)), self._dev(spec.bias.reshape(norm)), spec.eps)

    def _run_layernorm(self, spec, ln, in_shapes, out_shape, alloc):
        return (lambda ins, out: ln(ins[0], out)), (lambda: "layer_norm_rows (layer_norm.cu)")

    def _make_lrn(self, spec: nodes.LRN, in_shapes):
        if spec.pool:
            return layers.LRNMaxPool(*spec.pool, spec.radius, spec.bias, spec.alpha, spec.beta)
        return layers.LRN(spec.radius, spec.bias, spec.alpha, spec.beta)

    def _run_lrn(self, spec, lrn, in_shapes, out_shape, alloc):
        name = "lrn_max_pool (lrn.cu)" if spec.pool else "lrn_across_channels (lrn.cu)"
        return (lambda ins, out: lrn(ins[0], out)), (lambda: name)

    def _make_transpose(self, spec, in_shapes):
        return Permute(spec.resolved(len(in_shapes[0])), add=len(spec.inputs) == 2)

    def _run_transpose(self, spec, perm, in_shapes, out_shape, alloc):
        name = f"{perm.kernel(in_shapes[0])} (pool_pad.cu)"
        if perm.add:      # a skip connection added in the copy
            return (lambda ins, out: perm(ins[0], out, addend=ins[1])), (lambda: name)
        return (lambda ins, out: perm(ins[0], out)), (lambda: name)

    def _run_gather(self, spec, made, in_shapes, out_shape, alloc):
        # The indices of this batch size (graph.infer set them for it), on the device once per plan.
        x = tuple(in_shapes[0])
        axis, positions = spec.positions(x)
        launch = gather_axis(x, axis, positions, self.xp)
        return (lambda ins, out: launch(ins[0], out)), (lambda: "gather_axis (pool_pad.cu)")

    def _make_slice(self, spec, in_shapes):
        axis, offset, _ = spec.window(in_shapes[0])
        return SliceCopy(axis), offset

    def _run_slice(self, spec, made, in_shapes, out_shape, alloc):
        copy, offset = made
        return (lambda ins, out: copy(ins[0], out, offset)), (lambda: "slice_copy (pool_pad.cu)")

    _make_splitpart, _run_splitpart = _make_slice, _run_slice

    def _make_reducemean(self, spec, in_shapes):
        return layers.GlobalAvgPool()

    def _run_reducemean(self, spec, pool, in_shapes, out_shape, alloc):
        flat = out_shape[:2]
        return (lambda ins, out: pool(ins[0], out.reshape(flat))), (lambda: "global_avg_pool (pool_softmax.cu)")

    def _make_pad(self, spec: nodes.Pad, in_shapes):
        return Pad4(spec.before, spec.after, spec.value)

    def _run_pad(self, spec, pad, in_shapes, out_shape, alloc):
        return (lambda ins, out: pad(ins[0], out)), (lambda: "pad4 (pool_pad.cu)")


def _auto_name(choice: dict) -> str:
    """What labkit.conv2d's auto choice runs, in words."""
    family = choice.get("family", "?")
    files = {"implicit": "conv_implicit.cu", "depthwise": "depthwise_any.cu", "depthwise3x3": "depthwise.cu",
             "winograd": "conv_winograd.cu / conv_small.cu", "tuned": "conv_tuned.cu",
             "winograd_gemm": "conv_winograd_gemm.cu + gemm.cu"}
    detail = choice.get("kernel") or ""
    return f"auto: {family}{' ' + detail if detail else ''} ({files.get(family, family)})"
