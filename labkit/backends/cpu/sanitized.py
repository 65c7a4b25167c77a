"""One launch run in a process of its own, under a sanitizer: the memory check
(AddressSanitizer, memcheck.py) and the race check (ThreadSanitizer, racecheck.py).

Why a separate process: a sanitizer's runtime must be loaded before anything else
in a process, which Python (or a Jupyter kernel) cannot arrange for a library it
loads later.  A small runner program (runner.cpp) linked with it receives the
launch through a file, puts every array in a heap block of exactly its size,
runs the kernel and sends the arrays back.  Its report names the kernel's source
lines and the arguments involved -- and a crash cannot take the notebook down.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np

from ...errors import BarrierError, LaunchError


def aliases(fn, packed, check: str) -> dict[int, int]:
    """{argument: the earlier argument that is the same array}.  An array passed twice (an in-place
    launch, add_one(x, x)) must be one heap block in the runner, as it is one buffer on a GPU;
    arrays that overlap without being the same are refused (each would get a block of its own)."""
    spans = []
    alias: dict[int, int] = {}
    for i, (_obj, arr) in enumerate(packed):
        if arr is None:
            continue
        start = arr.__array_interface__["data"][0]
        span = (start, start + arr.nbytes)
        for j, other in spans:
            if other == span:
                alias[i] = j
                break
            if span[0] < other[1] and other[0] < span[1]:
                raise LaunchError(f"{check}: arguments {j} and {i} of kernel '{fn.name}' overlap without "
                                  "being the same array; the check gives each array a block of its own. Pass "
                                  "separate arrays, or run this launch without the check")
        else:
            spans.append((i, span))
    return alias


def _write_launch(f, fn, cfg, packed, alias: dict[int, int]) -> None:
    """The launch as the runner reads it: configuration, constant symbols, then each argument."""
    module = fn.module
    syms = list(module.symbols.values())
    f.write(b"LKRUN001")
    f.write(struct.pack("<III", fn.index, len(packed), len(syms)))
    f.write(bytes(cfg))
    for i, s in enumerate(syms):
        f.write(struct.pack("<IQ", i, s.nbytes))
        f.write(ctypes.string_at(s.ptr, s.nbytes))
    for i, (obj, arr) in enumerate(packed):
        if i in alias:
            f.write(struct.pack("<BQ", 2, alias[i]))
        elif arr is not None:
            f.write(struct.pack("<BQ", 1, arr.nbytes))
            f.write(arr.tobytes())
        else:
            raw = bytes(obj)
            f.write(struct.pack("<BQ", 0, len(raw)))
            f.write(raw)


@contextlib.contextmanager
def _exchange_files():
    """Two files for the launch and its result, as paths the runner can open.  Anonymous in-memory
    files where the system has them: nothing is left behind when the notebook's kernel is killed
    mid-launch.  Elsewhere a temporary folder, removed on every exit Python sees."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create("labkit-launch"), os.memfd_create("labkit-result")]
        try:
            yield [os.fdopen(fd, "r+b", closefd=False) for fd in fds], [f"/dev/fd/{fd}" for fd in fds], fds
        finally:
            for fd in fds:
                os.close(fd)
    else:
        with tempfile.TemporaryDirectory(prefix="labkit-memcheck-") as tmp:
            paths = [os.path.join(tmp, "launch.in"), os.path.join(tmp, "result.out")]
            for p in paths:
                open(p, "wb").close()
            files = [open(p, "r+b") for p in paths]
            try:
                yield files, paths, ()
            finally:
                for f in files:
                    f.close()


def argument_regions(stderr: str) -> dict[int, tuple[int, int]]:
    """{start address: (argument, bytes)} of the arrays the runner placed, from its LABKIT-ARG lines."""
    return {int(m.group(2), 16): (int(m.group(1)), int(m.group(3)))
            for m in re.finditer(r"LABKIT-ARG (\d+) (0x[0-9a-f]+|\(nil\)) (\d+)", stderr) if m.group(2) != "(nil)"}


def shared_regions(stderr: str) -> dict[int, tuple[str, int]]:
    """{start address: (name, bytes)} of the __shared__ variables, from the runner's LABKIT-SHARED lines."""
    return {int(m.group(2), 16): (m.group(1), int(m.group(3)))
            for m in re.finditer(r"LABKIT-SHARED (\S+) (0x[0-9a-f]+) (\d+)", stderr)}


def shared_name(name: str) -> str:
    """How a report names a shared-memory region the runner announced."""
    return "dynamic shared memory (extern __shared__)" if name == "(dynamic)" else f"__shared__ array '{name}'"


RUNNER_LINES = ("LABKIT-ARG", "LABKIT-SHARED", "LABKIT-RACE-FIBERS")   # the runner's notes to this module


def report_lines(stderr: str) -> list[str]:
    """The sanitizer's report without the runner's own lines."""
    return [ln for ln in stderr.splitlines() if not ln.startswith(RUNNER_LINES)]


def run(fn, cfg, packed, *, sanitizer: str, check: str, options: str = "", explain=None,
        keep_results: bool = True) -> None:
    """Run one launch of `fn` in the runner of the `sanitizer` build; `explain(proc)` raises the
    check's error where the sanitizer reported.  Copy the arrays and symbols back (``keep_results``)
    or raise."""
    alias = aliases(fn, packed, check)
    so, runner = fn.module.sanitized_build(sanitizer)
    with _exchange_files() as ((inp, out), paths, fds):
        _write_launch(inp, fn, cfg, packed, alias)
        inp.flush()
        env = dict(os.environ)
        if options:
            env[f"{'A' if sanitizer == 'address' else 'T'}SAN_OPTIONS"] = options
        limit = cfg.timeout_ms / 1000
        # A runner stops itself (its watchdog), this side only if that fails; the race-check runner
        # has no watchdog (ThreadSanitizer owns its signals): this side ends it.
        grace = 0 if sanitizer == "thread" else 30
        try:
            proc = subprocess.run([str(runner), str(so), *paths], capture_output=True, text=True, env=env,
                                  pass_fds=fds, timeout=limit + grace if limit else None)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"watchdog: kernel '{fn.name}' ran longer than {limit:g} s under the {check} "
                              "and was stopped (LABKIT_CPU_TIMEOUT_S sets the limit): an endless loop, or a "
                              "thread waiting for a flag that another block or warp never sets") from None
        # The kernel's printf output, as a launch without the check would show it.
        sys.stdout.write(proc.stdout)
        if "LABKIT-LAUNCH-ERROR: " in proc.stderr:     # the launch failed (a barrier, a deadlock): that first
            err = proc.stderr.split("LABKIT-LAUNCH-ERROR: ", 1)[-1].split("\n==", 1)[0].strip()
            raise (BarrierError if "barrier" in err or "deadlock" in err else LaunchError)(err)
        if explain is not None:
            explain(proc)
        if proc.returncode != 0:
            raise LaunchError(f"{check}: kernel '{fn.name}' crashed (exit status {proc.returncode}):\n"
                              + proc.stderr[-4000:])
        out.seek(0)
        data = out.read()
    if not keep_results:
        return
    pos = 0
    for i, (_, arr) in enumerate(packed):
        if arr is not None and i not in alias:
            n = arr.nbytes
            np.copyto(arr, np.frombuffer(data[pos:pos + n], dtype=arr.dtype).reshape(arr.shape))
            pos += n
    for s in fn.module.symbols.values():
        ctypes.memmove(s.ptr, data[pos:pos + s.nbytes], s.nbytes)
        pos += s.nbytes
