"""Where the headers of the CUDA C++ Core Libraries (CCCL: Thrust, libcu++) are, for whole programs.

A program that includes ``<thrust/...>`` or ``<cuda/std/...>`` is built against CCCL's own headers,
with Thrust's C++ system standing in for its CUDA system (program.py; program_include/labkit_cccl.h):
the algorithms run on the host, over the executor's device memory.  The headers come from, in order:
$LABKIT_CCCL_INCLUDE; the ``nvidia-cuda-cccl`` wheel (``pip install nvidia-cuda-cccl``, part of the
``lab`` extra); a CUDA toolkit ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda).  Only headers as new as
MIN_THRUST_VERSION are taken: that is the release they were tried with here.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import re
from pathlib import Path

MIN_THRUST_VERSION = 300500      # Thrust 3.5 (the nvidia-cuda-cccl 13.3.5 wheel): 3.0 (CUDA 13.0's) mixes std:: and
                                 # cuda::std:: integral constants in a host compilation
ADVICE = ("install the CUDA C++ Core Libraries' headers (pip install nvidia-cuda-cccl), or set LABKIT_CCCL_INCLUDE "
          "to a folder that holds thrust/ and cuda/std/")


def thrust_version(folder: Path) -> int | None:
    """THRUST_VERSION of the headers in ``folder`` (None: no Thrust there)."""
    try:
        text = (folder / "thrust" / "version.h").read_text(errors="replace")
    except OSError:
        return None
    m = re.search(r"#\s*define\s+THRUST_VERSION\s+(\d+)", text)
    return int(m.group(1)) if m else None


def _candidates() -> list[Path]:
    out: list[Path] = []
    if os.environ.get("LABKIT_CCCL_INCLUDE"):
        out.append(Path(os.environ["LABKIT_CCCL_INCLUDE"]))
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        out += [Path(root) / "cu13" / "include" / "cccl", Path(root) / "cuda_cccl" / "include"]
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            out += [Path(home) / "include" / "cccl", Path(home) / "include"]
    return out


@functools.lru_cache(maxsize=None)
def include_dir() -> Path | None:
    """The first folder of CCCL headers new enough (see the module's note), or None."""
    for folder in _candidates():
        version = thrust_version(folder)
        if version is not None and version >= MIN_THRUST_VERSION and (folder / "cuda" / "std" / "version").is_file():
            return folder.resolve()
    return None
