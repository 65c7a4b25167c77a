"""A check's verdict in words: ``Verdict`` (ok, and what a student reads) and ``describe_mismatch``
(which outputs are wrong: never written or other values, edge or interior, the first few, the largest
error).  The kernel exercises' checks and ``ladder.check`` return one.

``require`` is what a notebook's check cell calls: it prints its words, as ``print`` does, where the
check passes, and raises ``CheckFailed`` (an AssertionError) with the same words where it does not,
so a wrong answer fails its cell: nbgrader gives a check cell that raises no points, and one that
only printed ``False`` all of them.

An exercise a student has not answered yet still holds the student copy's placeholder, `# YOUR CODE
HERE` and `raise NotImplementedError()`: its check cell, run in a notebook, says "not attempted" (the
exercise's name, and where to write it) instead of showing a traceback through the check.  Importing
this module in an IPython kernel registers that report (``report_unanswered_exercises``); the check
cells, tagged ``raises-exception``, still fail, and Run All goes on to the next one."""
from __future__ import annotations

import linecache
import sys
import traceback
from dataclasses import dataclass

import numpy as np

__all__ = ["Verdict", "describe_mismatch", "CheckFailed", "require", "not_attempted", "report_unanswered_exercises"]

PLACEHOLDER = ("# YOUR CODE HERE", "raise NotImplementedError()")     # labkit.course.student_copy writes it


@dataclass
class Verdict:
    """``ok``: the verdict; ``message``: what a student reads (what is wrong, in words); inside
    ``timed()``, ``ms`` (the kernel's median time on the check's last case) and ``timed_case`` (that
    case, in words)."""
    ok: bool
    message: str
    ms: float | None = None
    timed_case: str | None = None

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        # "True" where all is well (a notebook prints "... matches reference: True"), else the words.
        return "True" if self.ok else f"False: {self.message}"


class CheckFailed(AssertionError):
    """A check cell's verdict on a wrong answer: its message is what the cell prints on a right one,
    with ``False`` (or a failed ``Verdict``'s words) where ``True`` would stand.  IPython shows the
    message alone, without the traceback (whose frames are the check's, not the student's code)."""

    def _render_traceback_(self) -> list[str]:
        return f"{type(self).__name__}: {self}".splitlines()


def _truth(word) -> bool | None:
    """A word's truth value where it is one (a bool, NumPy's too, a 0-d boolean array of NumPy or
    CuPy, or a Verdict), else None."""
    if isinstance(word, Verdict):
        return word.ok
    if isinstance(word, (bool, np.bool_)):
        return bool(word)
    if getattr(word, "shape", None) == () and getattr(word, "dtype", None) == np.bool_:
        return bool(word)
    return None


def require(*words, ok: bool | None = None) -> None:
    """A check cell's last word: print ``words`` as ``print`` does (a ``Verdict`` as its message) where
    the check passes, else raise ``CheckFailed`` with the same text.  The check passes where every
    truth value among ``words`` (a bool, NumPy's too, a 0-d boolean array, or a Verdict) is true, and
    ``ok`` too where it is given; without ``ok`` there must be one among the words.

        require("naive_grid matches labkit:", ok)    # naive_grid matches labkit: True
        require(verdict)                             # its message; a failed one's words raised
        require("my_enqueue:", result["message"], ok=result["ok"])
    """
    truths = [t for t in map(_truth, words) if t is not None]
    if ok is None and not truths:
        raise TypeError("require() needs ok= or a truth value among its words (a bool, a 0-d boolean array "
                        "or a Verdict)")
    passed = all(truths) and (ok is None or bool(ok))
    text = " ".join(w.message if isinstance(w, Verdict) else str(w) for w in words)
    if not passed:
        raise CheckFailed(text)
    print(text)


