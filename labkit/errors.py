"""Every exception labkit raises of its own, in one place, and ``check_int`` and ``check_float``,
the checks of a number argument that every floor shares.

Each says what went wrong and how to fix it.  The classes derive from the built-in exception a
caller would expect (a bad value is a ValueError, a refused launch a RuntimeError), so
``except ValueError`` still catches a ConstantMemoryError.
"""
from __future__ import annotations

import numpy as np


def check_int(v, name: str, low: int = 1, high: int | None = None) -> int:
    """``v`` as an int if it is an integer (not a bool) from ``low`` to ``high``; else ValueError that
    names the argument: the one check of an integer argument, from the backends up."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < low or \
            (high is not None and v > high):
        bounds = ("a positive int" if low == 1 else f"an int >= {low}") if high is None else \
            f"an int from {low} to {high}"
        raise ValueError(f"{name} must be {bounds}, got {v!r}")
    return int(v)


def check_float(v, name: str, low: float = 0.0, *, above: bool = False) -> float:
    """``v`` as a float if it is a finite real number (not a bool) >= ``low`` (> ``low`` with ``above``);
    else ValueError.  NaN compares false with everything: a plain ``v < low`` would let it through."""
    number = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if not number or not np.isfinite(v) or v < low or (above and v == low):
        raise ValueError(f"{name} must be a finite number {'>' if above else '>='} {low}, got {v!r}")
    return float(v)


class BackendUnavailable(RuntimeError):
    """The requested backend cannot run on this machine."""


class KernelCompileError(RuntimeError):
    """The compiler (NVRTC, or the host compiler for the CPU executor) refused a kernel source."""


class UnsupportedOnCPU(RuntimeError):
    """The kernel uses something the CPU executor cannot model: it needs a GPU."""


class ConstantMemoryError(ValueError):
    """More than 64 KiB of __constant__ memory, or data that does not fit a constant symbol."""


class LaunchError(RuntimeError):
    """A launch was refused before it ran, or failed while running."""


class BarrierError(LaunchError):
    """The barrier check found a barrier that only part of a block reaches, or a deadlock."""


class KernelMemoryError(RuntimeError):
    """The memory check found an out-of-bounds or otherwise invalid access."""


class KernelRaceError(RuntimeError):
    """The race check found two threads' accesses to one location, at least one a write, that
    nothing orders (no barrier between them, not both atomic)."""


class WeightFileError(ValueError):
    """A weight file is missing, truncated, of the wrong layout, or holds something other than arrays."""


class OnnxImportError(WeightFileError):
    """An ONNX file labkit.import_onnx refuses: unreadable, unsafe (a size or a path it may not
    trust), or holding an op or attribute labkit cannot run (the error names the op and the node)."""


class IDXFormatError(ValueError):
    """The file is not a well-formed IDX file of the expected kind."""


class ArrayFileError(ValueError):
    """An .npy or .npz file is truncated or corrupt, holds a pickle, or declares arrays it cannot hold."""


class NotebookError(ValueError):
    """A file that cannot be read as a notebook (too big, not JSON, no list of cells)."""


class RegionError(ValueError):
    """A student's kernel file that cannot be graded: its regions (between the BEGIN and END lines)
    are missing, or hold what could reach outside the kernel's body."""


class ArchiveError(ValueError):
    """A student's archive refused (broken, truncated, forged, a bomb, a path leaving its folder), with
    the reason, naming the archive, for the gradebook."""


class PlainDataError(ValueError):
    """A value, or a message between a sandboxed solution and its check, that is not plain data (or is
    too big): the message says which part."""


class CannotCross(TypeError):
    """A check handed a student's function a value that cannot cross to the student's process."""


class RecordingError(ValueError):
    """Calls a student's function made on the grader's stand-ins (labkit.pipeline.recording) that the
    check refuses to replay: an operation, an array, a stream or an index no stand-in could record."""


class NotAccepted(ValueError):
    """What a student's function returned for the grader to compile (notebook 03's ``fix``) is not a
    kernel file it takes: not a str, too large, not UTF-8, or holding a NUL (the message says which)."""
