"""Python exercises whose solution returns a kernel file (notebook 03's ``fix(source)``): the student's
function runs in one sandbox, the kernels it wrote in another, and the verdict is made here.

    r = grade_source(SOURCE_EXERCISES["03_fix"], job_dir, sandbox_args, timeout=300, memory_gib=6, seed=seed)

Such a check cannot run as the other Python exercises' checks do, beside plain data in a sandbox of
its own: it compiles what the student's function returned, and a kernel file holds host code too (a
static constructor, a global object, ``__device__ __attribute__((constructor))``, which NVRTC lets
through), which would run in the process that writes the check's result.  So, for each student:

1. the student's side (labkit.course.grading.run_cells ``--serve``, in a sandbox) runs the
   instructor's set-up cells and the student's solution cell; this process asks it, on the same
   plain-data pipes the check's side uses elsewhere, for ``fix(source)`` on the instructor's file.
   What comes back is data, read up to a bound: a ``str`` of at most MAX_SOURCE_BYTES of UTF-8
   without NUL, or the exercise is not accepted, with the reason;
2. the bodies of the exercise's kernels are taken from that text into the instructor's file
   (labkit.course.regions.splice_bodies, under the rules of a kernel exercise's regions): no host
   code, no declaration outside a body, nothing else of the returned text;
3. the exercise's kernel check (labkit.course.kernel_checks) on inputs drawn here for this student:
   NVRTC where installed (device code only), then labkit.course.kernel_runner in a second sandbox,
   whose outputs (arrays) this process compares with answers that sandbox never sees.

Neither sandbox writes a verdict: the first hands back a string, the second arrays.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ... import kernels
from ...errors import NotAccepted, PlainDataError
from .. import kernel_checks, sandbox
from ..regions import RegionError, splice_bodies
from ..sandboxed import MAX_SOURCE_BYTES, file_runner
from .limits import DEFAULT_MEMORY_GIB
from .plain import receive, send
from .run_cells import REPLIES_ENV, REQUESTS_ENV

__all__ = ["SourceExercise", "SOURCE_EXERCISES", "grade_source", "returned_source", "NotAccepted", "MAX_REPLY_BYTES"]

RUN_CELLS = "labkit.course.grading.run_cells"
# What the student's side may send for the returned text: JSON writes a character in at most 6 bytes
# (\uXXXX), and a message has a small header.  The text itself is then held to MAX_SOURCE_BYTES.
MAX_REPLY_BYTES = 6 * MAX_SOURCE_BYTES + (64 << 10)
_MAX_FIRST_BYTES = 1 << 20       # the student's side's first word: ready, or how its cells failed


@dataclass(frozen=True)
class SourceExercise:
    """``function``: the solution's function, called with the text of labkit/kernels/<``family``>.cu;
    ``kernels``: the kernels whose bodies are taken from what it returns into that file; ``check``:
    the function of labkit.course.kernel_checks that runs them (``check(path, rng=, runner=, **fresh
    options)``)."""
    function: str
    family: str
    kernels: tuple
    check: str


SOURCE_EXERCISES = {
    "03_fix": SourceExercise("fix", "find_the_bug", ("histogram", "block_sum"), "check_find_the_bug_fix"),
}


def returned_source(value, function: str) -> str:
    """``value`` as the text of a kernel file, or NotAccepted saying why it is not one."""
    call = f"{function}(source)"
    if type(value) is not str:
        raise NotAccepted(f"{call} returned {type(value).__name__}{_glimpse(value)}, not the file's text (a str)")
    nul = value.find("\0")
    if nul >= 0:
        raise NotAccepted(f"{call} returned a text holding a NUL character (at character {nul:,}): a kernel file is "
                          "text, and a compiler would stop reading at it")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise NotAccepted(f"{call} returned a text that is not UTF-8 (a lone surrogate at character {exc.start:,})") \
            from None
    if size > MAX_SOURCE_BYTES:
        raise NotAccepted(f"{call} returned {size:,} bytes, over the {MAX_SOURCE_BYTES >> 10} KiB a kernel file may "
                          "have (the file it was handed is a page or two)")
    return value


def _glimpse(value) -> str:
    """A number's or None's words, for the reason a value is refused; nothing of anything else's."""
    return f" ({repr(value)[:40]})" if type(value) in (int, float, bool, type(None)) else ""


def _ask(job: Path, args: dict, function: str, argument: str, timeout: float):
    """Start the student's side, and once it is ready ask it for ``function(argument)``: (its first
    message, its reply, how its sandbox ended).  A message that is not plain data, or larger than
    its bound, is a PlainDataError in the reply's place; None where the side ended before it spoke."""
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    ended: dict = {}
    side = threading.Thread(target=lambda: ended.update(done=sandbox.run(
        [sys.executable, "-m", RUN_CELLS, "/job/program.json", "--serve"],
        fds={REQUESTS_ENV: requests_r, REPLIES_ENV: replies_w}, **args)), daemon=True)
    side.start()
    first = reply = None
    try:
        try:
            first = receive(replies_r, max_bytes=_MAX_FIRST_BYTES)
        except (EOFError, PlainDataError):
            first = None
        if isinstance(first, dict) and first.get("stage") == "ready":
            try:
                send(requests_w, {"op": "call", "name": function, "args": [argument]})
                reply = receive(replies_r, max_bytes=MAX_REPLY_BYTES)
            except PlainDataError as exc:
                reply = exc
            except (EOFError, OSError):
                reply = None
            try:
                send(requests_w, {"op": "end"})
            except OSError:
                pass                 # the student's side has ended already
    finally:
        # Closing our ends ends a student's side that is still writing (its pipe breaks) or waiting.
        os.close(requests_w)
        os.close(replies_r)
        side.join(timeout + 30)
    return first, reply, ended.get("done")


