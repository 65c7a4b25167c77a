"""Where things are: the repository's root and its ``data/`` (the one place either is computed), where
notebooks and benchmarks put their tables (JSON) and plots (PNG), and the shipped results.

``$LABKIT_RESULTS_DIR`` when set (``python -m labkit.course.series`` sets it to its output
folder), else ``results/`` at the repository root; created on first use.

``benchmarks/results/`` holds what the benchmark scripts measured on an H100, shipped with the
repository: a notebook run on another machine plots those rows beside its own (``shipped_rows``).

``READ_ONLY_DIRS``: the folders of the repository besides the package that labkit and the notebooks
read (never write): ``data/`` and ``benchmarks/results/``.  The grader's sandbox shows them, read-only,
where these paths fall inside it (labkit.course.sandbox.repository_files).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

ENV_VAR = "LABKIT_RESULTS_DIR"
REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "data"
SHIPPED_DIR = REPO_ROOT / "benchmarks" / "results"
READ_ONLY_DIRS = (DATA_DIR, SHIPPED_DIR)


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


def shipped(name: str) -> dict:
    """The shipped benchmark results ``benchmarks/results/<name>`` (a JSON object with ``device`` and
    ``rows``; read as data, nothing in it runs)."""
    path = SHIPPED_DIR / name
    if path.suffix != ".json" or path.parent != SHIPPED_DIR:
        raise ValueError(f"shipped({name!r}): name a .json file in {SHIPPED_DIR}")
    return json.loads(path.read_text())


def shipped_rows(name: str, **match) -> list[dict]:
    """The rows of ``shipped(name)`` whose fields equal ``match``'s values (a list, tuple or set value:
    any of its members), each with its ``device``; ``shipped_rows("conv_ladder_h100.json",
    layer="layer 1", label=["naive", "cuDNN"])``."""
    data = shipped(name)
    picked = []
    for r in data["rows"]:
        if all(r.get(k) in v if isinstance(v, (list, tuple, set)) else r.get(k) == v for k, v in match.items()):
            picked.append(dict(r, device=r.get("device") or data.get("device")))
    return picked
