"""A network read from an ONNX file, with the built-in models' interface.

    model = import_onnx("resnet18.onnx")      # every node checked, every layer made: no labkit kernel run yet
    logits = model(x)                         # eager: x (N, C, H, W) on the backend, step by step
    plan = model.plan(N); plan.x[...] = x; plan.run(); plan.out    # the whole pass as one CUDA graph
    print(model.describe(N))                  # per node: op, shapes, kernel, FLOPs, bytes (time=True: ms, % of floor)
    step = model.step("layer3.0.conv1")       # one step: its op, inputs, weights (BN folded), geometry
    model.replace("layer3.0.conv1", my_conv)  # that step run by my_conv(*inputs, out) instead; restore() undoes it

The output is what the graph's output is (logits, for a classifier exported without its softmax).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import backends
from ...checks import check_array, fast_input
from ...errors import OnnxImportError
from ..plan import Plan, PlannedModel
from .graph import as_float32, free_batch, fuse, infer, is_host, lower
from .layers import Kernels
from .nodes import Conv, ConvTranspose, Gemm, check_finite, numel
from .reader import MAX_BYTES, OnnxGraph, read_graph

__all__ = ["OnnxModel", "GraphPlan", "Table", "Step", "import_onnx", "INDEX_LIMIT"]

INDEX_LIMIT = 2**31 - 1     # values of one tensor the kernels index with int


class GraphPlan(Plan):
    """A Plan whose steps form a graph: a step may read any earlier buffer (or the source), and the
    output is the graph's output buffer, not necessarily the last step's."""

    def __init__(self, N: int, input_shape: tuple, backend: str):
        super().__init__(N, input_shape, backend)
        self.output = None

    def buffer(self, name: str, shape: tuple):
        """A new buffer (NaN-poisoned) that step ``name`` writes."""
        b = self.buffers[name] = self._new(shape)
        return b

    @property
    def out(self):
        return self.output

    def eager(self, x=None, *, stop: str | None = None):
        last = super().eager(x, stop=stop)
        return self.output if stop is None else last

    def run(self, stream=None):
        super().run(stream)
        return self.output


class Table(list):
    """describe()'s rows (plain dicts); printed, a table."""

    COLUMNS = (("node", 28), ("op", 38), ("output", 18), ("kernel", 46), ("MFLOP", 9), ("MB", 7))

    def __str__(self) -> str:
        timed = bool(self) and "ms" in self[0]
        cols = self.COLUMNS + ((("ms", 8), ("% floor", 8)) if timed else ())
        lines = ["  ".join(f"{c:<{w}}" for c, w in cols)]
        for r in self:
            cells = [r["node"], r["op"], "x".join(map(str, r["output"])), r["kernel"], f"{r['flops'] / 1e6:.2f}",
                     f"{r['bytes'] / 1e6:.2f}"]
            if timed:
                cells += [f"{r['ms']:.4f}" if r["ms"] is not None else "-",
                          f"{r['percent_of_floor']:.1f}" if r["percent_of_floor"] is not None else "-"]
            lines.append("  ".join(f"{str(c)[:w]:<{w}}" for c, (_, w) in zip(cells, cols)))
        return "\n".join(lines)


@dataclass(frozen=True)
class Step:
    """One step of an imported network, as its kernel runs it (``OnnxModel.step``).

    ``name``: the step's (describe's "node" column); ``op``: its op with what was fused into it;
    ``nodes``: the file's nodes it runs; ``inputs``: the values it reads, in the order a replacement
    receives them (for a convolution with a fused residual: x, then the residual); ``input_shapes``
    and ``output_shape`` at the batch asked for.  For a Conv, ConvTranspose or Gemm: ``weight`` and
    ``bias`` in float32 as the kernels read them, batch normalization folded in (``bias`` never
    None: zeros where the file has none; a Conv's weight (M, C/groups, KH, KW), a ConvTranspose's
    (C, M/groups, KH, KW), a Gemm's (in, out) with y = x @ weight + bias); ``activation``: what the epilogue applies after the sum
    and the residual (None, "relu", "relu6" or "tanh").  For a Conv also ``stride``, ``pads``
    (top, left, bottom, right), ``dilation`` and ``groups``."""
    name: str
    op: str
    nodes: tuple
    inputs: tuple
    input_shapes: tuple
    output_shape: tuple
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None
    activation: str | None = None
    residual: bool = False
    stride: tuple | None = None
    pads: tuple | None = None
    dilation: tuple | None = None
    groups: int | None = None


