"""The grading process of one Python exercise: ``python -m labkit.course.grading.run_cells PROGRAM RESULT``
(RESULT ``-``: the sandbox's result pipe, labkit.course.sandbox.result_fd()).

PROGRAM (JSON, written by the grader): the instructor's setup cells, the student's solution cell,
the instructor's check cell, the names the solution may bind.  The cells run in one IPython shell,
as in a notebook (magics work; plots go to a non-interactive backend).  RESULT (JSON): what the check
printed, or where and how the run failed.

Two processes, each in its own sandbox, when the grader has one (``serve`` and ``check``): the
student's side runs the set-up cells and the solution, then answers requests on a pipe: a name's
value, or a call of a function the solution defined, each as plain data (labkit.course.grading.plain);
the check's side runs the set-up cells and the instructor's check cell, with the solution's names
bound to those values and to stand-ins that call across.  A value that lies in ``__eq__``, a patched
helper or builtin, an input transformer, a forged result file: none of them reaches the process that
runs the check and writes its result.  A name the instructor's solution imports (``imports``) is
imported by the check's side itself.  A function the check must hand live objects (notebook 09's
``my_enqueue``: a plan, a stream) is run on the student's side on stand-ins that record its calls
(op ``record``, labkit.pipeline.recording), replayed by the check.  ``run`` is both in one
process (--unsafe-no-sandbox, and a check that hands the solution's functions what cannot cross,
such as notebook 06's ConvLayer).

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

from ...errors import CannotCross
from ...verdict import CheckFailed


PROTECTED = ("numpy", "labkit", "cupy", "math", "sys", "builtins")
REQUESTS_ENV, REPLIES_ENV = "LABKIT_REQUESTS_FD", "LABKIT_REPLIES_FD"


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


def _failed(exc: BaseException | None) -> str | None:
    """The words of a check that failed (labkit.verdict.require raised CheckFailed), else None."""
    return str(exc) if isinstance(exc, CheckFailed) else None


def _checked(out: str, exc: BaseException | None, put_back: list[str]) -> dict:
    """The check stage's result: what it printed, and how it failed, if it did."""
    return {"stage": "check", "stdout": out, "error": None if exc is None else _error_text(exc),
            "failed": _failed(exc), "put_back": put_back}


def run(program: dict) -> dict:
    """Set-up, solution and check in one shell (--unsafe-no-sandbox, and a check that hands the
    solution what cannot cross)."""
    shell, cell, failed = _setup(program)
    if failed is not None:
        return failed
    failed, put_back = _solution(shell, cell, program)
    if failed is not None:
        return failed
    out, err, exc = cell(program["check"])
    return _checked(out, exc, put_back)


