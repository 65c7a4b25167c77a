"""The race check: one launch under ThreadSanitizer, in a process of its own (see sanitized.py).

Every CUDA thread is a ThreadSanitizer fiber; the executor's barriers, atomics and block boundaries
are the only things that order two threads' accesses (labkit_cpu.h), as on a GPU.  Two accesses to
one location, at least one a write, that nothing orders are a data race: reported with both
threads, both source lines and the array's name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import KernelRaceError
from . import sanitized

OPTIONS = ("halt_on_error=1:exitcode=87:report_signal_unsafe=0:report_thread_leaks=0:detect_deadlocks=0:"
           "history_size=2")
_ACCESS = re.compile(r"^\s*(Previous )?((?:[Aa]tomic )?(?:[Rr]ead|[Ww]rite)) of size (\d+) at (0x[0-9a-f]+) "
                     r"by (?:thread (T\d+)|main thread)")
_FRAME = re.compile(r"^\s*#\d+ (\S+) (\S+:\d+)")
_THREAD = re.compile(r"Thread (T\d+) '([^']*)'")
_HEAP = re.compile(r"Location is heap block of size (\d+) at (0x[0-9a-f]+)")
_GLOBAL = re.compile(r"Location is global '([^']+)' of size (\d+) at (0x[0-9a-f]+)")
# Frames of the executor and the C++ library: not where a kernel author looks.
_INTERNAL = ("labkit_cpu.h", "cooperative_groups", "/usr/include/", "libsanitizer", "runner.cpp", "<null>")


@dataclass
class Access:
    kind: str          # "read", "write", "atomic write", ...
    size: int
    addr: int
    thread: str        # "block (0,0,0) thread (5,0,0)", or what ThreadSanitizer calls it
    where: str         # "file.cu:12" (the kernel's own innermost frame)
    func: str


def _accesses(lines: list[str], names: dict[str, str]) -> list[Access]:
    out, cur = [], None
    for ln in lines:
        m = _ACCESS.match(ln)
        if m:
            cur = Access(m.group(2).lower(), int(m.group(3)), int(m.group(4), 16),
                         names.get(m.group(5) or "", m.group(5) or "the main thread"), "", "")
            out.append(cur)
            continue
        f = _FRAME.match(ln)
        if f and cur is not None and not cur.where and not any(s in f.group(2) for s in _INTERNAL):
            cur.func, cur.where = f.group(1), f.group(2)
        elif not ln.strip():
            cur = None
    return out


def _location(fn, stderr: str, addr: int, size: int) -> str:
    args = sanitized.argument_regions(stderr)
    shared = sanitized.shared_regions(stderr)
    m = _HEAP.search(stderr)
    if m:
        start = int(m.group(2), 16)
        off = addr - start
        if start in args:
            i, n = args[start]
            return f"the {n}-byte array passed as argument {i} ('{fn.param_names[i]}'), {_at(off, size)}"
        if start in shared:
            name, n = shared[start]
            return f"the {n}-byte {sanitized.shared_name(name)}, {_at(off, size)}"
        return f"a {m.group(1)}-byte block, {_at(off, size)}"
    m = _GLOBAL.search(stderr)
    if m:
        return f"the __device__ variable '{m.group(1)}', {_at(addr - int(m.group(3), 16), size)}"
    return f"address {addr:#x}"


def _at(offset: int, size: int) -> str:
    return f"element {offset // size} ({size}-byte elements)" if size and offset % size == 0 else f"byte {offset}"


def _block(thread: str) -> str:
    m = re.match(r"block (\(\d+,\d+,\d+\))", thread)
    return m.group(1) if m else ""


def _own_element(now: Access, before: Access, location: str) -> bool:
    """Whether the plain write of the two went to the writer's own element of a shared array
    (element == threadIdx.x): a loop step read by a neighbour, not many threads on one location."""
    writer = next((a for a in (now, before) if a.kind == "write"), None)
    element = re.search(r"element (\d+)", location)
    thread = re.search(r"thread \((\d+),0,0\)$", writer.thread) if writer else None
    return bool("shared" in location and element and thread and element.group(1) == thread.group(1))


def _advice(now: Access, before: Access, location: str) -> str:
    if _block(now.thread) and _block(now.thread) != _block(before.thread):
        return ("threads of different blocks: no barrier orders them; make the update atomic (atomicAdd), "
                "or give each block its own part of the output and combine the parts afterwards")
    if now.where == before.where and "write" in now.kind + before.kind:
        if _own_element(now, before, location):
            return ("each thread updates its own element of shared memory and another thread reads it at "
                    "the same line: the steps of a loop (such as a tree reduction) need a __syncthreads() "
                    "between them, inside the loop after the update")
        return ("many threads update one location at the same line: a read-modify-write such as y[0] += v "
                "loses updates on a GPU; use atomicAdd, or a reduction in shared memory")
    scope = "__syncthreads()" + (" (or __syncwarp() among the lanes of one warp)" if "shared" in location else "")
    return (f"a {scope} must separate the {before.kind} at {before.where} from the {now.kind} at "
            f"{now.where} of another thread")


def _fiber_mates(thread: str, stderr: str) -> str:
    """Threads share the checker's fibers where a block is large (labkit_cpu.h, race_fiber_count): an
    earlier access is named for the thread its fiber ran last, which may be another of those sharing it."""
    m = re.search(r"LABKIT-RACE-FIBERS (\d+) (\d+) (\d+) (\d+)", stderr)
    t = re.search(r"thread \((\d+),(\d+),(\d+)\)$", thread)
    if not m or not t:
        return ""
    fibers, n, bx, by = (int(g) for g in m.groups())
    if n <= fibers:
        return ""
    first = (int(t.group(1)) + bx * (int(t.group(2)) + by * int(t.group(3)))) % fibers
    mates = ", ".join(str(i) for i in range(first, n, fibers))
    return f" (or another of the threads numbered {mates} in the block, which share one of the check's fibers)"


def explain(fn, stderr: str) -> str:
    """The part of a ThreadSanitizer report a kernel author needs: the location (argument or shared
    array), the two threads, the two lines, and what orders such accesses on a GPU."""
    lines = sanitized.report_lines(stderr)
    names = dict(_THREAD.findall(stderr))
    acc = _accesses(lines, names)
    head = f"race check: kernel '{fn.name}' has a data race"
    if len(acc) < 2:
        return head + "\n\n--- ThreadSanitizer report ---\n" + "\n".join(lines[-60:])
    now, before = acc[0], acc[1]
    location = _location(fn, stderr, now.addr, now.size)
    other = _block(now.thread) != _block(before.thread)
    # A worker's fibers are named for the block they run now: the earlier access of another block may
    # have come from an earlier block of that worker, but its thread index is right.
    earlier = f"thread {before.thread.split(' thread ')[-1]} of another block" if other else before.thread
    if not other:
        earlier += _fiber_mates(before.thread, stderr)
    parts = [f"{head} on {location}",
             f"  {now.kind} by {now.thread} at {now.where or '?'}",
             f"  {before.kind} by {earlier} at {before.where or '?'} (before it, with nothing between "
             "them that orders the two)",
             "  " + _advice(now, before, location)]
    kept = [ln for ln in lines if not re.match(r"\s*#\d+ ", ln) or not any(s in ln for s in _INTERNAL)]
    cut = next((k for k, ln in enumerate(kept) if _THREAD.search(ln)), len(kept))
    return "\n".join(parts) + "\n\n--- ThreadSanitizer report (executor frames left out) ---\n" + \
        "\n".join(kept[:cut][-40:])


def run(fn, cfg, packed, *, keep_results: bool = True) -> None:
    """Run one launch of `fn` under ThreadSanitizer; copy results back (``keep_results``) or raise
    KernelRaceError at the first race."""
    def check(proc):
        if proc.returncode == 87 or "WARNING: ThreadSanitizer" in proc.stderr:
            raise KernelRaceError(explain(fn, proc.stderr))
    sanitized.run(fn, cfg, packed, sanitizer="thread", check="race check", options=OPTIONS, explain=check,
                  keep_results=keep_results)
