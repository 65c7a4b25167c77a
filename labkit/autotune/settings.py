"""How the autotuner is told what to do: environment variables, read on every decision (a notebook
may change them between cells).

    LABKIT_AUTOTUNE=0        never search: the disk cache's winners, else the shipped table's, else the
                             defaults derived from the device's properties
    LABKIT_AUTOTUNE=1        search every problem the disk cache has no winner for, even where a shipped
                             table has an entry (its entry is then the first candidate)
    (unset, or "auto")       search where neither the disk cache nor a shipped table has an entry
    LABKIT_AUTOTUNE_BUDGET   seconds after which a search starts no new build of a candidate; default 6
                             (its first round always runs: a compile takes seconds).  A layer's
                             searches at several batch sizes share it (their kernels compile per shape)
    LABKIT_SHIPPED_TABLES=0  ignore labkit/tuned/*.json (a GPU measured as if it had no entries)
"""
from __future__ import annotations

import math
import os

__all__ = ["MODE_ENV", "BUDGET_ENV", "DEFAULT_BUDGET_S", "mode", "budget_s"]

MODE_ENV = "LABKIT_AUTOTUNE"
BUDGET_ENV = "LABKIT_AUTOTUNE_BUDGET"
DEFAULT_BUDGET_S = 6.0
MODES = {"0": "off", "off": "off", "1": "on", "on": "on", "": "auto", "auto": "auto"}


def mode() -> str:
    """'off', 'on' or 'auto' (see the module's docstring); a value it does not know is an error."""
    raw = os.environ.get(MODE_ENV, "").strip().lower()
    if raw not in MODES:
        raise ValueError(f"{MODE_ENV} must be 0, 1 or auto (unset: auto), got {os.environ[MODE_ENV]!r}")
    return MODES[raw]


def budget_s() -> float:
    """The seconds one search may spend: $LABKIT_AUTOTUNE_BUDGET, else DEFAULT_BUDGET_S."""
    raw = os.environ.get(BUDGET_ENV, "").strip()
    if not raw:
        return DEFAULT_BUDGET_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{BUDGET_ENV} must be a positive number of seconds, got {raw!r}")
    return value
