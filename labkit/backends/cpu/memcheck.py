"""The memory check: one launch run under AddressSanitizer, in a separate process.

Why a separate process: AddressSanitizer must be loaded before anything else in
a process, which Python (or a Jupyter kernel) cannot arrange for a library it
loads later.  A small runner program (runner.cpp) linked with it receives the
launch through a file, puts every array in a heap block of exactly its size,
runs the kernel and sends the arrays back.  An out-of-bounds access is reported
with the kernel's name and source line, and with the argument whose block it
ran past -- and a crash cannot take the notebook down.
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

from ...errors import BarrierError, KernelMemoryError, LaunchError


def _aliases(fn, packed) -> dict[int, int]:
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
                raise LaunchError(f"memory check: arguments {j} and {i} of kernel '{fn.name}' overlap without "
                                  "being the same array; the check gives each array a block of its own. Pass "
                                  "separate arrays, or run this launch without check='memory'")
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


def _explain(fn, stderr: str) -> str:
    """The part of an AddressSanitizer report a student needs, with argument names."""
    regions = {}
    for m in re.finditer(r"LABKIT-ARG (\d+) (0x[0-9a-f]+|\(nil\)) (\d+)", stderr):
        if m.group(2) != "(nil)":
            regions[int(m.group(2), 16)] = (int(m.group(1)), int(m.group(3)))
    shared = {int(m.group(2), 16): (m.group(1), int(m.group(3)))
              for m in re.finditer(r"LABKIT-SHARED (\w+) (0x[0-9a-f]+) (\d+)", stderr)}
    lines = [ln for ln in stderr.splitlines() if not ln.startswith(("LABKIT-ARG", "LABKIT-SHARED"))]
    summary = next((ln for ln in lines if "ERROR: AddressSanitizer" in ln), "")
    access = next((ln for ln in lines if re.match(r"(READ|WRITE) of size", ln.strip())), "")
    frames = [ln.strip() for ln in lines if re.match(r"\s*#\d+ ", ln)]
    where = next((f for f in frames if ".cu:" in f or fn.module.path in f), frames[0] if frames else "")
    what = ""
    m = re.search(r"located (\d+) bytes (to the right of|to the left of|after|before|inside of) "
                  r"(\d+)-byte region \[(0x[0-9a-f]+),", stderr)
    if m:
        start = int(m.group(4), 16)
        side = {"to the right of": "past the end of", "after": "past the end of",
                "to the left of": "before the start of", "before": "before the start of"}.get(
                    m.group(2), m.group(2))
        if start in regions:
            i, n = regions[start]
            what = (f"{m.group(1)} bytes {side} the {n}-byte array passed as argument {i} "
                    f"('{fn.param_names[i]}')")
        elif start in shared:
            name, n = shared[start]
            what = f"{m.group(1)} bytes {side} the {n}-byte __shared__ array '{name}'"
        else:
            what = f"{m.group(1)} bytes {m.group(2)} a {m.group(3)}-byte block"
    head = f"memory check: kernel '{fn.name}' made an invalid memory access"
    parts = [head]
    if access:
        parts.append("  " + access.strip().split(" at pc")[0].split(" thread")[0])
    if what:
        parts.append("  " + what)
    if where:
        parts.append("  at " + where.split(" in ", 1)[-1])
    parts.append("  (" + summary.split("ERROR: ")[-1].strip() + ")" if summary else "")
    report = "\n".join(p for p in parts if p)
    # The report without its shadow-memory dump, which says nothing to a kernel author.
    cut = next((k for k, ln in enumerate(lines) if ln.startswith("Shadow bytes around")), len(lines))
    return report + "\n\n--- AddressSanitizer report ---\n" + "\n".join(lines[:cut][-40:])


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


def run(fn, cfg, packed) -> None:
    """Run one launch of `fn` under AddressSanitizer; copy results back or raise."""
    alias = _aliases(fn, packed)
    so, runner = fn.module.asan_build()
    with _exchange_files() as ((inp, out), paths, fds):
        _write_launch(inp, fn, cfg, packed, alias)
        inp.flush()
        env = dict(os.environ)
        env["ASAN_OPTIONS"] = "detect_leaks=0:exitcode=86:halt_on_error=1:allocator_may_return_null=1"
        limit = cfg.timeout_ms / 1000
        try:
            proc = subprocess.run([str(runner), str(so), *paths], capture_output=True, text=True, env=env,
                                  pass_fds=fds, timeout=limit + 30 if limit else None)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"watchdog: kernel '{fn.name}' ran longer than {limit:g} s under the memory check "
                              "and was stopped (LABKIT_CPU_TIMEOUT_S sets the limit): an endless loop, or a "
                              "thread waiting for a flag that another block or warp never sets") from None
        # The kernel's printf output, as a launch without the check would show it.
        sys.stdout.write(proc.stdout)
        if proc.returncode == 86 or "AddressSanitizer" in proc.stderr:
            raise KernelMemoryError(_explain(fn, proc.stderr))
        if proc.returncode == 3:
            err = proc.stderr.split("LABKIT-LAUNCH-ERROR: ", 1)[-1].strip()
            raise (BarrierError if "barrier" in err or "deadlock" in err else LaunchError)(err)
        if proc.returncode != 0:
            raise KernelMemoryError(
                f"memory check: kernel '{fn.name}' crashed (exit status {proc.returncode}):\n"
                + proc.stderr[-4000:])
        out.seek(0)
        data = out.read()
    pos = 0
    for i, (_, arr) in enumerate(packed):
        if arr is not None and i not in alias:
            n = arr.nbytes
            np.copyto(arr, np.frombuffer(data[pos:pos + n], dtype=arr.dtype).reshape(arr.shape))
            pos += n
    for s in fn.module.symbols.values():
        ctypes.memmove(s.ptr, data[pos:pos + s.nbytes], s.nbytes)
        pos += s.nbytes
