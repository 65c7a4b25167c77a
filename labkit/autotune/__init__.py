"""Autotuning on first use, on any GPU: each family with tunables (tiles, threads, split-K slices)
asks ``choose`` for a problem's configuration when it makes a plan.

    config = choose(Problem("conv_implicit", ("conv_implicit",), key, candidates, prepare))

``choose`` answers, in this order: the disk cache's winner for this GPU, kernel source and problem
(labkit.autotune.cache); a search now (labkit.autotune.search: every candidate checked on fresh data,
then timed with CUDA events, within $LABKIT_AUTOTUNE_BUDGET seconds), whose winner goes to the disk
cache for later processes; else the first candidate, which is what labkit runs untuned (a shipped
table's entry for this GPU, or defaults derived from the device's properties).  Whether it searches:
labkit.autotune.settings ($LABKIT_AUTOTUNE).  Never on the CPU executor (its times say nothing
about a GPU), and never while a CUDA graph is being captured (a search launches and synchronizes):
tune ahead with ``labkit.tune``.

``history()`` lists the decisions of this process (where each answer came from, the search's cost):
notebook 05 shows it.  ``tuning_status()`` / ``describe()``: what is tuned for this GPU and what the
autotuner will do on it (notebook 00).
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Callable

from .. import backends
from .cache import DiskCache, candidates_hash, fingerprint, source_hash
from .search import Bench, Outcome, default_workers, search
from .settings import BUDGET_ENV, MODE_ENV, budget_s, mode
from .status import describe, history_table, tuning_status

__all__ = ["Problem", "Bench", "Outcome", "choose", "history", "clear_history", "forced", "disk_cache",
           "fingerprint", "mode", "budget_s", "MODE_ENV", "BUDGET_ENV", "tuning_status", "describe", "history_table"]


@dataclass
class Problem:
    """One tuning problem.  ``candidates``: JSON-able configurations, the first what runs untuned;
    ``key``: the shape and options, batch included; ``kernels``: the kernel families whose source
    decides; ``prepare()``: the Bench, made only if a search runs; ``shipped``: the first candidate
    is a shipped table's entry for this GPU (then mode 'auto' does not search)."""
    family: str
    kernels: tuple
    key: str
    candidates: list
    prepare: Callable[[], Bench]
    shipped: bool = False
    # The key without the batch size, where the candidates' kernels do not depend on it: the searches
    # of one shape at several batch sizes then share one build budget (see _search).
    shape: str | None = None


_HISTORY: list[dict] = []
_LOCK = threading.Lock()
_CACHES: dict[str, DiskCache] = {}
_FORCED: list[str] = []
_SEARCHING: dict[str, threading.Lock] = {}     # one lock per problem key: one search per problem at a time
_NO_WINNER: set = set()                        # keys whose search found no right candidate
_WARNED: set = set()
# Searches under way in this process.  Each is promised a first round of builds of the workers'
# share it has when it starts (at least MIN_FIRST_ROUND), the rest only while its budget lasts:
# thirty layers of MobileNetV2 searching at once, each promised sixteen compiles, made the host
# compile 480 modules (a minute on 16 cores) before any search could end.
_ACTIVE = [0]
MIN_FIRST_ROUND = 4
# Per shape (Problem.shape): the search seconds spent on it so far in this process, and the
# candidates that built.  A candidate's kernel is compiled for the layer's shape, not its batch size:
# the search at a later batch size re-times what earlier ones built (their builds are cache hits) and
# compiles new candidates only while the shape's budget lasts.  Searched batch size by batch size
# (labkit.tune), AlexNet's eleven otherwise each spent a budget compiling more of its layers' tiles.
_SHAPES: dict[str, dict] = {}


def disk_cache() -> DiskCache | None:
    """This GPU's disk cache (None on the CPU executor); one object per file, which remembers what
    it last read until the file changes."""
    fresh = DiskCache.for_this_gpu()
    if fresh is None:
        return None
    with _LOCK:
        return _CACHES.setdefault(str(fresh.path), fresh)


class forced:
    """``with forced("on"):`` searches whatever the environment says (labkit.tune); "off" never."""

    def __init__(self, how: str):
        if how not in ("on", "off", "auto"):
            raise ValueError(f"forced() takes 'on', 'off' or 'auto', got {how!r}")
        self.how = how

    def __enter__(self):
        _FORCED.append(self.how)
        return self

    def __exit__(self, *exc):
        _FORCED.pop()
        return False


def _mode() -> str:
    return _FORCED[-1] if _FORCED else mode()


def _capturing() -> bool:
    import cupy
    return bool(cupy.cuda.get_current_stream().is_capturing())