def _ended(done: sandbox.Finished | None, timeout: float, memory_gib: float) -> str:
    if done is not None and done.limit == "time":
        return f"did not finish within {timeout:.0f} s (a loop that never ends?)"
    if done is not None and done.limit == "memory":
        return (f"used more than the {memory_gib:g} GiB of memory a grading process may have (an array far larger "
                "than the exercise needs?)")
    code = None if done is None else done.returncode
    tail = "" if done is None else "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
    return f"the solution's process ended with code {code} before it answered (a crash?)" + (f":\n{tail}" if tail else "")


def _stage(first: dict) -> dict:
    """The student's side's own failure (its set-up or solution cell), rebuilt from plain fields: it
    only ever costs the student the points, and its words are what the feedback shows."""
    put_back = first.get("put_back")
    return {"stage": first["stage"], "error": str(first.get("error", ""))[:20000],
            "not_attempted": first.get("not_attempted") is True,
            "put_back": [str(x)[:200] for x in put_back[:50]] if isinstance(put_back, list) else []}


def grade_source(spec: SourceExercise, job: Path, args: dict, *, timeout: float, memory_gib: float | None,
                 seed: int | None) -> dict:
    """Grade one student's source exercise whose program (set-up and solution) is ``job``/program.json;
    ``args``: the student's side's sandbox (jobs, environment, limits).  Returns a failed stage of the
    student's side (``"stage"`` "setup" or "solution", as labkit.course.grading.run_cells writes it), or
    ``{"stage": "kernel", "ok", "message"}``: the verdict, made here (``"not_attempted"`` where the
    function raised NotImplementedError)."""
    memory_gib = memory_gib or DEFAULT_MEMORY_GIB
    if sandbox.unavailable() is not None:
        raise RuntimeError(f"a source exercise is graded in two sandboxes: {sandbox.unavailable()}")
    instructor = kernels.source(spec.family)
    first, reply, done = _ask(job, args, spec.function, instructor, timeout)
    call = f"{spec.function}(source)"

    def verdict(ok: bool, message: str) -> dict:
        return {"stage": "kernel", "ok": ok, "message": message}

    if not isinstance(first, dict) or first.get("stage") not in ("ready", "setup", "solution"):
        return verdict(False, _ended(done, timeout, memory_gib))
    if first["stage"] != "ready":
        return _stage(first)
    if reply is None:
        return verdict(False, f"{call}: " + _ended(done, timeout, memory_gib))
    if isinstance(reply, PlainDataError):
        return verdict(False, f"not accepted: what {call} returned cannot be taken ({reply}; a kernel file is at "
                              f"most {MAX_SOURCE_BYTES >> 10} KiB)")
    if not isinstance(reply, dict):
        return verdict(False, f"{call}: the solution's process answered something else")
    if reply.get("missing"):
        return verdict(False, f"the solution defines no {spec.function}()")
    if "raised" in reply:
        raised = str(reply["raised"])[:20000]
        last = raised.rstrip().splitlines()[-1:] or [""]
        return {**verdict(False, f"{call} raised:\n{raised}"), "not_attempted": last[0].startswith("NotImplementedError")}
    if "not_plain" in reply:
        return verdict(False, f"not accepted: {call} returned what cannot be graded: {str(reply['not_plain'])[:2000]}")
    if "value" not in reply:
        return verdict(False, f"{call}: the solution's process answered something else")
    file_name = f"{spec.family}.cu"
    try:
        text, changed = splice_bodies(instructor, returned_source(reply["value"], spec.function), spec.kernels,
                                      name=file_name)
    except (NotAccepted, RegionError) as exc:
        return verdict(False, f"not accepted: {exc}")
    rng = np.random.default_rng(seed)        # the inputs, drawn for this student: the same again for the seed
    check = getattr(kernel_checks, spec.check)
    with tempfile.TemporaryDirectory(prefix="labkit-source-") as tmp:
        path = Path(tmp, file_name)
        path.write_text(text)
        v = check(path, **kernel_checks.fresh_options(spec.check, rng), rng=rng,
                  runner=file_runner(limits=sandbox.Limits(seconds=timeout, memory_gib=memory_gib)))
    message = v.message
    if changed:
        names = " and ".join(spec.kernels)
        message += (f"\n(what the returned text changes outside the bodies of {names} was left out: the grader "
                    f"takes those bodies into the original {file_name})")
    return verdict(bool(v.ok), message)
