"""The launch-parameter sweep of conv_tuned.cu (notebook 05): time every configuration that fits a
layer, keep the fastest per GPU in labkit/tuned/conv_tuned.json.

    rows, best = sweep_tuned(C=6, H=22, W=22, M=16, K=5, batch=10_000)   # time every candidate
    record_winner(C=6, H=22, W=22, M=16, K=5, config=best, device_name=dev.name, median_ms=...)
"""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Iterable

from .. import backends, reference
from ..measure.sweep import progress_bar
from ..ops.conv import conv2d
from ..ops.tuned_config import CONFIG_FIELDS, TABLE, TunedConfig, candidates, layer_key
from ..tuned import write_entry
from .harness import checked_time, random_layer, reference_activation

__all__ = ["sweep_tuned", "record_winner"]


def sweep_tuned(C: int, H: int, W: int, M: int, K: int, batch: int, *,
                configs: Iterable[TunedConfig] | None = None, activation: str | None = "tanh",
                repeat: int = 20, progress: bool = True) -> tuple[list[dict], TunedConfig]:
    """Time conv_tuned on one layer shape for every configuration; rows and the fastest one.

    Each configuration is first checked against the float64 reference on a few images (a wrong
    kernel never wins), then timed with ``measure.time_fn`` at ``batch`` on random inputs, with the
    activation the layer uses (the seed model's tanh by default).
    """
    xp = backends.xp()
    x_h, w_h, b_h = random_layer(batch, C, H, W, M, K)
    x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
    y = xp.empty((batch, M, H - K + 1, W - K + 1), dtype=xp.float32)
    n_check = min(batch, 3)
    ref = reference_activation(reference.conv2d(x_h[:n_check], w_h, b_h), activation)
    configs = list(configs) if configs is not None else candidates(C, H, W, M, K)
    rows = []
    for cfg in progress_bar(configs, desc=f"tuning {layer_key(C, H, W, M, K)}", show=progress):
        t, _ = checked_time(f"conv_tuned {cfg}", lambda cfg=cfg: conv2d(x, w, b, variant="tuned", config=cfg,
                                                                         out=y, activation=activation),
                            y, ref, tol=1e-5, repeat=repeat)
        rows.append({**asdict(cfg), "config": cfg.short(), "batch": batch, "median_ms": t.median_ms,
                     "min_ms": t.min_ms, "device": t.device, "backend": t.backend,
                     "layer": layer_key(C, H, W, M, K), "activation": activation})
    best = min(rows, key=lambda r: r["median_ms"])
    return rows, TunedConfig(**{k: best[k] for k in CONFIG_FIELDS})


def record_winner(C: int, H: int, W: int, M: int, K: int, *, config: TunedConfig, device_name: str,
                  median_ms: float, batch: int, table: Path = TABLE) -> None:
    """Write a winner into the table (one entry per GPU name and layer shape)."""
    write_entry(table, device_name, layer_key(C, H, W, M, K),
                {**asdict(config), "median_ms": round(median_ms, 5), "batch": batch})
