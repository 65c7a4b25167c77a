"""Batch-size sweeps: one timed callable per batch size, one row per batch, saved as JSON.

    def conv_at(batch):
        x = xp.asarray(make_input(batch))            # set-up: not timed
        return lambda: conv(x, w)                    # the timed part
    rows = sweep(conv_at, [1, 10, 100], label="conv_naive")
    save_rows(rows, results_dir() / "conv_naive.json")

A row is a plain dict: batch, label, median_ms, min_ms, repeat, device, backend.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from .. import backends
from ..device_query import device, versions
from .timer import time_fn

ROW_KEYS = ("batch", "label", "median_ms", "min_ms", "repeat", "device", "backend")


def sweep(run: Callable[[object], Callable[[], object]], batches: Iterable, *, label: str | None = None,
          warmup: int = 2, repeat: int = 10, progress: bool = True) -> list[dict]:
    """Time ``run(batch)()`` for each batch: ``run(batch)`` does the set-up and returns the callable to time.

    ``label`` names the curve (default: the name of ``run``).  A tqdm bar shows progress
    unless ``progress=False``.  Returns one row per batch, in the order given.
    """
    label = label or getattr(run, "__name__", "run")
    batches = list(batches)
    rows = []
    for batch in progress_bar(batches, desc=label, show=progress):
        fn = run(batch)
        if not callable(fn):
            raise TypeError(f"run({batch!r}) returned {type(fn).__name__}; it must return a "
                            "zero-argument callable (the part to time)")
        t = time_fn(fn, warmup=warmup, repeat=repeat)
        del fn  # drop the batch's arrays before the next, larger one is made
        rows.append({"batch": batch, "label": label, "median_ms": t.median_ms, "min_ms": t.min_ms,
                     "repeat": t.repeat, "device": t.device, "backend": t.backend})
        release_gpu_memory()
    return rows


def progress_bar(items, *, desc: str, show: bool = True, total: int | None = None):
    """``items`` behind a tqdm bar when ``show``: a widget in a notebook that has ipywidgets, text
    in a terminal.  A notebook without ipywidgets gets no bar (tqdm's text bar and its warning would
    land in the notebook's stderr, in red); nor does ``show=False`` (tqdm is not even imported).
    ``total``: the count, for items without a length (a generator)."""
    if not show:
        return items
    if "ipykernel" in sys.modules:
        if importlib.util.find_spec("ipywidgets") is None:
            return items
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(items, desc=desc, leave=False, total=total)


def release_gpu_memory() -> None:
    """Hand CuPy's pool of freed blocks back to the GPU, so that a larger batch fits next."""
    if backends.current() == "cuda":
        import cupy
        cupy.get_default_memory_pool().free_all_blocks()


def _plain(o):
    """JSON for what json does not know: NumPy scalars and arrays, tuples, paths."""
    if hasattr(o, "item") and getattr(o, "ndim", 0) == 0:
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"{type(o).__name__} is not JSON serializable")


def device_tag(name: str | None = None) -> str:
    """A GPU's short name for result files: "NVIDIA H100 80GB HBM3" -> "h100" (``name``, or the device
    in use: "cpu" on the CPU executor)."""
    if name is None:
        dev = device()
        if not dev.is_gpu:
            return "cpu"
        name = dev.name
    m = re.search(r"([A-Z]+\d+[A-Za-z]*)", name.replace("NVIDIA ", ""))
    return (m.group(1) if m else re.sub(r"\W+", "_", name)).lower()


def save_rows(rows: list[dict], path_json: str | Path, meta: dict | None = None) -> Path:
    """Write the rows as JSON with the device name, backend, versions and date (UTC); returns the path."""
    dev = device()
    doc = {
        "device": dev.name,
        "device_label": dev.label,
        "backend": dev.backend,
        "versions": versions(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "meta": meta or {},
        "rows": list(rows),
    }
    path = Path(path_json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, default=_plain) + "\n")
    return path


def load_results(path: str | Path) -> dict:
    """The whole document save_rows wrote: device, device_label, backend, versions, date, meta, rows."""
    return json.loads(Path(path).read_text())


def redraw(path_json: str | Path, plot: Callable[[list[dict], str, Path], Path]) -> Path:
    """A benchmark's plot drawn again from the JSON it wrote: ``plot(rows, device_label, png)`` with the
    .png beside the JSON (a script's --plot-only); returns the .png's path."""
    doc = load_results(path_json)
    return plot(doc["rows"], doc["device_label"], Path(path_json).with_suffix(".png"))


def load_rows(path: str | Path) -> list[dict]:
    """The rows save_rows wrote (each row still names its device)."""
    return load_results(path)["rows"]
