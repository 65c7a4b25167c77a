"""Where notebooks and benchmarks put their tables (JSON) and plots (PNG).

``$LABKIT_RESULTS_DIR`` when set (``python -m labkit.series`` sets it to its output
folder), else ``results/`` at the repository root; created on first use.
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "LABKIT_RESULTS_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent


def results_dir() -> Path:
    """The results folder (created if missing)."""
    env = os.environ.get(ENV_VAR)
    d = Path(env).expanduser() if env else REPO_ROOT / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d


def results_path(name: str) -> Path:
    """``results_dir() / name``, its parent folders created."""
    p = results_dir() / name
    p.parent.mkdir(parents=True, exist_ok=True)
    return p
