"""The CUDA C kernel families of the series, one ``*.cu`` file each.

Notebooks show a kernel by reading it from here (never a pasted copy):

    print(labkit.kernels.excerpt("conv_naive", "conv_naive"))
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..loader import KERNEL_DIR, kernel_path


def families() -> list[str]:
    """The kernel families that ship with labkit."""
    return sorted(p.stem for p in KERNEL_DIR.glob("*.cu"))


def source(family: str) -> str:
    """The whole text of labkit/kernels/<family>.cu."""
    return kernel_path(family).read_text()


def excerpt(family: str, kernel: str | None = None) -> str:
    """One kernel (or __device__ function) of a family, with the comment block above it; the whole
    file if kernel is None.

    Raises KeyError if the family has no such kernel, so a rename fails loudly.
    """
    text = source(family)
    if kernel is None:
        return text
    lines = text.splitlines()
    pat = re.compile(rf"__global__\b.*\b{re.escape(kernel)}\s*\(|\b{re.escape(kernel)}\s*\(.*$")
    start = next((i for i, ln in enumerate(lines)
                  if ("__global__" in ln or "__device__" in ln) and pat.search(ln)), None)
    if start is None:
        # the name may be on the line after `__global__ void`
        start = next((i for i, ln in enumerate(lines)
                      if re.search(rf"\b{re.escape(kernel)}\s*\(", ln)
                      and i > 0 and "__global__" in lines[i - 1]), None)
        if start is None:
            raise KeyError(f"labkit/kernels/{family}.cu has no kernel {kernel!r}")
        start -= 1
    # include template lines and the comment block just above
    while start > 0 and (lines[start - 1].startswith(("//", "template")) or
                         lines[start - 1].strip().startswith("extern")):
        start -= 1
    return _through_body(lines, start)


def _through_body(lines: list[str], start: int) -> str:
    """lines[start:] up to the line that closes the first brace opened from ``start`` on."""
    depth, end, opened = 0, start, False
    for i in range(start, len(lines)):
        depth += lines[i].count("{") - lines[i].count("}")
        opened = opened or "{" in lines[i]
        if opened and depth <= 0:
            end = i
            break
    return "\n".join(lines[start:end + 1])


def excerpt_file(path: str | os.PathLike, name: str | None = None) -> str:
    """One function of a CUDA C file outside labkit/kernels (a kernel exercise, a whole program beside
    the notebooks: ``excerpt_file("exercises/02_host_code.cu", "main")``), with the comment block
    above it; the whole file if name is None.  The function is found by its definition: a line that
    starts at the margin and names it before a parenthesis.  Raises KeyError if there is none."""
    text = Path(path).read_text()
    if name is None:
        return text
    lines = text.splitlines()
    pat = re.compile(rf"^(?!\s|//|#).*\b{re.escape(name)}\s*\(")
    start = next((i for i, ln in enumerate(lines) if pat.search(ln) and not ln.rstrip().endswith(";")), None)
    if start is None:
        raise KeyError(f"{Path(path).name} defines no function {name!r}")
    while start > 0 and lines[start - 1].startswith(("//", "template")):
        start -= 1
    return _through_body(lines, start)