def _setup(program: dict):
    """An IPython shell with the set-up cells run; (shell, cell runner, None) or (.., .., result)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *a, **k: None        # the result says what failed, once, in plain text

    def cell(source: str):
        with capture_output() as cap:
            r = shell.run_cell(source, store_history=False)
        return cap.stdout, cap.stderr, r.error_before_exec or r.error_in_exec

    for n, source in enumerate(program["setup"]):
        _, _, exc = cell(source)
        if exc is not None:
            return shell, cell, {"stage": "setup", "cell": n, "error": _error_text(exc)}
    return shell, cell, None


def _solution(shell, cell, program: dict) -> tuple[dict | None, list[str]]:
    """Run the solution cell, then put back whatever it changed that is not its own (see the module's
    docstring): (None, what was put back), or (the failed stage's result, ...)."""
    ns = shell.user_ns
    names_before, modules_before = dict(ns), _modules_now()
    _, _, exc = cell(program["solution"])
    allowed = set(program["allowed"])
    put_back = _put_back(modules_before)
    for key, value in names_before.items():
        if key not in allowed and not key.startswith("_") and ns.get(key, _MISSING) is not value:
            ns[key] = value
            put_back.append(key)
    if exc is not None:
        return {"stage": "solution", "error": _error_text(exc), "not_attempted": isinstance(exc, NotImplementedError),
                "put_back": put_back}, put_back
    return None, put_back


MAX_MESSAGE = 256 << 20


def serve(program: dict, requests: int, replies: int) -> None:
    """The student's side: set-up and solution, then answers until told to end (or the pipe ends)."""
    from .plain import PlainDataError, receive, send
    shell, cell, failed = _setup(program)
    if failed is not None:
        send(replies, failed)
        return
    failed, put_back = _solution(shell, cell, program)
    if failed is not None:
        send(replies, failed)
        return
    ns = shell.user_ns
    send(replies, {"stage": "ready", "put_back": put_back})
    while True:
        try:
            req = receive(requests, max_bytes=MAX_MESSAGE)
        except EOFError:
            return
        if not isinstance(req, dict) or req.get("op") == "end":
            return
        name = str(req.get("name"))
        if name not in program["allowed"] or name not in ns:
            send(replies, {"missing": True})
        elif req["op"] == "get":
            value = ns[name]
            if callable(value):
                send(replies, {"callable": True})
            else:
                try:
                    send(replies, {"value": value}, f"{name}")
                except PlainDataError as exc:
                    send(replies, {"not_plain": str(exc)})
        elif req["op"] == "record":
            # The check's function cannot be handed live objects across: it is run here on stand-ins
            # that record what it calls (labkit.pipeline.recording), and the calls go back.
            from ...pipeline.recording import RECORDERS
            recorder = RECORDERS.get(str(req.get("kind")))
            if recorder is None or not callable(ns[name]):
                send(replies, {"raised": f"{name} cannot be recorded as {str(req.get('kind'))[:40]!r}"})
                continue
            _answer(replies, lambda: recorder(ns[name], ns, req.get("jobs", [])), f"the calls {name}() made")
        elif req["op"] == "call":
            _answer(replies, lambda: ns[name](*req.get("args", []), **req.get("kwargs", {})),
                    f"what {name}() returned")


class _quiet:
    """What a student's function prints while the check calls it goes nowhere (not into the check's
    output, which is what is compared)."""
    def __enter__(self):
        import contextlib
        import io
        self._cm = contextlib.redirect_stdout(io.StringIO())
        return self._cm.__enter__()

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def check(program: dict, requests: int, replies: int) -> dict:
    """The check's side: the student's answers bound (values, or stand-ins that call across), then
    the instructor's check cell, in this process alone."""
    from .cell_names import cell_names
    from .plain import PlainDataError, receive, send
    try:
        first = receive(replies, max_bytes=MAX_MESSAGE)
    except (EOFError, PlainDataError) as exc:
        return {"stage": "solution", "error": f"the solution's process ended without an answer ({exc})"}
    if not isinstance(first, dict) or first.get("stage") != "ready":
        return first if isinstance(first, dict) and first.get("stage") in ("setup", "solution") else \
            {"stage": "solution", "error": "the solution's process answered something else"}
    shell, cell, failed = _setup(program)
    if failed is not None:
        send(requests, {"op": "end"})
        return failed

    def ask(req: dict):
        send(requests, req)
        return receive(replies, max_bytes=MAX_MESSAGE)

    def stand_in(name: str):
        def call(*args, **kwargs):
            try:      # send() encodes before it writes: a value that cannot cross sends nothing
                send(requests, {"op": "call", "name": name, "args": list(args), "kwargs": kwargs})
            except PlainDataError as exc:
                raise CannotCross(f"the check calls {name}() with {exc}") from None
            r = receive(replies, max_bytes=MAX_MESSAGE)
            if "raised" in r:
                raise RuntimeError(f"{name}() raised:\n{r['raised']}")
            if "not_plain" in r:
                raise TypeError(f"{name}() returned what cannot be graded: {r['not_plain']}")
            return r["value"]
        def record(kind: str, jobs: list):
            """The calls the solution's function makes on stand-ins for each of ``jobs`` (plain data
            describing live objects that cannot cross: labkit.pipeline.recording)."""
            r = ask({"op": "record", "name": name, "kind": kind, "jobs": jobs})
            if "raised" in r:
                raise RuntimeError(f"{name}() raised:\n{r['raised']}")
            if "not_plain" in r:
                raise TypeError(f"{name}() made calls that cannot be graded: {r['not_plain']}")
            return r["value"]
        call.__name__ = name
        call.record = record
        return call

    ns = shell.user_ns
    imported = set()
    for source in program.get("imports", []):
        # A name the instructor's solution imports (a class of labkit, say) is the check's own
        # import, never the student's value: a class or module cannot cross as data.
        _, _, exc = cell(source)
        if exc is None:
            imported |= cell_names(source).binds
    for name in program["allowed"]:
        if name in imported:
            continue
        r = ask({"op": "get", "name": name})
        if "callable" in r:
            ns[name] = stand_in(name)
        elif "value" in r:
            ns[name] = r["value"]
        elif "not_plain" in r:
            ns[name] = _NotPlain(name, r["not_plain"])
    out, err, exc = cell(program["check"])
    try:
        send(requests, {"op": "end"})
    except OSError:
        pass
    if isinstance(exc, CannotCross):
        return {"stage": "check", "crossing": str(exc)}
    return _checked(out, exc, first.get("put_back", []))


def _answer(replies: int, run, what: str) -> None:
    """Run one of the student's functions (run()) and send back its value as plain data, or the words
    of what it raised, or why its value cannot cross."""
    from .plain import PlainDataError, send
    try:
        with _quiet():
            result = run()
    except Exception as exc:   # the student's function failed: its words go to the check
        send(replies, {"raised": _error_text(exc)})
        return
    try:
        send(replies, {"value": result}, what)
    except PlainDataError as exc:
        send(replies, {"not_plain": str(exc)})


class _NotPlain:
    """A solution's value that could not cross: any use of it in the check says why."""
    def __init__(self, name: str, why: str):
        self._why = f"{name} cannot be graded: {why}"

    def __getattr__(self, attr):
        raise TypeError(self._why)

    def __repr__(self):
        return f"<{self._why}>"


def _write_result(result: dict, where: str) -> None:
    data = json.dumps(result).encode()
    if where == "-":
        from ..sandbox import write_result
        write_result(data)
    else:
        with open(where, "wb") as f:
            f.write(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m labkit.course.grading.run_cells")
    ap.add_argument("program")
    ap.add_argument("result", nargs="?", default="-", help="a file, or - for the sandbox's result pipe")
    ap.add_argument("--serve", action="store_true", help="the student's side: answer on $LABKIT_REQUESTS_FD / "
                                                         "$LABKIT_REPLIES_FD")
    ap.add_argument("--check", action="store_true", help="the check's side, asking on the same pipes")
    args = ap.parse_args(argv)
    program = json.loads(open(args.program).read())
    if args.serve or args.check:
        requests, replies = int(os.environ[REQUESTS_ENV]), int(os.environ[REPLIES_ENV])
        if args.serve:
            serve(program, requests, replies)
            return 0
        _write_result(check(program, requests, replies), args.result)
        return 0
    _write_result(run(program), args.result)
    return 0



if __name__ == "__main__":
    sys.exit(main())
