"""Per-layer tuning of conv_tuned.cu: the launch parameters, the sweep that picks them, the table.

    cfg = tuned_config(C=6, H=22, W=22, M=16, K=5)        # from the table for this GPU, or a default
    rows, best = sweep_tuned(C=6, H=22, W=22, M=16, K=5, batch=10_000)   # time every candidate
    record_winner(C=6, H=22, W=22, M=16, K=5, config=best, device_name=dev.name, median_ms=...)

A configuration is a ``TunedConfig``: threads per block, images per block, outputs per thread
along a row (``out_w``) and where the weights live (``weights``: "constant" or "shared").  The
winners are kept per GPU name in ``labkit/tuned/conv_tuned.json``, a small committed table; a GPU
that is not in it (and the CPU executor) gets ``default_config``, a choice that is sensible
everywhere.
"""
from __future__ import annotations

import functools
import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

TABLE = Path(__file__).resolve().parent / "tuned" / "conv_tuned.json"
STATIC_SHARED_LIMIT = 48 * 1024     # static __shared__ memory a block may declare
CONSTANT_LIMIT = 64 * 1024          # constant memory, in all
WEIGHT_PLACES = ("constant", "shared")


@dataclass(frozen=True)
class TunedConfig:
    """Compile-time launch parameters of conv_tuned.cu for one layer shape."""
    threads: int = 128
    imgs: int = 1
    out_w: int = 2
    weights: str = "constant"
    m_chunk: int = 0          # output channels per pass with shared weights; 0: all M at once

    def kernel(self) -> str:
        return "conv_tuned_const" if self.weights == "constant" else "conv_tuned_smem"

    def short(self) -> str:
        chunk = f" MC{self.m_chunk}" if self.m_chunk and self.weights == "shared" else ""
        return f"T{self.threads} I{self.imgs} R{self.out_w} {self.weights[:5]}{chunk}"

    def defines(self, C: int, H: int, W: int, M: int, K: int) -> dict:
        """The compile-time parameters of conv_tuned.cu for this configuration and layer."""
        return {"LAYER_C": C, "LAYER_M": M, "LAYER_K": K, "LAYER_H": H, "LAYER_W": W,
                "THREADS": self.threads, "IMGS": self.imgs, "OUT_W": self.out_w,
                "M_CHUNK": self.m_chunk or M, "WEIGHTS_IN_CONSTANT": int(self.weights == "constant")}


def layer_key(C: int, H: int, W: int, M: int, K: int) -> str:
    return f"C{C}_H{H}_W{W}_M{M}_K{K}"


def shared_bytes(cfg: TunedConfig, C: int, H: int, W: int, M: int, K: int) -> int:
    """Static shared memory of one block: the staged images (plus padding), and the weights if there."""
    n = cfg.imgs * C * H * W + cfg.out_w
    if cfg.weights == "shared":
        n += M * C * K * K + M
    return 4 * n


def check_config(cfg: TunedConfig, C: int, H: int, W: int, M: int, K: int) -> None:
    """Raise ValueError, with the fix, if the configuration cannot run this layer."""
    if cfg.weights not in WEIGHT_PLACES:
        raise ValueError(f"weights must be one of {WEIGHT_PLACES}, got {cfg.weights!r}")
    if not (32 <= cfg.threads <= 1024 and cfg.threads % 32 == 0):
        raise ValueError(f"threads must be a multiple of 32 from 32 to 1024, got {cfg.threads}")
    if not 1 <= cfg.imgs <= 64 or not 1 <= cfg.out_w <= 16:
        raise ValueError(f"imgs must be 1..64 and out_w 1..16, got {cfg.imgs} and {cfg.out_w}")
    if cfg.m_chunk < 0 or (cfg.m_chunk and M % cfg.m_chunk):
        raise ValueError(f"m_chunk must divide M={M} (or be 0 for all M), got {cfg.m_chunk}")
    if cfg.weights == "constant" and (M * C * K * K + M) * 4 > CONSTANT_LIMIT:
        raise ValueError(f"the layer's {M * C * K * K} weights and {M} biases take "
                         f"{(M * C * K * K + M) * 4} bytes, over the 64 KiB of constant memory: "
                         "use weights='shared'")
    need = shared_bytes(cfg, C, H, W, M, K)
    if need > STATIC_SHARED_LIMIT:
        raise ValueError(
            f"variant 'tuned' stages {cfg.imgs} whole {C}x{H}x{W} image(s) in shared memory"
            f"{' with the weights' if cfg.weights == 'shared' else ''}: {need} bytes, over the "
            f"{STATIC_SHARED_LIMIT} a block may declare. Use fewer images per block, or "
            "variant='tiled' for large planes")


def default_config(C: int, H: int, W: int, M: int, K: int) -> TunedConfig:
    """A choice that is sensible on any GPU: 128 threads, one image, 2-4 outputs per thread."""
    Wo = W - K + 1
    out_w = 4 if Wo % 4 == 0 else 2 if Wo >= 2 else 1
    weights = "constant" if (M * C * K * K + M) * 4 <= CONSTANT_LIMIT else "shared"
    cfg = TunedConfig(threads=128, imgs=1, out_w=out_w, weights=weights)
    check_config(cfg, C, H, W, M, K)
    return cfg


def read_table(path: Path) -> dict:
    """A tuned table (JSON), parsed once per version of the file (launchers ask on every call)."""
    try:
        stamp = Path(path).stat().st_mtime_ns
    except FileNotFoundError:
        return {"gpus": {}}
    return _parse_table(str(path), stamp)


