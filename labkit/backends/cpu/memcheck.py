"""The memory check: one launch under AddressSanitizer, in a process of its own (see sanitized.py).

Every array is a heap block of exactly its size, and so is every ``__shared__`` variable, so a read
or write one element past either is reported with the kernel's source line and the array's name.
"""
from __future__ import annotations

import re

from ...errors import KernelMemoryError
from . import sanitized

OPTIONS = "detect_leaks=0:exitcode=86:halt_on_error=1:allocator_may_return_null=1"


def explain(fn, stderr: str) -> str:
    """The part of an AddressSanitizer report a student needs, with argument names."""
    regions = sanitized.argument_regions(stderr)
    shared = sanitized.shared_regions(stderr)
    lines = sanitized.report_lines(stderr)
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
            what = f"{m.group(1)} bytes {side} the {n}-byte {sanitized.shared_name(name)}"
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


def run(fn, cfg, packed, *, keep_results: bool = True) -> None:
    """Run one launch of `fn` under AddressSanitizer; copy results back (``keep_results``) or raise
    KernelMemoryError."""
    def check(proc):
        if proc.returncode == 86 or "AddressSanitizer" in proc.stderr:
            raise KernelMemoryError(explain(fn, proc.stderr))
        if proc.returncode not in (0, 3):
            raise KernelMemoryError(f"memory check: kernel '{fn.name}' crashed (exit status "
                                    f"{proc.returncode}):\n" + proc.stderr[-4000:])
    sanitized.run(fn, cfg, packed, sanitizer="address", check="memory check", options=OPTIONS, explain=check,
                  keep_results=keep_results)
