"""One search: every candidate compiled (side by side, in threads), checked, then timed with CUDA
events, until the time budget is spent; the fastest right one wins.

A candidate that fails to compile or launch, writes NaN anywhere (an output never written), or
differs from the float64 samples is dropped with its reason.  The candidates build side by side, as
many at once as there are workers (a compile takes seconds: NVRTC on a specialised kernel), and each
is checked and timed as soon as it is built; the first ``workers`` always build, whatever the budget,
the first candidate (what labkit runs untuned) among them, so a search never ends with less than the
default; the budget decides whether another build starts.  Where several searches run at once (a
network plans its layers side by side) each is promised a share of the workers, not all of them:
the compiles they start are what the host's cores must get through before any of them ends.  A
candidate whose first launch is far slower than the best so far is timed once, not repeated
(HOPELESS).
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .. import backends
from ..backends.clock import times_ms
from ..backends.parallel import on_this_device

__all__ = ["Bench", "Outcome", "search", "default_workers", "GPU_TIMING"]

# Searches may run side by side (a network makes its layers' plans in threads, labkit.backends.parallel):
# their builds do, but their checks and timings take turns, so no candidate is timed while another
# search's kernels share the GPU with it.  Reentrant: a thread that holds it to run a network (tune)
# may meet a layer that chooses on its first call, and search.
GPU_TIMING = threading.RLock()


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
    # Where the search's wall time went: its rounds of builds, waiting for another search's turn on
    # the GPU, checking and timing.
    wall: dict = field(default_factory=dict)

    def entry(self) -> dict:
        """The disk cache's record of it."""
        tried = [r for r in self.rows if "ms" in r]
        return {"config": self.config, "ms": self.ms, "first_ms": self.first_ms, "timed": len(tried),
                "failed": len(self.rows) - len(tried), "candidates": self.candidates,
                "seconds": round(self.seconds, 3), "build_seconds": round(self.build_seconds, 3),
                "wall": {k: round(v, 3) for k, v in self.wall.items()}}


def default_workers() -> int:
    """Builds side by side: one per core, at most 16."""
    return min(16, os.cpu_count() or 1)


def _build(bench: Bench, config: dict):
    """(launch or None, error or None, seconds the build took)."""
    t = time.perf_counter()
    try:
        return bench.build(config), None, time.perf_counter() - t
    except Exception as e:            # a candidate the compiler or the GPU refuses: dropped, with why
        return None, f"{type(e).__name__}: {e}"[:300], time.perf_counter() - t


# A candidate whose first timed launch takes this many times the best median so far cannot win: its
# one time stands (the repeats would only cost the search time on a large batch).  One launch of a
# kernel over LONG_MS varies by a few percent at most, so there a quarter slower is already out.
HOPELESS = 3.0
HOPELESS_LONG = 1.25
LONG_MS = 0.05


def _time(launch: Callable[[], None], best: float | None = None) -> float:
    """Median ms of a launch: a few back to back (the first is a warm-up); fewer where one is long,
    none where the first is HOPELESS times ``best``.  CUDA events on a GPU (the CPU executor's clock
    where a test runs a search there)."""
    gpu = backends.current() == "cuda"
    once = times_ms(launch, warmup=1, repeat=1, sync=True, on_gpu=gpu)[0]
    if best is not None and once > (HOPELESS_LONG if once > LONG_MS else HOPELESS) * best:
        return once
    repeat = 3 if once > 2.0 else 9
    return statistics.median(times_ms(launch, warmup=1, repeat=repeat, sync=False, on_gpu=gpu))


def search(candidates: list[dict], bench: Bench, budget_s: float, *, workers: int | None = None,
           first: int | None = None) -> Outcome:
    """Check and time ``candidates`` (the first ``first`` always, default ``workers``; the rest while
    ``budget_s`` lasts: none past the first where it is 0).

    Builds run ``workers`` at a time in threads and never wait for a round to finish: each candidate,
    taken in order, is checked and timed as soon as it is built, while later ones build; a new build
    starts as one is taken, until the budget is spent."""
    start = time.perf_counter()
    workers = max(1, workers or default_workers())
    first = max(1, first or workers)
    rows: list[dict] = []
    building = 0.0
    wall = dict.fromkeys(("build", "wait", "check", "time"), 0.0)
    with ThreadPoolExecutor(workers) as pool:
        pending = [pool.submit(on_this_device(lambda c=c: _build(bench, c))) for c in candidates[:first]]
        for i, config in enumerate(candidates):
            if i >= len(pending):
                break
            t0 = time.perf_counter()
            launch, error, build_s = pending[i].result()
            t1 = time.perf_counter()
            wall["build"] += t1 - t0           # waiting for this candidate's build (the others overlap)
            building += build_s
            nxt = len(pending)
            if nxt < len(candidates) and t1 - start <= budget_s:
                pending.append(pool.submit(on_this_device(lambda c=candidates[nxt]: _build(bench, c))))
            with GPU_TIMING:          # one search times at a time (a network plans its layers in threads)
                t2 = time.perf_counter()
                wall["wait"] += t2 - t1
                if error is None:
                    try:
                        error = bench.check(launch)
                    except Exception as e:
                        error = f"{type(e).__name__}: {e}"[:300]
                t3 = time.perf_counter()
                wall["check"] += t3 - t2
                if error is not None:
                    rows.append({"config": config, "error": error})
                    continue
                best = min((r["ms"] for r in rows if "ms" in r), default=None)
                rows.append({"config": config, "ms": _time(launch, best)})
                wall["time"] += time.perf_counter() - t3
    timed = [r for r in rows if "ms" in r]
    best = min(timed, key=lambda r: r["ms"]) if timed else None
    first = rows[0].get("ms") if rows else None
    return Outcome(best and best["config"], best and best["ms"], first, rows, time.perf_counter() - start,
                   len(candidates), building, wall)