@functools.lru_cache(maxsize=8)
def _parse_table(path: str, stamp: int) -> dict:
    return json.loads(Path(path).read_text())


def write_entry(path: Path, device_name: str, key: str, entry: dict, *, merge: bool = False) -> None:
    """Set table["gpus"][device_name][key] = entry (dated); ``merge`` keeps the entry's other fields."""
    path = Path(path)
    data = json.loads(path.read_text()) if path.exists() else {"gpus": {}}
    slot = data.setdefault("gpus", {}).setdefault(device_name, {})
    stamped = {**entry, "date": datetime.now(timezone.utc).date().isoformat()}
    slot[key] = {**slot.get(key, {}), **stamped} if merge else stamped
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def tuned_config(C: int, H: int, W: int, M: int, K: int, device_name: str | None = None) -> TunedConfig:
    """The table's winner for this layer on this GPU, else ``default_config``."""
    if device_name is None:
        from .device_query import device
        dev = device()
        device_name = dev.name if dev.backend == "cuda" else None
    entry = read_table(TABLE).get("gpus", {}).get(device_name or "", {}).get(layer_key(C, H, W, M, K))
    if entry:
        fields = {k: entry[k] for k in ("threads", "imgs", "out_w", "weights", "m_chunk") if k in entry}
        return TunedConfig(**fields)
    return default_config(C, H, W, M, K)


def candidates(C: int, H: int, W: int, M: int, K: int, *, threads: Iterable[int] = (64, 128, 256),
               imgs: Iterable[int] = (1, 2), out_w: Iterable[int] | None = None,
               weights: Iterable[str] = WEIGHT_PLACES,
               m_chunks: Iterable[int] | None = None) -> list[TunedConfig]:
    """Every configuration of the grid that fits the layer (shared and constant memory limits).

    ``out_w`` defaults to 1, 2, 4 and the divisors 3 and 6 of the output width where they are;
    ``m_chunks`` (shared weights only) defaults to all M and, where M allows, half of M in
    multiples of 4 (the 16-byte weight loads).
    """
    Wo = W - K + 1
    if out_w is None:
        out_w = sorted({1, 2, 4} | {d for d in (3, 6) if Wo % d == 0})
    out_w = [r for r in out_w if r <= Wo]
    if m_chunks is None:
        m_chunks = [0] + ([M // 2] if M % 8 == 0 else [])
    out = []
    for wgt in weights:
        for mc in (m_chunks if wgt == "shared" else [0]):
            for t in threads:
                for i in imgs:
                    for r in out_w:
                        cfg = TunedConfig(threads=t, imgs=i, out_w=r, weights=wgt, m_chunk=mc)
                        try:
                            check_config(cfg, C, H, W, M, K)
                        except ValueError:
                            continue
                        out.append(cfg)
    return out


def sweep_tuned(C: int, H: int, W: int, M: int, K: int, batch: int, *,
                configs: Iterable[TunedConfig] | None = None, activation: str | None = "tanh",
                repeat: int = 20, progress: bool = True) -> tuple[list[dict], TunedConfig]:
    """Time conv_tuned on one layer shape for every configuration; rows and the fastest one.

    Each configuration is first checked against the float64 reference on a few images (a wrong
    kernel never wins), then timed with ``measure.time_fn`` at ``batch`` on random inputs, with the
    activation the layer uses (the seed model's tanh by default).
    """
    from . import backends, reference
    from .conv import conv2d
    from .ladder import random_layer, reference_activation, rel_error
    from .measure import time_fn
    from .measure.sweep import progress_bar

    xp = backends.xp()
    x_h, w_h, b_h = random_layer(batch, C, H, W, M, K)
    x, w, b = xp.asarray(x_h), xp.asarray(w_h), xp.asarray(b_h)
    y = xp.empty((batch, M, H - K + 1, W - K + 1), dtype=xp.float32)
    n_check = min(batch, 3)
    ref = reference_activation(reference.conv2d(x_h[:n_check], w_h, b_h), activation)
    configs = list(configs) if configs is not None else candidates(C, H, W, M, K)
    rows = []
    for cfg in progress_bar(configs, desc=f"tuning {layer_key(C, H, W, M, K)}", show=progress):
        y.fill(float("nan"))
        conv2d(x, w, b, variant="tuned", config=cfg, out=y, activation=activation)
        err = rel_error(y[:n_check], ref)
        if not err < 1e-5:
            raise AssertionError(f"conv_tuned {cfg} disagrees with the reference ({err:.2e})")
        t = time_fn(lambda cfg=cfg: conv2d(x, w, b, variant="tuned", config=cfg, out=y,
                                           activation=activation),
                    warmup=3, repeat=repeat, sync=False)   # as labkit.ladder.compare times
        rows.append({**asdict(cfg), "config": cfg.short(), "batch": batch, "median_ms": t.median_ms,
                     "min_ms": t.min_ms, "device": t.device, "backend": t.backend,
                     "layer": layer_key(C, H, W, M, K), "activation": activation})
    best = min(rows, key=lambda r: r["median_ms"])
    return rows, TunedConfig(**{k: best[k] for k in ("threads", "imgs", "out_w", "weights", "m_chunk")})


def record_winner(C: int, H: int, W: int, M: int, K: int, *, config: TunedConfig, device_name: str,
                  median_ms: float, batch: int, table: Path = TABLE) -> None:
    """Write a winner into the table (one entry per GPU name and layer shape)."""
    write_entry(table, device_name, layer_key(C, H, W, M, K),
                {**asdict(config), "median_ms": round(median_ms, 5), "batch": batch})