class OnnxModel(PlannedModel):
    """The network of an ONNX graph on labkit's kernels (see the module docstring).

    ``input_shape``: (C, H, W) of one input, where the file leaves any of them open.  The batch
    size is whatever x has (or plan(N) is given); every other size follows from the input's.
    """

    def __init__(self, graph: OnnxGraph, *, input_shape: tuple | None = None):
        self.graph = graph
        self.backend = backends.current()
        self._kind = backends.xp().ndarray
        dims = graph.input_dims[1:]
        if input_shape is not None:
            input_shape = tuple(int(v) for v in input_shape)
            if len(input_shape) != len(dims) and dims:
                raise OnnxImportError(f"{graph.path}: input_shape {input_shape} for an input of rank {len(dims) + 1}")
            fixed = [d for d, v in zip(dims, input_shape) if isinstance(d, int) and d != v]
            if fixed:
                raise OnnxImportError(f"{graph.path}: input_shape {input_shape} contradicts the file's input dims "
                                      f"{graph.input_dims}")
        elif not dims or not all(isinstance(d, int) and d > 0 for d in dims):
            raise OnnxImportError(f"{graph.path}: the input's dims {graph.input_dims} leave sizes open: pass "
                                  "input_shape=(C, H, W)")
        self.input_shape = input_shape if input_shape is not None else tuple(dims)
        specs, consts = lower(graph)
        self._consts = consts
        batch = graph.input_dims[0] if graph.input_dims else None
        if isinstance(batch, int) and batch > 0:
            free_batch(specs, infer(specs, consts, graph.input_name, (batch,) + self.input_shape), batch)
        shapes = infer(specs, consts, graph.input_name, (1,) + self.input_shape)
        self.specs = fuse(specs, consts, shapes, graph.output_name)
        shapes = infer(self.specs, consts, graph.input_name, (1,) + self.input_shape)
        # Sizes the file declares decide what a plan allocates: one image's values past the kernels'
        # 32-bit indices are refused here, before anything is allocated.
        big = next(((k, v) for k, v in shapes.items() if numel(v) > INDEX_LIMIT), None)
        if big is not None:
            raise OnnxImportError(f"{graph.path}: value {big[0]!r} of one image has shape {big[1]} "
                                  f"({numel(big[1]):,} values), over the kernels' 32-bit indices: refused")
        self.output_shape = shapes[graph.output_name][1:]
        for s in self.specs:
            check_finite(s)
        self.kernels = Kernels()
        xp = backends.xp()
        read = {v for s in self.specs if not is_host(s) for v in s.inputs}
        self._dev_consts = {k: xp.asarray(as_float32(v)) for k, v in consts.items() if k in read}
        for s in self.specs:        # every layer made now: what cannot run is refused before any launch
            if not s.view and not is_host(s):
                self.kernels.prepare(s, [shapes[v] for v in s.inputs])
        self._plans: dict[int, GraphPlan] = {}
        self._replaced: dict[str, Callable] = {}

    def replica(self) -> "OnnxModel":
        twin = OnnxModel(self.graph, input_shape=self.input_shape)
        twin._replaced = dict(self._replaced)
        return twin

    # --- one step, and running it with a kernel of one's own -------------------------------------
    def _spec(self, name: str):
        """The spec of step ``name``; ValueError, in words, for a name that is no step."""
        if not isinstance(name, str):
            raise TypeError(f"a step is named by a str (describe()'s node column), got {type(name).__name__}")
        for s in self.specs:
            if s.name == name:
                return s
        for s in self.specs:
            if name in s.names:
                raise ValueError(f"node {name!r} was fused into step {s.name!r} ({s.op}): name that step")
        steps = [s.name for s in self.specs if not s.view and not is_host(s)]
        raise ValueError(f"no step named {name!r}; the steps are {', '.join(steps[:8])}"
                         f"{', ...' if len(steps) > 8 else ''} (describe()'s node column)")

    def step(self, name: str, N: int = 1) -> Step:
        """Step ``name`` as its kernel runs it (see ``Step``), its shapes at a batch of N."""
        s = self._spec(name)
        shapes = self.shapes(N)
        info = dict(name=s.name, op=s.op, nodes=tuple(s.names), inputs=tuple(s.inputs),
                    input_shapes=tuple(shapes[v] for v in s.inputs), output_shape=shapes[s.output])
        if isinstance(s, (Conv, ConvTranspose, Gemm)):
            # Conv (M, C/g, KH, KW); ConvTranspose (C, M/g, KH, KW); Gemm (in, out): y = x @ w + b
            out_channels = {Conv: s.w.shape[0], ConvTranspose: s.w.shape[1] * getattr(s, "group", 1),
                            Gemm: s.w.shape[-1]}[type(s)]
            bias = np.zeros(out_channels) if s.b is None else s.b
            info.update(weight=as_float32(s.w), bias=as_float32(bias),
                        activation=None if s.activation is None else s.activation[0],
                        residual=getattr(s, "residual", None) is not None)
        if isinstance(s, Conv):
            pads, _ = s.geometry(shapes[s.inputs[0]])
            info.update(stride=tuple(s.strides), pads=tuple(pads), dilation=tuple(s.dilations), groups=s.group)
        return Step(**info)

    def replace(self, name: str, fn: Callable) -> None:
        """Run step ``name`` with ``fn(*inputs, out)`` instead of labkit's kernel: ``inputs`` the step's
        input arrays on the backend (``step(name).inputs``, in that order), ``out`` the output buffer it
        must fill, of ``step(name, N).output_shape``, poisoned with NaN when a plan is made.  It does the
        whole step: what was fused into it too (``step(name)``'s op: batch normalization folded into the
        weights it gives, the activation, the residual).  Plans made before are dropped: the next call
        or plan uses ``fn``, eager and in a CUDA graph alike (so ``fn`` must launch on the current
        stream and allocate nothing for a graph to capture it)."""
        s = self._spec(name)
        if s.view or is_host(s):
            raise ValueError(f"step {name!r} ({s.op}) runs no kernel: there is nothing to replace")
        if not callable(fn):
            raise TypeError(f"fn must be callable as fn(*inputs, out), got {type(fn).__name__}")
        self._replaced[s.name] = fn
        self.clear_plans()

    def restore(self, name: str) -> None:
        """Step ``name`` run by labkit's own kernel again (after ``replace``)."""
        s = self._spec(name)
        if self._replaced.pop(s.name, None) is None:
            raise ValueError(f"step {name!r} was not replaced")
        self.clear_plans()

    def replaced(self) -> dict:
        """{step name: the function that runs it} of the steps ``replace`` gave a function."""
        return dict(self._replaced)

    def _kernel_of(self, s, ins, out, alloc):
        """(run(inputs, out), kernel()) of spec s: labkit's, or the function replace() gave it."""
        fn = self._replaced.get(s.name)
        if fn is None:
            return self.kernels.runner(s, ins, out, alloc)
        return (lambda inputs, o: fn(*inputs, o)), (lambda: f"replaced: {getattr(fn, '__name__', repr(fn))}")

    def shapes(self, N: int) -> dict:
        """{value name: shape} at a batch of N."""
        return infer(self.specs, self._consts, self.graph.input_name, (N,) + self.input_shape)

    def _make_plan(self, N: int) -> GraphPlan:
        p = GraphPlan(N, self.input_shape, self.backend)
        shapes = self.shapes(N)
        source = object()                     # stands for the plan's source: x, or what eager() is given
        values: dict = {self.graph.input_name: source, **self._dev_consts}
        for s in self.specs:
            if is_host(s):
                continue
            ins = [values[v] for v in s.inputs]
            out_shape = shapes[s.output]
            if s.view and not any(a is source for a in ins):
                values[s.output] = ins[0].reshape(out_shape)     # a view: no step, no kernel
                continue
            in_shapes = [shapes[v] for v in s.inputs]

            def alloc(tag, shape, name=s.name):
                return p.add_workspace(f"{name}: {tag}", shape)
            run, _kernel = self._kernel_of(s, in_shapes, out_shape, alloc)
            out = values[s.output] = p.buffer(s.name, out_shape)
            p.steps.append((s.name, _step(run, ins, out, source, p)))
        p.output = values[self.graph.output_name]
        if p.output is source:
            raise OnnxImportError(f"{self.graph.path}: the graph's output is its input: there is nothing to run")
        return p

    def _check(self, x) -> int:
        if not (fast_input(x, self._kind) and x.shape[1:] == self.input_shape):
            check_array(x, "x", "NCHW", len(self.input_shape) + 1, self.backend)
            if tuple(x.shape[1:]) != self.input_shape:
                raise ValueError(f"x must be (N, {', '.join(map(str, self.input_shape))}) for this network, got "
                                 f"{tuple(x.shape)}")
        if not x.flags.c_contiguous:
            raise ValueError("x must be C-contiguous")
        return int(x.shape[0])

    def __call__(self, x):
        """The graph's output for float32 x (N, C, H, W) on the backend, step by step.  The array is
        the plan's, overwritten by the next call of the same batch size: copy it to keep it."""
        return self.plan(self._check(x)).eager(x)

    logits = __call__

    def describe(self, N: int = 1, *, time: bool = False, repeat: int = 10) -> Table:
        """One row per step: node, op (with what was fused into it), nodes (the names of every node it
        runs), input and output shapes, the kernel chosen, FLOPs, bytes (inputs, weights and output,
        each once).  ``time``: each step's median time (labkit.measure.breakdown) and its percentage
        of the roofline floor.  A convolution's FLOPs are the direct method's, whichever kernel runs
        it: a Winograd step can pass 100%, having multiplied 2.25x less."""
        p = self.plan(N)
        shapes = self.shapes(N)
        rows = Table()
        for s in self.specs:
            ins = [shapes[v] for v in s.inputs]
            out = shapes[s.output]
            has_step = s.name in p.buffers
            if is_host(s):
                kernel = "(shape arithmetic on the host)"
            elif has_step or not s.view:
                kernel = self._kernel_of(s, ins, out, lambda tag, shape: None)[1]()
            else:
                kernel = "(view: no kernel)"
            # What the step's kernel reads and writes once each; a view or shape arithmetic moves nothing.
            moves = kernel not in ("(shape arithmetic on the host)", "(view: no kernel)")
            nbytes = 4 * (sum(numel(v) for v in ins) + numel(out) + s.weight_count()) if moves else 0
            rows.append({"node": s.name, "op": s.op, "nodes": list(s.names), "inputs": [tuple(v) for v in ins],
                         "output": tuple(out), "kernel": kernel, "flops": int(s.flops(ins, out)),
                         "bytes": int(nbytes)})
        if time:
            _add_times(rows, p, repeat)
        return rows