def _note(problem: Problem, source: str, config: dict, outcome: Outcome | None = None, entry: dict | None = None):
    row = {"family": problem.family, "key": problem.key, "source": source, "config": config,
           "candidates": len(problem.candidates)}
    if outcome is not None:
        row.update(outcome.entry())
    elif entry is not None:
        row.update({k: entry.get(k) for k in ("ms", "first_ms", "seconds", "timed")})
    with _LOCK:
        _HISTORY.append(row)


def choose(problem: Problem) -> dict:
    """The configuration to run ``problem`` with (see the module's docstring)."""
    candidates = problem.candidates
    if not candidates:
        raise ValueError(f"{problem.family} {problem.key}: no candidate configuration")
    first = candidates[0]
    if backends.current() != "cuda":
        return first
    cache = disk_cache()
    # The kernels' source and the candidate list both decide: a winner found among fewer candidates
    # (before a family offered new tiles) is searched again, not looked up.
    key = f"{problem.family}|{source_hash(tuple(problem.kernels))}|{candidates_hash(candidates)}|{problem.key}"
    hit = _cached(problem, cache, key)
    if hit is not None:
        return hit
    how = _mode()
    if how == "off" or (how == "auto" and problem.shipped) or len(candidates) == 1:
        _note(problem, "shipped table" if problem.shipped else "default", first)
        return first
    # Layers of one shape (a ResNet's blocks, MobileNetV2's repeated bottlenecks) plan side by side in
    # threads: one searches, the others wait for its winner in the cache instead of searching too.
    with _LOCK:
        same = _SEARCHING.setdefault(key, threading.Lock())
    with same:
        hit = _cached(problem, cache, key)     # another layer's search may have found it meanwhile
        if hit is not None:
            return hit
        if key in _NO_WINNER:       # searched in this process, nothing passed: not again
            _note(problem, "default (no candidate passed)", first)
            return first
        return _search(problem, cache, key)


def _cached(problem: Problem, cache: DiskCache, key: str) -> dict | None:
    """The disk cache's winner for ``key`` (noted in the history), or None.  A winner that is not one
    of today's candidates (forged, or stale) is never launched."""
    hit = cache.get(key)
    if hit is None or hit["config"] not in problem.candidates:
        return None
    _note(problem, "cache", hit["config"], entry=hit)
    return hit["config"]


def _search(problem: Problem, cache: DiskCache, key: str) -> dict:
    """A search now (or the default where none can run), its winner put in the disk cache."""
    candidates = problem.candidates
    first = candidates[0]
    if _capturing():
        if problem.family not in _WARNED:
            _WARNED.add(problem.family)
            warnings.warn(f"labkit.autotune: {problem.family} {problem.key} is first met inside a CUDA graph "
                          "capture, where nothing can be timed: it runs its default; tune ahead with "
                          "labkit.tune(model, batch_sizes)", stacklevel=4)
        _note(problem, "default (capturing)", first)
        return first
    with _LOCK:
        _ACTIVE[0] += 1
        share = max(MIN_FIRST_ROUND, default_workers() // _ACTIVE[0])
        # the family, its kernels' source hash (the key's second field) and the shape
        shape = _SHAPES.setdefault(f"{problem.family}|{key.split('|')[1]}|{problem.shape}",
                                   {"spent": 0.0, "built": []}) if problem.shape else None
    budget = budget_s()
    if shape is not None:
        built = [c for c in candidates[1:] if c in shape["built"]]
        candidates = [first] + built + [c for c in candidates[1:] if c not in shape["built"]]
        share = max(share, 1 + len(built))
        budget = max(0.0, budget - shape["spent"])
    try:
        outcome = search(candidates, problem.prepare(), budget, first=share)
    finally:
        with _LOCK:
            _ACTIVE[0] -= 1
    if shape is not None:
        with _LOCK:
            shape["spent"] += outcome.seconds
            shape["built"] += [r["config"] for r in outcome.rows if "ms" in r and r["config"] not in shape["built"]]
    if outcome.config is None:
        reasons = "; ".join(r["error"] for r in outcome.rows[:3])
        warnings.warn(f"labkit.autotune: no candidate of {problem.family} {problem.key} passed its check "
                      f"({reasons}): running the default", stacklevel=4)
        _note(problem, "default (no candidate passed)", first, outcome)
        _NO_WINNER.add(key)
        return first
    cache.put(key, outcome.entry())
    _note(problem, "search", outcome.config, outcome)
    return outcome.config


def history() -> list[dict]:
    """This process's decisions, oldest first: family, key, source ("cache", "search", "shipped
    table", "default", ...), config, and for a search its cost (seconds, timed, failed) and the
    winner's and the first candidate's times."""
    with _LOCK:
        return [dict(r) for r in _HISTORY]


def clear_history() -> None:
    with _LOCK:
        _HISTORY.clear()
