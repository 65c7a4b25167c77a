"""The grading process of one Python exercise: ``python -m labkit.course.grading.run_cells PROGRAM RESULT``
(RESULT ``-``: the sandbox's result pipe, labkit.course.sandbox.result_fd()).

PROGRAM (JSON, written by the grader): the instructor's setup cells, the student's solution cell,
the instructor's check cell, the names the solution may bind.  The cells run in one IPython shell,
as in a notebook (magics work; plots go to a non-interactive backend).  RESULT (JSON): what the check
printed, or where and how the run failed.

Between the solution and the check, whatever the solution changed that it had no business changing
is put back: a name of the notebook other than the ones the instructor's solution defines, and any
attribute of numpy, labkit, CuPy, math, sys or builtins (``np.allclose = lambda *a: True``).  So the
check runs with the instructor's helpers, whatever the solution did to them.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback


PROTECTED = ("numpy", "labkit", "cupy", "math", "sys", "builtins")


def _modules_now() -> dict:
    return {name: (m, dict(vars(m))) for name, m in list(sys.modules.items())
            if m is not None and name.split(".")[0] in PROTECTED}


def _put_back(before: dict) -> list[str]:
    """Restore every attribute of the snapshot ``before`` that changed; the names restored."""
    restored = []
    for name, (module, attrs) in before.items():
        now = vars(module)
        for key, value in attrs.items():
            if now.get(key, _MISSING) is not value:
                try:
                    setattr(module, key, value)
                    restored.append(f"{name}.{key}")
                except (AttributeError, TypeError):
                    pass
    return restored


_MISSING = object()


def _error_text(exc: BaseException) -> str:
    """The exception and the last frames of the notebook's own code (cells are <ipython-input-...>)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f"{os.sep}IPython{os.sep}" not in f.filename]
    lines = [f"  line {f.lineno} in {'a cell' if f.filename.startswith('<') else os.path.basename(f.filename)}"
             f" ({f.name}): {f.line}" for f in frames[-4:]]
    return "\n".join(["Traceback (last calls):"] + lines + traceback.format_exception_only(type(exc), exc)).rstrip()


def run(program: dict) -> dict:
    os.environ.setdefault("MPLBACKEND", "Agg")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: None        # the result says what failed, once, in plain text

    def cell(source: str):
        with capture_output() as cap:
            r = shell.run_cell(source, store_history=False)
        exc = r.error_before_exec or r.error_in_exec
        return cap.stdout, cap.stderr, exc

    for n, source in enumerate(program["setup"]):
        _, _, exc = cell(source)
        if exc is not None:
            return {"stage": "setup", "cell": n, "error": _error_text(exc)}
    ns = shell.user_ns
    names_before, modules_before = dict(ns), _modules_now()
    out, err, exc = cell(program["solution"])
    allowed = set(program["allowed"])
    put_back = _put_back(modules_before)
    for key, value in names_before.items():
        if key not in allowed and not key.startswith("_") and ns.get(key, _MISSING) is not value:
            ns[key] = value
            put_back.append(key)
    if exc is not None:
        return {"stage": "solution", "error": _error_text(exc), "not_attempted": isinstance(exc, NotImplementedError),
                "put_back": put_back}
    out, err, exc = cell(program["check"])
    return {"stage": "check", "stdout": out, "error": None if exc is None else _error_text(exc), "put_back": put_back}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.course.grading.run_cells")
    ap.add_argument("program")
    ap.add_argument("result", help="a file, or - for the sandbox's result pipe")
    args = ap.parse_args(argv)
    program = json.loads(open(args.program).read())
    result = json.dumps(run(program)).encode()
    if args.result == "-":
        from ..sandbox import result_fd
        fd = result_fd()
        view = memoryview(result)
        while view:
            view = view[os.write(fd, view):]
        os.close(fd)
    else:
        with open(args.result, "wb") as f:
            f.write(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
