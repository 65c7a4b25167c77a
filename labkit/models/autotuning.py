"""Tuning a network ahead of time for the batch sizes it will run: ``labkit.tune``.

    report = labkit.tune(AlexNet(), [1, 8, 64, 256])     # each batch size's plan run once, searching
    report.seconds, report.searched, report.from_cache   # what it cost, where the answers came from

Each batch size's plan runs once, eagerly, with the autotuner searching (labkit.autotune; asked for
by name, it searches whatever $LABKIT_AUTOTUNE says): every layer asks for its configuration at that size, the searches' winners
land in the disk cache, and later processes (and the CUDA graph, captured afterwards) find them
there.  On the CPU executor nothing is searched: the plans are made, the report says so.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from .. import autotune, backends
from ..measure.sweep import progress_bar

__all__ = ["TuneReport", "tune"]


@dataclass
class TuneReport:
    """What ``tune`` did: the batch sizes, the seconds it took, and the autotuner's decisions
    (labkit.autotune.history rows) made meanwhile."""
    batch_sizes: list
    seconds: float
    decisions: list = field(default_factory=list)

    @property
    def searched(self) -> int:
        return sum(r["source"] == "search" for r in self.decisions)

    @property
    def from_cache(self) -> int:
        return sum(r["source"] == "cache" for r in self.decisions)

    @property
    def search_seconds(self) -> float:
        return sum(r.get("seconds") or 0.0 for r in self.decisions if r["source"] == "search")

    def summary(self) -> str:
        where = backends.current()
        if where != "cuda":
            return (f"{len(self.batch_sizes)} batch sizes planned in {self.seconds:.1f} s on the CPU executor: "
                    "nothing is tuned there (its times say nothing about a GPU)")
        return (f"{len(self.batch_sizes)} batch sizes in {self.seconds:.1f} s: {len(self.decisions)} layer "
                f"configurations, {self.searched} searched ({self.search_seconds:.1f} s), {self.from_cache} from "
                "the disk cache, the rest from a shipped table or the defaults")


def tune(model, batch_sizes, *, progress: bool = True) -> TuneReport:
    """Run ``model``'s plan (a labkit.models.plan.PlannedModel) once at each batch size, with the
    autotuner searching every configuration its disk cache does not have."""
    if not hasattr(model, "plan"):
        raise TypeError(f"tune() takes a network with plan(N) (FashionNet, AlexNet, MobileNetV2), got "
                        f"{type(model).__name__}")
    sizes = [int(n) for n in batch_sizes]
    if not sizes or any(n < 1 for n in sizes):
        raise ValueError(f"batch_sizes must be positive integers, got {batch_sizes!r}")
    before = len(autotune.history())
    start = time.perf_counter()
    with autotune.forced("on"):          # asked for by name: it searches even where $LABKIT_AUTOTUNE=0
        # One batch size after another: side by side, the searches of the later ones would spend
        # their budgets waiting for the compiles all of them share, and try fewer candidates.
        for n in progress_bar(sizes, desc="tuning", show=progress):
            model.plan(n).eager()
    if backends.current() == "cuda":
        import cupy
        cupy.cuda.get_current_stream().synchronize()
    return TuneReport(sizes, time.perf_counter() - start, autotune.history()[before:])