def describe_mismatch(y: np.ndarray, ref: np.ndarray, *, tol: float = 1e-4, show: int = 3,
                      index: str = "n, m, h, w") -> str | None:
    """None if ``y`` matches the float64 ``ref`` (N, M, Ho, Wo) to ``tol`` (relative to ref's largest
    magnitude; 0: exactly), else a few lines: how many elements are wrong, never written (NaN) or
    wrong values, on the edge of the plane or inside it, the first few (their ``index``), the largest
    error.  A ``ref`` of another rank (a histogram's bins, one sum per block) has no plane: its lines
    leave the edge out."""
    y = np.asarray(y, np.float64)
    scale = max(float(np.abs(ref).max()), 1e-30) if ref.size else 1e-30
    nan = np.isnan(y)
    err = np.where(nan, np.inf, np.abs(y - ref))
    bad = err > tol * scale
    if not bad.any():
        return None
    if ref.ndim != 4:
        return _flat_mismatch(y, ref, bad, nan, scale, show, index)
    N, M, Ho, Wo = ref.shape
    h = np.arange(Ho)[:, None]
    w = np.arange(Wo)[None, :]
    edge_plane = (h == 0) | (h == Ho - 1) | (w == 0) | (w == Wo - 1)
    edge = np.broadcast_to(edge_plane, bad.shape)
    n_bad, n_nan = int(bad.sum()), int((bad & nan).sum())
    n_edge = int((bad & edge).sum())
    lines = [f"{n_bad} of {bad.size} outputs wrong: {n_nan} NaN (never written, or computed from memory "
             f"never written), {n_bad - n_nan} with other values; {n_edge} on the plane's edge (first or last row or "
             f"column), {n_bad - n_edge} inside"]
    idx = np.argwhere(bad)[:show]
    lines.append(f"first wrong outputs ({index}): " + ", ".join(
        f"{tuple(int(v) for v in i)} = {y[tuple(i)]:.4g} (expected {ref[tuple(i)]:.4g})" for i in idx))
    finite = bad & ~nan
    if finite.any():
        lines.append(f"largest error {float(np.abs(y - ref)[finite].max()):.3g} "
                     f"(the outputs' largest magnitude is {scale:.3g})")
    rows_bad = bad.any(axis=(0, 1, 3))
    cols_bad = bad.any(axis=(0, 1, 2))
    if not rows_bad.all() or not cols_bad.all():
        lines.append(f"wrong rows h in {_ranges(np.flatnonzero(rows_bad))}, columns w in "
                     f"{_ranges(np.flatnonzero(cols_bad))} (plane {Ho}x{Wo})")
    return "\n".join(lines)


def _flat_mismatch(y, ref, bad, nan, scale: float, show: int, index: str) -> str:
    n_bad, n_nan = int(bad.sum()), int((bad & nan).sum())
    lines = [f"{n_bad} of {bad.size} outputs wrong: {n_nan} NaN (never written, or computed from memory never "
             f"written), {n_bad - n_nan} with other values"]
    idx = np.argwhere(bad)[:show]
    lines.append(f"first wrong outputs ({index}): " + ", ".join(
        f"{tuple(int(v) for v in i) if len(i) > 1 else int(i[0])} = {y[tuple(i)]:.6g} (expected {ref[tuple(i)]:.6g})"
        for i in idx))
    finite = bad & ~nan
    if finite.any():
        lines.append(f"largest error {float(np.abs(y - ref)[finite].max()):.3g} "
                     f"(the outputs' largest magnitude is {scale:.3g})")
    return "\n".join(lines)


def _ranges(ix) -> str:
    out, start = [], None
    for i, v in enumerate(ix):
        if start is None:
            start = v
        if i == len(ix) - 1 or ix[i + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return "{" + ", ".join(out) + "}"


def not_attempted(exc: BaseException) -> str | None:
    """Where ``exc`` is a NotImplementedError raised by an unanswered exercise (the innermost frame's
    lines are the student copy's placeholder), what a student reads; else None."""
    if not isinstance(exc, NotImplementedError) or exc.__traceback__ is None:
        return None
    last = traceback.extract_tb(exc.__traceback__)[-1]
    above = linecache.getline(last.filename, last.lineno - 1).strip() if last.lineno else ""
    if ((last.line or "").strip(), above) != (PLACEHOLDER[1], PLACEHOLDER[0]):
        return None
    what = "the exercise" if last.name == "<module>" else f"{last.name}()"
    return (f"{last.name}: not attempted: {what} still says {PLACEHOLDER[0]} and raises NotImplementedError. "
            "Write it there, run its cell, then run this check again.")


def _report(shell, etype, value, tb, tb_offset=None):
    """IPython's handler of a NotImplementedError: an unanswered exercise in one line, anything else
    with IPython's own traceback."""
    words = not_attempted(value)
    if words is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    shell._showtraceback(etype, value, [f"{etype.__name__}: {words}"])   # ipykernel: an error output
    return None


def report_unanswered_exercises() -> bool:
    """In an IPython kernel with no handler of its own for exceptions, report an unanswered exercise's
    NotImplementedError as "not attempted" (``not_attempted``); whether the report is in place."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        return False
    if shell.custom_exceptions == (NotImplementedError,) and getattr(shell, "_labkit_reports_unanswered", False):
        return True
    if shell.custom_exceptions:             # someone else's handler: left as it is
        return False
    shell.set_custom_exc((NotImplementedError,), _report)
    shell._labkit_reports_unanswered = True
    return True


report_unanswered_exercises()
