"""Helpers shared by the test modules."""
from __future__ import annotations


class FakeCupyArray:
    """Stands in for a cupy.ndarray where CuPy is not installed (labkit looks at the module name)."""


FakeCupyArray.__module__ = "cupy._core.core"


def with_changes(good, **changes):
    """A maker of arguments: ``good()``'s dict with each named entry replaced by ``f(args)``."""
    def make():
        args = good()
        for k, f in changes.items():
            args[k] = f(args)
        return args
    return make
