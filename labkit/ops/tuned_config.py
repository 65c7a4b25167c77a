"""The launch parameters of conv_tuned.cu (notebook 05's kernel), and where they come from.

    cfg = tuned_config(C=6, H=22, W=22, M=16, K=5)        # from the table for this GPU, or a default
    candidates(C=6, H=22, W=22, M=16, K=5)                # every configuration that fits the layer

A configuration is a ``TunedConfig``: threads per block, images per block, outputs per thread
along a row (``out_w``) and where the weights live (``weights``: "constant" or "shared").  The
winners of the sweep (labkit.ladder.tuning) are kept per GPU name in
``labkit/tuned/conv_tuned.json``; a GPU that is not in it (and the CPU executor) gets
``default_config``, a choice that is sensible everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..backends.limits import CONSTANT_MEMORY, SHARED_MEM_PER_BLOCK
from ..tuned import CONV_TUNED, lookup

__all__ = ["TunedConfig", "tuned_config", "default_config", "check_config", "candidates", "layer_key",
           "shared_bytes", "TABLE", "WEIGHT_PLACES", "CONFIG_FIELDS"]

TABLE = CONV_TUNED
WEIGHT_PLACES = ("constant", "shared")
CONFIG_FIELDS = ("threads", "imgs", "out_w", "weights", "m_chunk")


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
    if cfg.weights == "constant" and (M * C * K * K + M) * 4 > CONSTANT_MEMORY:
        raise ValueError(f"the layer's {M * C * K * K} weights and {M} biases take "
                         f"{(M * C * K * K + M) * 4} bytes, over the 64 KiB of constant memory: "
                         "use weights='shared'")
    need = shared_bytes(cfg, C, H, W, M, K)
    if need > SHARED_MEM_PER_BLOCK:
        raise ValueError(
            f"variant 'tuned' stages {cfg.imgs} whole {C}x{H}x{W} image(s) in shared memory"
            f"{' with the weights' if cfg.weights == 'shared' else ''}: {need} bytes, over the "
            f"{SHARED_MEM_PER_BLOCK} a block may declare. Use fewer images per block, or "
            "variant='tiled' for large planes")


def default_config(C: int, H: int, W: int, M: int, K: int) -> TunedConfig:
    """A choice that is sensible on any GPU: 128 threads, one image, 2-4 outputs per thread."""
    Wo = W - K + 1
    out_w = 4 if Wo % 4 == 0 else 2 if Wo >= 2 else 1
    weights = "constant" if (M * C * K * K + M) * 4 <= CONSTANT_MEMORY else "shared"
    cfg = TunedConfig(threads=128, imgs=1, out_w=out_w, weights=weights)
    check_config(cfg, C, H, W, M, K)
    return cfg


def tuned_config(C: int, H: int, W: int, M: int, K: int, device_name: str | None = None) -> TunedConfig:
    """The table's winner for this layer on this GPU (or ``device_name``), else ``default_config``."""
    entry = lookup(TABLE, layer_key(C, H, W, M, K), device_name)
    if entry:
        return TunedConfig(**{k: entry[k] for k in CONFIG_FIELDS if k in entry})
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