def _step(run: Callable, ins: list, out, source, p: GraphPlan) -> Callable[[], None]:
    """The zero-argument step of a plan: ``run`` on its inputs, the source read when it is called."""
    if not any(a is source for a in ins):
        return lambda: run(ins, out)
    where = [i for i, a in enumerate(ins) if a is source]

    def step():
        now = list(ins)
        for i in where:
            now[i] = p.source
        run(now, out)
    return step


def _add_times(rows: Table, p: GraphPlan, repeat: int) -> None:
    from ...device_query import device
    from ...measure.breakdown import breakdown
    from ...measure.roofline import Cost, percent_of_floor
    bd = breakdown([(name, "kernel", fn) for name, fn in p.steps], repeat=repeat)
    ms = {part.name: part.median_ms for part in bd.parts}
    try:
        ceilings = device().ceilings()
    except Exception:      # no measured ceilings (the CPU executor): times without floors
        ceilings = None
    for r in rows:
        r["ms"] = ms.get(r["node"])
        r["percent_of_floor"] = (percent_of_floor(r["ms"], Cost(r["flops"], r["bytes"], r["output"]), ceilings)
                                 if ceilings is not None and r["ms"] else None)


def import_onnx(path: str | os.PathLike, *, input_shape: tuple | None = None, max_bytes: int = MAX_BYTES) -> OnnxModel:
    """The network in an ONNX file on labkit's kernels: read safely (reader.read_graph), every node
    checked, its layers made; OnnxImportError naming the node for anything labkit cannot run,
    before any kernel is launched."""
    return OnnxModel(read_graph(path, max_bytes=max_bytes), input_shape=input_shape)
