"""The studies: what climbs the ladder of kernels and measures each rung.  Nothing here launches a
kernel of its own; every kernel is an op (labkit.ops).

    seed       the seed's two layers: check, compare with cuDNN and the floor, table (notebooks 02-05)
    tuning     conv_tuned's launch-parameter sweep and its table (notebook 05)
    sgemm      the GEMM ladder against cuBLAS, and the GEMM's tile sweep (notebook 06)
    implicit   the implicit GEMMs' tile sweep, AlexNet's convolutions against cuDNN (notebook 06)
    breakdown  one layer's copies and kernel, nvprof-style (notebook 02)
    harness    random inputs, the check before every timing

ladder.check returns a labkit.verdict.Verdict: the verdict, and what is wrong in words.

    from labkit import ladder
    ladder.check("tiled"); rows = ladder.compare(["naive", "tiled"], batches=[100]); print(ladder.table(rows))
    ladder.RUNGS        # the rungs in order: name, kernel, idea, notebook
"""
from __future__ import annotations

from ..checks import rel_error
from ..ops.rungs import RUNG_NAMES, RUNGS
from . import breakdown, harness, implicit, seed, sgemm, tuning
from .breakdown import conv_breakdown
from .harness import checked_time, random_case, random_layer, reference_activation
from .seed import PEER, SEED_LAYERS, TILE_WIDTH, check, compare, table
from ..verdict import Verdict

__all__ = ["RUNGS", "RUNG_NAMES", "check", "Verdict", "compare", "table", "SEED_LAYERS", "TILE_WIDTH", "PEER",
           "random_layer", "random_case", "reference_activation", "checked_time", "rel_error", "conv_breakdown",
           "seed", "tuning", "sgemm", "implicit", "breakdown", "harness"]
