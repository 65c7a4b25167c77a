"""The argument checks every op shares, and the error measure every check uses, in one place.

    check_array(x, "x", "NCHW", 4)            # place (GPU or host), dtype, rank, layout, or a clear error
    out = output(out, (N, M, Ho, Wo), "NCHW", inputs=(x, w))   # allocated, or the caller's, checked
    rel_error(y, ref)                         # ||y - ref|| / ||ref|| in float64
    rel_error(y, ref, terms)                  # ... / ||terms||: sums that may cancel

A prepared op checks a new input with ``fast_input`` (a type, a dtype and a flag: well under a
microsecond) and falls back on ``check_array`` only to say what is wrong.
"""
from __future__ import annotations

import numpy as np

from . import backends
from .errors import check_float, check_int  # noqa: F401  (the argument checks, here with the rest)

ACTIVATIONS: dict[str | None, int] = {None: 0, "tanh": 1, "relu": 2, "relu6": 3,   # the kernels' `int act`
                                      "gelu": 4, "gelu_tanh": 5}
# What most kernels implement; a kernel that also has ReLU6 (min(max(v, 0), 6): MobileNetV2) says so.
BASIC_ACTIVATIONS = (None, "tanh", "relu")
F32 = np.dtype(np.float32)


def is_cupy(a) -> bool:
    """Is ``a`` a CuPy array?  Without importing CuPy: on the CPU executor it may not be installed."""
    return type(a).__module__.startswith("cupy")


def to_numpy(a) -> np.ndarray:
    """``a`` as a NumPy array (copied from the GPU if it lives there)."""
    return a.get() if hasattr(a, "get") else np.asarray(a)


def rel_error(y, ref, terms=None) -> float:
    """||y - ref|| / ||ref||, in float64; NaN anywhere in y (an unwritten output) gives NaN.

    With ``terms`` (the same sums over the terms' absolute values: |a| @ |b| + |bias| for a GEMM),
    ||y - ref|| / ||terms||.  float32's rounding is bounded by the terms' size, not their sum's: a sum
    that cancels (one product all but undone by its bias) is right to 1e-7 of its terms yet may be
    1e-5 of itself from float64.  ReLU, ReLU6 and tanh move no two values further apart, so the bound
    holds after them too; a missing term or an unwritten element still fails."""
    y = to_numpy(y).astype(np.float64)
    scale = ref if terms is None else terms
    return float(np.linalg.norm(y - ref) / max(np.linalg.norm(scale), 1e-300))


_MODULES: dict[str, object] = {}


def array_module(backend: str):
    """cupy on the GPU backend, numpy on the CPU executor (``labkit.xp`` for a given backend)."""
    m = _MODULES.get(backend)
    if m is None:
        if backend == "cuda":
            import cupy as m
        else:
            m = np
        _MODULES[backend] = m
    return m


def array_type(backend: str) -> type:
    """cupy.ndarray on the GPU backend, numpy.ndarray on the CPU executor."""
    return array_module(backend).ndarray


def check_activation(activation, allowed: tuple = BASIC_ACTIVATIONS) -> int:
    """The kernels' code of an activation among ``allowed`` (default None, "tanh", "relu"); ValueError
    for anything else (a kernel handed a code it does not implement would skip the activation)."""
    if (activation is None or type(activation) is str) and activation in allowed:
        return ACTIVATIONS[activation]
    names = [repr(a) if a is not None else "None" for a in allowed]
    raise ValueError(f"activation must be {', '.join(names[:-1])} or {names[-1]}, got {activation!r}")


def check_array(a, name: str, layout: str, ndim: int, backend: str | None = None, xp=None,
                dtype_fix: str | None = None) -> None:
    """Refuse what a kernel would misread: wrong place, dtype, rank or memory layout."""
    backend = backend or backends.current()
    xp = xp or array_module(backend)
    if backend == "cuda":
        if isinstance(a, np.ndarray):
            raise TypeError(f"{name} is a NumPy array, but kernels run on the GPU: copy it to the GPU "
                            f"with cupy.asarray({name})")
        if not isinstance(a, xp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray, got {type(a).__name__}: "
                            f"cupy.asarray({name}, dtype=cupy.float32)")
    else:
        if is_cupy(a):
            raise TypeError(f"{name} is a CuPy array, but kernels run on the CPU executor: bring it "
                            f"back with cupy.asnumpy({name})")
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{name} must be a numpy.ndarray, got {type(a).__name__}: "
                            f"np.asarray({name}, dtype=np.float32)")
    if a.dtype != np.float32:
        fix = dtype_fix or f"{name}.astype(np.float32)"
        raise TypeError(f"{name} must be float32 {layout}, got {a.dtype}: {fix}")
    if a.ndim != ndim:
        hint = "; a single image is (1, C, H, W): add the batch axis with x[None]" \
            if name == "x" and a.ndim == 3 else ""
        raise ValueError(f"{name} must be {ndim}-D {layout}, got shape {tuple(a.shape)}{hint}")
    if a.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(a.shape)}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name} must be C-contiguous (the kernels index it as packed {layout}): "
                         f"pass {xp.__name__}.ascontiguousarray({name})")
    if backend == "cuda":
        import cupy
        here = cupy.cuda.Device().id
        if a.data.device_id != here:
            raise ValueError(f"{name} lives on GPU {a.data.device_id}, but kernels run on GPU {here}: "
                             f"run under `with cupy.cuda.Device({a.data.device_id}):`, or copy it over")


