"""A student's function that queues work on live objects (a model's plan, CUDA streams), run in the
student's sandbox on stand-ins that record its calls as plain data, the calls then replayed on the
real objects by the check, in a process that runs nothing of the student's.

    calls = record_enqueue(my_enqueue, ns, jobs)          # the student's side (run_cells --serve)
    replay_enqueue(calls[i], plan, x, out, stream)        # the check's side (labkit.ladder.streams)

Notebook 09's ``my_enqueue(plan, x, out, a, b, stream)`` queues one sub-batch: ``copy_in(plan.x, x[a:b],
stream)``, ``plan.run(stream)``, ``copy_out(out[a:b], plan.out, stream)``.  On the stand-ins ``plan.x``,
``plan.out``, ``x`` and ``out`` are arrays without data (shape, dtype, slicing by ints and slices),
``plan.run`` and ``plan.eager`` record themselves, the stream is a token, and ``copy_in`` / ``copy_out``
(as the notebook imported them, and labkit.pipeline's) record their arguments.  What comes back is a
list of calls per sub-batch, each checked here before anything of it is used: a call the replay does
not know, an array it cannot name or an index that is neither an int nor a slice of ints refuses the
whole answer.  Reading the stand-ins' values is not possible: a function that needs them (not the
exercise's) gets a TypeError saying so.
"""
from __future__ import annotations

import numpy as np

from ..errors import RecordingError

__all__ = ["record_enqueue", "replay_enqueue", "RecordingError", "RECORDERS"]

ARRAYS = ("plan.x", "plan.out", "x", "out")
MAX_CALLS = 64                 # per sub-batch: the exercise makes three


class _Flags:
    c_contiguous = True


class _Array:
    """An array without data: its name among ARRAYS, the indices applied to it, its shape and dtype."""

    def __init__(self, name: str, shape, dtype, index=()):
        self._name, self._index = name, tuple(index)
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.flags = _Flags()

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        view = np.empty(self.shape, dtype=np.bool_)[key]        # the shape numpy gives, bounds checked
        plain = []
        for k in keys:
            if isinstance(k, slice):
                plain.append({"slice": [None if v is None else int(v) for v in (k.start, k.stop, k.step)]})
            elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
                plain.append({"int": int(k)})
            else:
                raise TypeError(f"{self._name}[...]: the check records indexing by ints and slices only, "
                                f"got {type(k).__name__}")
        return _Array(self._name, view.shape, self.dtype, self._index + (plain,))

    def _ref(self) -> dict:
        return {"array": self._name, "index": [list(i) for i in self._index]}

    def _no_values(self, *a, **k):
        raise TypeError(f"{self._name}: its values are not here (the check records which copies and runs "
                        "your function queues, then makes them itself)")

    for _op in ("__array__", "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
                "__rtruediv__", "__neg__", "__float__", "__int__", "__bool__", "__eq__", "__lt__", "__gt__",
                "__setitem__", "copy", "sum", "mean", "astype", "reshape", "tolist"):
        locals()[_op] = _no_values
    del _op
    __hash__ = object.__hash__

    def __repr__(self):
        return f"<{self._name}{''.join('[...]' for _ in self._index)}: {self.dtype}{self.shape}, recorded>"


class _Stream:
    def __repr__(self):
        return "<stream, recorded>"


class _Plan:
    def __init__(self, calls: list, x_shape, out_shape):
        self._calls = calls
        self.x = _Array("plan.x", x_shape, np.float32)
        self.out = _Array("plan.out", out_shape, np.float32)

    def run(self, stream=None):
        self._calls.append(["run", _stream_ref(stream)])
        return self.out

    def eager(self, x=None, **kw):
        if x is not None or kw:
            raise TypeError("plan.eager(): the check records eager() without arguments only")
        self._calls.append(["eager"])
        return self.out


def _stream_ref(stream) -> str | None:
    if stream is None:
        return None
    if isinstance(stream, _Stream):
        return "stream"
    raise TypeError(f"the stream argument must be the stream your function was given (or None), got "
                    f"{type(stream).__name__}")


def _array_ref(a, what: str) -> dict:
    if not isinstance(a, _Array):
        raise TypeError(f"{what}: the check records copies between plan.x, plan.out, x and out (and slices "
                        f"of them) only, got {type(a).__name__}")
    return a._ref()


