"""Runs of one module's ``__constant__`` float array, handed out to the layers that share the module.

    slots = slots_of(module, "dw_bias")
    at = slots.take(b_host, owner=layer)      # the run's first index, or None when none is free
    ...                                        # the kernel reads dw_bias[at + c]

A kernel module is compiled once per set of compile-time parameters and shared by every layer of
that shape (labkit.loader caches it), but constant memory belongs to the module: two layers that
each uploaded their bias to the start of the array would overwrite each other.  So each layer takes
a run of its own, uploaded once when the layer is prepared; the run is given back when the layer
is garbage-collected.  The runs are first-fit in a host copy of the whole array, which is uploaded
whole after each change (a prepare-time cost: the array is a few KiB, and a launch never waits on
it).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..loader import constant_nbytes, set_constant

__all__ = ["ConstantSlots", "slots_of"]

_LOCK = threading.Lock()
_SLOTS: dict[tuple[int, str], "ConstantSlots"] = {}


class ConstantSlots:
    """First-fit runs of ``module``'s __constant__ float array ``name``."""

    def __init__(self, module, name: str):
        self.module, self.name = module, name
        nbytes = constant_nbytes(module, name)
        self.host = np.zeros(nbytes // 4, dtype=np.float32)
        self.free = [(0, self.host.size)]          # (start, length), sorted, never adjacent
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self.host.size

    def free_floats(self) -> int:
        return sum(n for _, n in self.free)

    def take(self, values: np.ndarray, owner) -> int | None:
        """Upload float32 ``values`` into a free run; its start, held until ``owner`` is collected.
        None (nothing uploaded) when no run is long enough."""
        values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
        n = values.size
        with self._lock:
            for i, (start, length) in enumerate(self.free):
                if length >= n:
                    self.free[i:i + 1] = [(start + n, length - n)] if length > n else []
                    break
            else:
                return None
            self.host[start:start + n] = values
            set_constant(self.module, self.name, self.host)
        weakref.finalize(owner, self._give_back, start, n)
        return start

    def _give_back(self, start: int, n: int) -> None:
        with self._lock:
            runs = sorted(self.free + [(start, n)])
            merged = [runs[0]]
            for s, length in runs[1:]:
                last_s, last_n = merged[-1]
                if last_s + last_n == s:
                    merged[-1] = (last_s, last_n + length)
                else:
                    merged.append((s, length))
            self.free = merged


def slots_of(module, name: str) -> ConstantSlots:
    """The one ConstantSlots of ``module``'s array ``name`` (made on first use)."""
    key = (id(module), name)
    with _LOCK:
        slots = _SLOTS.get(key)
        if slots is None or slots.module is not module:
            slots = _SLOTS[key] = ConstantSlots(module, name)
        return slots
