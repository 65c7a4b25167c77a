"""One search: every candidate compiled (side by side, in threads), checked, then timed with CUDA
events, until the time budget is spent; the fastest right one wins.

A candidate that fails to compile or launch, writes NaN anywhere (an output never written), or
differs from the float64 samples is dropped with its reason.  The candidates build in rounds, as
many at once as there are workers (a compile takes seconds: NVRTC on a specialised kernel); the
first round always runs, whatever the budget, and holds the first candidate (what labkit runs
untuned), so a search never ends with less than the default; the budget decides whether another
round starts.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .. import backends
from ..backends.clock import times_ms
from ..backends.parallel import run_parallel

__all__ = ["Bench", "Outcome", "search", "GPU_TIMING"]

# Searches may run side by side (a network makes its layers' plans in threads, labkit.backends.parallel):
# their builds do, but their checks and timings take turns, so no candidate is timed while another
# search's kernels share the GPU with it.
GPU_TIMING = threading.Lock()


class Bench(Protocol):
    """A problem's data on the GPU, made once per search."""

    def build(self, config: dict) -> Callable[[], None]:
        """Compile and plan ``config``; a launch() that runs it on the bench's data."""

    def check(self, launch: Callable[[], None]) -> str | None:
        """Run ``launch`` on a poisoned output: None if right, else what is wrong."""


@dataclass
class Outcome:
    """What a search found: the winner (None if no candidate was right), each candidate's row."""
    config: dict | None
    ms: float | None
    first_ms: float | None
    rows: list = field(default_factory=list)
    seconds: float = 0.0
    candidates: int = 0
    build_seconds: float = 0.0      # summed over the candidates (they build side by side)

    def entry(self) -> dict:
        """The disk cache's record of it."""
        tried = [r for r in self.rows if "ms" in r]
        return {"config": self.config, "ms": self.ms, "first_ms": self.first_ms, "timed": len(tried),
                "failed": len(self.rows) - len(tried), "candidates": self.candidates,
                "seconds": round(self.seconds, 3), "build_seconds": round(self.build_seconds, 3)}


def _build(bench: Bench, config: dict):
    """(launch or None, error or None, seconds the build took)."""
    t = time.perf_counter()
    try:
        return bench.build(config), None, time.perf_counter() - t
    except Exception as e:            # a candidate the compiler or the GPU refuses: dropped, with why
        return None, f"{type(e).__name__}: {e}"[:300], time.perf_counter() - t


def _time(launch: Callable[[], None]) -> float:
    """Median ms of a launch: a few back to back (the first is a warm-up); fewer where one is long.
    CUDA events on a GPU (the CPU executor's clock where a test runs a search there)."""
    gpu = backends.current() == "cuda"
    once = times_ms(launch, warmup=1, repeat=1, sync=True, on_gpu=gpu)[0]
    repeat = 3 if once > 2.0 else 9
    return statistics.median(times_ms(launch, warmup=1, repeat=repeat, sync=False, on_gpu=gpu))


def search(candidates: list[dict], bench: Bench, budget_s: float, *, workers: int | None = None) -> Outcome:
    """Check and time ``candidates`` (the first always, the rest while ``budget_s`` lasts)."""
    start = time.perf_counter()
    workers = max(1, workers or min(16, os.cpu_count() or 1))
    rows: list[dict] = []
    building = 0.0
    i = 0
    while i < len(candidates):
        if i and time.perf_counter() - start > budget_s:
            break
        chunk = candidates[i:i + workers]      # one round of builds side by side, the first candidate's among them
        built = run_parallel([lambda c=c: _build(bench, c) for c in chunk], workers)
        for config, (launch, error, build_s) in zip(chunk, built):
            building += build_s
            with GPU_TIMING:          # one search times at a time (a network plans its layers in threads)
                if error is None:
                    try:
                        error = bench.check(launch)
                    except Exception as e:
                        error = f"{type(e).__name__}: {e}"[:300]
                if error is not None:
                    rows.append({"config": config, "error": error})
                    continue
                rows.append({"config": config, "ms": _time(launch)})
        i += len(chunk)
    timed = [r for r in rows if "ms" in r]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    first = rows[0].get("ms") if rows else None
    return Outcome(best and best["config"], best and best["ms"], first, rows, time.perf_counter() - start,
                   len(candidates), building)