def _recorder(calls: list, op: str):
    def copy(dst, src, stream=None):
        calls.append([op, _array_ref(dst, f"{op}'s first argument"), _array_ref(src, f"{op}'s second argument"),
                      _stream_ref(stream)])
    copy.__name__ = op
    return copy


def record_enqueue(fn, ns: dict, jobs: list) -> list:
    """The student's side: for each job ``{"a", "b", "x_shape", "out_shape", "plan_x_shape",
    "plan_out_shape"}`` (plain data from the check), ``fn(plan, x, out, a, b, stream)`` on stand-ins;
    the calls it made, one list per job.  ``copy_in`` and ``copy_out`` record while it runs, in the
    notebook's namespace ``ns`` and in labkit.pipeline."""
    from .. import pipeline
    from . import host_memory
    real = {"copy_in": pipeline.copy_in, "copy_out": pipeline.copy_out}
    out = []
    for job in jobs:
        calls: list = []
        fakes = {op: _recorder(calls, op) for op in real}
        saved_ns = {k: v for k, v in ns.items() if any(v is r for r in real.values())}
        try:
            for k, v in saved_ns.items():
                ns[k] = fakes["copy_in"] if v is real["copy_in"] else fakes["copy_out"]
            for mod in (pipeline, host_memory):
                for op in real:
                    setattr(mod, op, fakes[op])
            plan = _Plan(calls, job["plan_x_shape"], job["plan_out_shape"])
            fn(plan, _Array("x", job["x_shape"], np.float32), _Array("out", job["out_shape"], np.float32),
               int(job["a"]), int(job["b"]), _Stream())
        finally:
            ns.update(saved_ns)
            for mod in (pipeline, host_memory):
                for op, f in real.items():
                    setattr(mod, op, f)
        out.append(calls[:MAX_CALLS + 1])
    return out


RECORDERS = {"enqueue": record_enqueue}


def _index(index) -> tuple:
    if not isinstance(index, list) or len(index) > 4:
        raise RecordingError("an array's indices are not a short list")
    keys = []
    for step in index:
        if not isinstance(step, list) or len(step) > 4:
            raise RecordingError("an index is not a short list")
        key = []
        for k in step:
            if not isinstance(k, dict) or len(k) != 1:
                raise RecordingError("an index is neither an int nor a slice")
            if "int" in k and type(k["int"]) is int:
                key.append(k["int"])
            elif "slice" in k and isinstance(k["slice"], list) and len(k["slice"]) == 3 and \
                    all(v is None or type(v) is int for v in k["slice"]):
                key.append(slice(*k["slice"]))
            else:
                raise RecordingError("an index is neither an int nor a slice of ints")
        keys.append(tuple(key))
    return tuple(keys)


def _resolve(ref, arrays: dict):
    if not isinstance(ref, dict) or set(ref) != {"array", "index"} or ref["array"] not in arrays:
        raise RecordingError(f"a copy names an array the check does not know: {str(ref)[:80]}")
    a = arrays[ref["array"]]
    for key in _index(ref["index"]):
        a = a[key]
    return a


def replay_enqueue(calls, plan, x, out, stream) -> None:
    """The check's side: the recorded ``calls`` of one sub-batch made on the real plan, arrays and
    stream, in order, with labkit.pipeline's own copy_in / copy_out.  RecordingError where the record
    is not one the stand-ins could have made."""
    from .host_memory import copy_in, copy_out
    if not isinstance(calls, list) or len(calls) > MAX_CALLS:
        raise RecordingError(f"not a list of at most {MAX_CALLS} calls")
    arrays = {"plan.x": plan.x, "plan.out": plan.out, "x": x, "out": out}

    def the_stream(ref):
        if ref is None:
            return None
        if ref == "stream":
            return stream
        raise RecordingError(f"a call names a stream the check does not know: {str(ref)[:40]}")

    for call in calls:
        if not isinstance(call, list) or not call or not isinstance(call[0], str):
            raise RecordingError("a recorded call is not a list naming its operation")
        op = call[0]
        if op in ("copy_in", "copy_out") and len(call) == 4:
            (copy_in if op == "copy_in" else copy_out)(_resolve(call[1], arrays), _resolve(call[2], arrays),
                                                       the_stream(call[3]))
        elif op == "run" and len(call) == 2:
            plan.run(the_stream(call[1]))
        elif op == "eager" and len(call) == 1:
            plan.eager()
        else:
            raise RecordingError(f"a call the check does not know: {str(call)[:80]}")
