"""A network read from an ONNX file, with the built-in models' interface.

    model = import_onnx("resnet18.onnx")      # every node checked, every layer made: no labkit kernel run yet
    logits = model(x)                         # eager: x (N, C, H, W) on the backend, step by step
    plan = model.plan(N); plan.x[...] = x; plan.run(); plan.out    # the whole pass as one CUDA graph
    print(model.describe(N))                  # per node: op, shapes, kernel, FLOPs, bytes (time=True: ms, % of floor)

The output is what the graph's output is (logits, for a classifier exported without its softmax).
"""
from __future__ import annotations

import os
from typing import Callable

from ... import backends
from ...checks import check_array, fast_input
from ...errors import OnnxImportError
from ..plan import Plan, PlannedModel
from .graph import as_float32, free_batch, fuse, infer, is_host, lower
from .layers import Kernels
from .nodes import check_finite, numel
from .reader import MAX_BYTES, OnnxGraph, read_graph

__all__ = ["OnnxModel", "GraphPlan", "Table", "import_onnx", "INDEX_LIMIT"]

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

    COLUMNS = (("node", 28), ("op", 30), ("output", 18), ("kernel", 46), ("MFLOP", 9), ("MB", 7))

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

    def replica(self) -> "OnnxModel":
        return OnnxModel(self.graph, input_shape=self.input_shape)

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
            run, _kernel = self.kernels.runner(s, in_shapes, out_shape, alloc)
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
        runs), input and output shapes, the kernel chosen, FLOPs, bytes (inputs, weights and output, each once).  ``time``: each step's
        median time (labkit.measure.breakdown) and its percentage of the roofline floor."""
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
                kernel = self.kernels.runner(s, ins, out, lambda tag, shape: None)[1]()
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
