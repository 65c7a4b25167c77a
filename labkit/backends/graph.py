"""A sequence of launches captured once as one CUDA graph and replayed: one call from Python runs
every kernel, with no host time between them.  On the CPU executor the same object runs the steps
in turn, so code that uses it runs everywhere.

    g = Graph([step1, step2, ...])     # each step a zero-argument callable that launches on the current stream
    g.launch()                         # replay (on the current stream); the steps' buffers hold the result

Capture requires that the steps allocate nothing and copy nothing from the host: their arrays must
exist before (a model's plan owns them), since the graph keeps their addresses.  The steps run once
before the capture, so every module is compiled and loaded and every plan made outside it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from . import current


class Graph:
    """The steps as one CUDA graph on a GPU; the steps themselves on the CPU executor."""

    def __init__(self, steps: Sequence[Callable[[], object]]):
        self.steps = list(steps)
        self.on_gpu = current() == "cuda"
        self._graph = None
        if self.on_gpu:
            import cupy
            for step in self.steps:          # compiles, loads and plans everything before the capture
                step()
            stream = cupy.cuda.Stream(non_blocking=True)
            with stream:
                stream.begin_capture()
                try:
                    for step in self.steps:
                        step()
                finally:
                    self._graph = stream.end_capture()
            self._stream = stream            # the graph was captured on it: keep it alive with the graph

    def launch(self, stream=None) -> None:
        """Run every step: one graph launch on ``stream`` (default: the current stream)."""
        if self._graph is None:
            for step in self.steps:
                step()
            return
        import cupy
        self._graph.launch(stream if stream is not None else cupy.cuda.get_current_stream())
