"""What is tuned for the device in use, and what the autotuner will do on it (notebook 00 prints it).

    status = tuning_status()       # a dict: gpu, fingerprint, shipped entries per table, mode, cache
    print(describe(status))        # the same, in sentences
    print(history_table(autotune.history()))   # the decisions made, one row each (notebook 05)

On the CPU executor nothing is tuned (its times say nothing about a GPU): every op runs its default.
"""
from __future__ import annotations

import os
from pathlib import Path

from .. import backends
from .. import tuned
from .cache import FOLDER, DiskCache
from .settings import budget_s, mode

__all__ = ["SHIPPED_TABLES", "tuning_status", "describe", "history_table"]

# The shipped tables by the name status reports them under.
SHIPPED_TABLES = {"conv_tuned": tuned.CONV_TUNED, "conv_implicit": tuned.CONV_IMPLICIT, "gemm": tuned.GEMM,
                  "depthwise": tuned.DEPTHWISE, "conv_small": tuned.CONV_SMALL}


def tuning_status() -> dict:
    """For the backend in use: ``backend``, ``gpu`` (None on the CPU executor), ``fingerprint`` (what
    makes a cached winner this GPU's), ``shipped`` (entries of each shipped table for this GPU's
    name), ``shipped_ignored`` ($LABKIT_SHIPPED_TABLES=0), ``mode`` and ``budget_s`` (the settings),
    ``cache_path`` and ``cache_entries`` (the disk cache of this fingerprint: None and 0 on the CPU)."""
    on_gpu = backends.current() == "cuda"
    gpu = tuned.gpu_name() if on_gpu else None
    shipped = {name: len(tuned.read_table(path).get("gpus", {}).get(gpu, {})) if gpu else 0
               for name, path in SHIPPED_TABLES.items()}
    cache = DiskCache.for_this_gpu() if on_gpu else None
    return {"backend": backends.current(), "gpu": gpu, "fingerprint": cache.fp if cache else None,
            "shipped": shipped, "shipped_ignored": os.environ.get(tuned.SHIPPED_ENV, "").strip() == "0",
            "mode": mode(), "budget_s": budget_s(),
            "cache_path": str(cache.path) if cache else None, "cache_entries": len(cache.entries()) if cache else 0}


def describe(status: dict | None = None) -> str:
    """``status`` (default: tuning_status()) in a few sentences: the GPU, its shipped entries, and
    what the autotuner does on it under the current settings."""
    s = tuning_status() if status is None else status
    if s["gpu"] is None:
        return (f"Backend {s['backend']!r}: the CPU executor. Nothing is tuned here (its times say nothing "
                "about a GPU): every op runs its default configuration, and no search runs.")
    fp = s["fingerprint"] or {}
    lines = [f"GPU: {s['gpu']} (compute capability {'.'.join(map(str, fp.get('compute_capability', [])))}, "
             f"{fp.get('sms')} SMs, CUDA runtime {fp.get('cuda_runtime')}, driver {fp.get('cuda_driver')}, "
             f"NVRTC {'.'.join(map(str, fp.get('nvrtc') or [])) or 'unknown'})"]
    known = {k: n for k, n in s["shipped"].items() if n}
    if s["shipped_ignored"]:
        lines.append("Shipped tables: ignored ($LABKIT_SHIPPED_TABLES=0).")
    elif known:
        lines.append("Shipped tables with entries for this GPU: "
                     + ", ".join(f"{k} ({n} shapes)" for k, n in known.items()) + ".")
    else:
        lines.append("Shipped tables: no entry for this GPU (labkit/tuned/*.json know other GPUs).")
    # The file by its place in the kernel cache folder, not by a path of this machine.
    lines.append(f"Disk cache: {FOLDER}/{Path(s['cache_path']).name} in the kernel cache folder "
                 f"($LABKIT_CACHE_DIR, else ~/.cache/labkit), {s['cache_entries']} winners so far.")
    if s["mode"] == "off":
        lines.append("LABKIT_AUTOTUNE=0: no search; the disk cache's winners, else the shipped tables' "
                     "entries, else defaults derived from the device's properties.")
    elif s["mode"] == "on":
        lines.append(f"LABKIT_AUTOTUNE=1: each shape the disk cache lacks is searched on first use "
                     f"(budget {s['budget_s']:g} s a search), shipped entries included; winners go to the disk cache.")
    else:
        lines.append(f"LABKIT_AUTOTUNE=auto: a shape that neither the disk cache nor a shipped table knows "
                     f"is searched on first use (budget {s['budget_s']:g} s a search); winners go to the disk cache.")
    return "\n".join(lines)


def _ms(v) -> str:
    return f"{v:.3f}" if isinstance(v, (int, float)) else "-"


def history_table(rows: list[dict]) -> str:
    """labkit.autotune.history() rows as a text table: family, key, where the answer came from, the
    configuration, and for a search (or a cached search's winner) the winner's and the first
    candidate's times (ms) and the candidates timed of those offered."""
    if not rows:
        return "(no decisions: nothing asked the autotuner, or it ran on the CPU executor)"
    table = [("family", "key", "source", "config", "ms", "first ms", "timed")]
    for r in rows:
        cfg = " ".join(f"{k}={v}" for k, v in (r.get("config") or {}).items())
        timed = f"{r['timed']}/{r.get('candidates', '?')}" if isinstance(r.get("timed"), int) else "-"
        table.append((str(r.get("family")), str(r.get("key")), str(r.get("source")), cfg,
                      _ms(r.get("ms")), _ms(r.get("first_ms")), timed))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table)
