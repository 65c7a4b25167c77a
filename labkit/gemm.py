"""Moved: the GEMM ladder's launches are labkit.ops.gemm; its study against cuBLAS is
labkit.ladder.sgemm.  Old names resolve from their new homes:

    gemm, gemm_few_rows, Dense, gemm_launch_config, splits_for, splitk_slices, few_rows_slices,
    VARIANTS, DEFAULT_PARAMS, ROWS_MAX, BIG_TILES      -> labkit.ops.gemm
    sgemm_ladder, ladder_table, LADDER                 -> labkit.ladder.sgemm
"""
from .moved import forwarding

__getattr__, __dir__ = forwarding(__name__, "labkit.ops.gemm", {
    "sgemm_ladder": "labkit.ladder.sgemm", "ladder_table": "labkit.ladder.sgemm", "LADDER": "labkit.ladder.sgemm",
})
