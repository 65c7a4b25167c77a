"""A network's forward pass for one batch size, prepared once: its buffers, its steps, and the whole
pass as one CUDA graph.  FashionNet and AlexNet build theirs with ``add``.

    plan = net.plan(N)
    plan.x[...] = images; plan.run(); probs = plan.out      # as one CUDA graph (eager on the CPU executor)
    probs = plan.eager(x)                                   # step by step, reading x where it is
    for name, fn in plan.steps: ...                         # each step alone (per-layer timing)

Every buffer (each step's output, the split-K workspaces) is allocated when the plan is made, and
poisoned with NaN: an element a step forgot to write shows up.  A step reads the previous step's
buffer, the first one the plan's source: ``x`` (the graph's input buffer), or the array ``eager``
is given, which is read in place (no copy).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..backends.graph import Graph
from ..checks import array_module


class PlannedModel:
    """A network that keeps one Plan per batch size: ``plan(N)`` makes it on first use (``_make_plan``,
    the subclass's), ``clear_plans()`` lets the memory go."""

    _plans: dict

    def plan(self, N: int) -> "Plan":
        """The forward pass of a batch of N: every buffer and workspace allocated (once per N), the
        steps in order writing into them (what a per-kernel breakdown times)."""
        p = self._plans.get(N)
        if p is None:
            p = self._plans[N] = self._make_plan(N)
        return p

    def new_plan(self, N: int) -> "Plan":
        """A plan of its own for a batch of N, not kept by the model: two streams that run the same
        batch size at once need two sets of buffers (labkit.pipeline makes one per stream)."""
        return self._make_plan(N)

    def replica(self) -> "PlannedModel":
        """The same network (same weights, same settings) made anew on the current device: its own
        device weights and plans (labkit.pipeline makes one per GPU)."""
        raise NotImplementedError(f"{type(self).__name__} does not say how to make a replica of itself")

    def clear_plans(self) -> None:
        """Forget every batch size's plan (its buffers and graph go back to the memory pool)."""
        self._plans.clear()

    def _make_plan(self, N: int) -> "Plan":
        raise NotImplementedError


class Plan:
    """Buffers and steps of one batch size: ``x`` (input buffer), ``buffers`` (step name -> output),
    ``steps`` [(name, fn)] in order, ``workspace`` (layer name -> split-K workspace or None)."""

    def __init__(self, N: int, input_shape: tuple, backend: str):
        self.N, self.backend = N, backend
        self._xp = array_module(backend)
        self.x = self._new((N,) + tuple(input_shape))
        self.source = self.x
        self.buffers: dict[str, object] = {}
        self.workspace: dict[str, object] = {}
        self.steps: list[tuple[str, Callable[[], object]]] = []
        self._last = None          # the buffer the next step reads; None: the plan's source
        self._graph: Graph | None = None

    def _new(self, shape):
        return self._xp.full(shape, np.nan, dtype=np.float32)

    def add_workspace(self, name: str, shape) -> object:
        """A buffer of split-K's partial sums for layer ``name`` (None where it needs none)."""
        ws = self.workspace[name] = None if shape is None else self._new(shape)
        return ws

    def add(self, name: str, out_shape: tuple, fn: Callable[[object, object], object], source=None):
        """Step ``name``: ``fn(src, out)`` writes a new buffer of ``out_shape`` from ``source`` (default:
        the last step's output, or the plan's input for the first step).  Returns the buffer."""
        out = self.buffers[name] = self._new(out_shape)
        src = source if source is not None else self._last
        if src is None:
            self.steps.append((name, lambda: fn(self.source, out)))
        else:
            self.steps.append((name, lambda: fn(src, out)))
        self._last = out
        return out

    @property
    def out(self):
        """The last step's output buffer (the network's result)."""
        return self._last

    def eager(self, x=None, *, stop: str | None = None):
        """The steps one by one, launched from Python, reading ``x`` (default: the input buffer);
        ``stop``: the name of a step to stop before.  Returns the last buffer written."""
        self.source = self.x if x is None else x
        last = self.x
        try:
            for name, fn in self.steps:
                if name == stop:
                    break
                fn()
                last = self.buffers[name]
        finally:
            self.source = self.x
        return last

    def run(self, stream=None):
        """The forward pass on ``x`` as one CUDA graph, captured on the first call (on the CPU
        executor, the steps one by one).  Returns the output buffer."""
        if self._graph is None:
            self._graph = Graph([fn for _name, fn in self.steps])
        self._graph.launch(stream)
        return self._last

    @property
    def activation_bytes(self) -> dict[str, int]:
        return {"input": int(self.x.nbytes), **{k: int(v.nbytes) for k, v in self.buffers.items()}}

    @property
    def workspace_bytes(self) -> dict[str, int]:
        return {k: (0 if v is None else int(v.nbytes)) for k, v in self.workspace.items()}