def check_bias(b, M: int, backend: str, xp=None) -> None:
    """A layer's bias: None, or float32 (M,) on the backend."""
    if b is not None:
        check_array(b, "b", "(M,)", 1, backend, xp)
        if tuple(b.shape) != (M,):
            raise ValueError(f"b must have shape ({M},), got {tuple(b.shape)}")


def check_conv_arguments(w, b, layer, residual, backend: str, xp=None) -> None:
    """A convolution layer's arguments, once, when it is made: w float32 (M, C/groups, KH, KW) of
    ``layer`` (a ``labkit.shapes.ConvLayer``), b (M,) or None, ``residual`` True or False."""
    check_array(w, "w", "(M, C/groups, KH, KW)", 4, backend, xp)
    want = (layer.M, layer.C // layer.groups) + tuple(layer.kernel_hw)
    if tuple(w.shape) != want:
        raise ValueError(f"w must have shape {want} for {layer.key}, got {tuple(w.shape)}")
    check_bias(b, layer.M, backend, xp)
    if not isinstance(residual, (bool, np.bool_)):
        raise TypeError(f"residual must be True or False, got {residual!r}")


def check_input(x, x_shape: tuple, layer: str, backend: str) -> None:
    """The slow path of a layer's input check (after ``fast_input`` said no): place, dtype, rank and
    layout of an NCHW x, then its (C, H, W) against the layer's ``x_shape``; ``layer`` names it."""
    check_array(x, "x", "NCHW", 4, backend)
    if tuple(x.shape[1:]) != tuple(x_shape):
        raise ValueError(f"x must be (N, {', '.join(map(str, x_shape))}) for {layer}, got {tuple(x.shape)}")


def fast_input(a, kind: type) -> bool:
    """The check of a prepared call: is ``a`` of ``kind``, float32 and C-contiguous?  (Its shape is
    the plan's key; its place is the plan's device.)  False sends the caller to ``check_array``."""
    return type(a) is kind and (a.dtype is F32 or a.dtype == F32) and a.flags.c_contiguous


def check_shape(a, name: str, want: tuple, what: str) -> None:
    """ValueError unless ``a.shape == want``; ``what`` names the axes (``"N, M, Ho, Wo"``)."""
    if tuple(a.shape) != tuple(want):
        raise ValueError(f"{name} must have shape {tuple(want)} ({what}), got {tuple(a.shape)}")


def _span(a) -> tuple[int, int]:
    """(first byte, end) of a C-contiguous array's memory.  A GPU address is unique among the process's
    devices and host memory (unified addressing), so spans of different places never overlap."""
    p = a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data.ptr
    return p, p + a.nbytes


def overlaps(a, b) -> bool:
    """Do two C-contiguous arrays share memory?"""
    a0, a1 = _span(a)
    b0, b1 = _span(b)
    return a0 < b1 and b0 < a1


def check_no_alias(out, inputs, name: str = "out") -> None:
    """ValueError if ``out`` shares memory with any input: the kernel would overwrite what it reads."""
    o0, o1 = _span(out)
    for i, a in enumerate(inputs):
        if a is not None:
            a0, a1 = _span(a)
            if a0 < o1 and o0 < a1:
                raise ValueError(f"{name} shares memory with input {i} of this call: the kernel would overwrite "
                                 f"values it still has to read. Pass a separate output array (or out=None)")


def output(out, shape: tuple, layout: str, inputs=(), *, backend: str):
    """The array an op writes: a new float32 array of ``shape`` when ``out`` is None, else ``out``,
    checked (place, dtype, layout, shape, writeable) and never overlapping an input."""
    xp = _MODULES.get(backend) or array_module(backend)
    if out is None:
        return xp.empty(shape, dtype=F32)
    if type(out) is not xp.ndarray or out.dtype is not F32 and out.dtype != F32:
        check_array(out, "out", layout, len(shape), backend, xp, dtype_fix=(
            f"allocate it with {xp.__name__}.empty({tuple(shape)}, dtype={xp.__name__}.float32)"))
    if out.shape != shape:
        check_array(out, "out", layout, len(shape), backend, xp)
        check_shape(out, "out", shape, layout)
    flags = out.flags
    if not flags.c_contiguous:
        check_array(out, "out", layout, len(shape), backend, xp)
    if xp is np and not flags.writeable:    # CuPy arrays are always writeable
        raise ValueError("out is read-only: pass a writeable array")
    check_no_alias(out, inputs)
    return out


def check_residual(residual, shape: tuple, has_residual: bool, kind: type, backend: str, layer: str) -> tuple:
    """The per-call residual of a layer that adds one (``has_residual``, fixed when it was made):
    ``(residual,)`` checked (place, dtype, layout, y's ``shape``), or ``()`` for a layer without one.
    ValueError if one is missing or given to a layer made without (``layer`` names the class)."""
    if not has_residual:
        if residual is not None:
            raise ValueError(f"this layer was made without residual=True: it has no residual to add "
                             f"(make it with {layer}(..., residual=True))")
        return ()
    if residual is None:
        raise ValueError(f"this layer adds a residual: pass residual= a float32 array of shape {shape}")
    if not (fast_input(residual, kind) and residual.shape == shape):
        check_array(residual, "residual", "NCHW", 4, backend)
        if tuple(residual.shape) != shape:
            raise ValueError(f"residual must have the output's shape {shape}, got {tuple(residual.shape)}")
    return (residual,)
