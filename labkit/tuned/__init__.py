"""The tuned tables: for each GPU name, the launch parameters a sweep found fastest, per shape.

    entry = lookup(CONV_TUNED, "C6_H22_W22_M16_K5")      # this GPU's winner, or None
    write_entry(GEMM, "NVIDIA H100 80GB HBM3", "M4096_N4096_K4096", {...})

Files (JSON, committed): ``conv_tuned.json`` (notebook 05's kernel, labkit.ops.tuned_config),
``conv_implicit.json`` (the implicit GEMMs' tiles, labkit.ops.implicit), ``gemm.json`` (the GEMM's
tiles, labkit.ops.gemm), ``depthwise.json`` (the depthwise tiles, labkit.ops.depthwise), ``conv_small.json`` (the direct 3x3
kernels' tiles, labkit.ops.conv_small).  A GPU that
is not in a table, and the CPU executor, get each op's default, which is sensible everywhere; on a
GPU the autotuner (labkit.autotune) searches where a table has no entry, and the tables only give it
a head start: nothing needs them.  Tables are read once per version of the file.
"""
from __future__ import annotations

import functools
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from ..device_query import device

HERE = Path(__file__).resolve().parent
CONV_TUNED = HERE / "conv_tuned.json"
CONV_IMPLICIT = HERE / "conv_implicit.json"
GEMM = HERE / "gemm.json"
DEPTHWISE = HERE / "depthwise.json"
CONV_SMALL = HERE / "conv_small.json"

__all__ = ["SHIPPED_ENV", "CONV_TUNED", "CONV_IMPLICIT", "GEMM", "DEPTHWISE", "CONV_SMALL", "read_table", "write_entry", "lookup", "gpu_name"]


def read_table(path: Path) -> dict:
    """A tuned table, parsed once per version of the file ({"gpus": {}} if there is none)."""
    try:
        stamp = Path(path).stat().st_mtime_ns
    except FileNotFoundError:
        return {"gpus": {}}
    return _parse(str(path), stamp)


@functools.lru_cache(maxsize=16)
def _parse(path: str, stamp: int) -> dict:
    return json.loads(Path(path).read_text())


def gpu_name() -> str | None:
    """The name the tables know the current GPU by; None on the CPU executor."""
    dev = device()
    return dev.name if dev.is_gpu else None


SHIPPED_ENV = "LABKIT_SHIPPED_TABLES"


def lookup(path: Path, key: str, device_name: str | None = None) -> dict | None:
    """The entry of ``key`` for ``device_name`` (default: the current GPU); None where there is none,
    and always with $LABKIT_SHIPPED_TABLES=0 (a GPU measured as if the tables did not know it)."""
    if os.environ.get(SHIPPED_ENV, "").strip() == "0":
        return None
    name = device_name if device_name is not None else gpu_name()
    if not name:
        return None
    return read_table(path).get("gpus", {}).get(name, {}).get(key)


def write_entry(path: Path, device_name: str, key: str, entry: dict, *, merge: bool = False) -> None:
    """Set table["gpus"][device_name][key] = entry (dated); ``merge`` keeps the entry's other fields."""
    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {"gpus": {}}
    slot = data.setdefault("gpus", {}).setdefault(device_name, {})
    stamped = {**entry, "date": datetime.now(timezone.utc).date().isoformat()}
    slot[key] = {**slot.get(key, {}), **stamped} if merge else stamped
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
