"""The autotuner's winners on disk: one JSON file per GPU fingerprint, in the kernel cache folder.

    fp = fingerprint()                 # GPU name, compute capability, SMs, CUDA runtime, driver, NVRTC
    cache = DiskCache.for_this_gpu()   # $LABKIT_CACHE_DIR/autotune/<hash of fp>.json
    entry = cache.get("conv_implicit|<source hash>|C96_..._N128_fp32")
    cache.put(key, {"config": {...}, "ms": 0.12, ...})

A file is read as plain JSON (never code), at most MAX_FILE_BYTES, and only if the fingerprint it
holds is this GPU's: an entry made on another GPU, driver or compiler is never used, and one made
from an older kernel source is never found (the source's hash is part of its key).  A caller checks
that a winner read back is one of today's candidates before it launches anything with it.  Writers
take a lock, merge with what other processes wrote, and replace the file whole.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from ..device_query import cache_dir, device, versions
from ..loader import kernel_path

__all__ = ["fingerprint", "source_hash", "candidates_hash", "DiskCache", "MAX_FILE_BYTES", "FOLDER"]

FOLDER = "autotune"
MAX_FILE_BYTES = 32 << 20


_FINGERPRINTS: dict[str, dict] = {}


def fingerprint() -> dict | None:
    """What makes a winner this GPU's: None on the CPU executor (nothing is tuned there).  Asked of
    CuPy once per GPU: every plan a layer makes asks for it."""
    dev = device()
    if not dev.is_gpu:
        return None
    fp = _FINGERPRINTS.get(dev.name)
    if fp is None:
        v = versions()
        fp = {"gpu": dev.name, "compute_capability": list(dev.compute_capability or ()), "sms": dev.sm_count,
              "cuda_runtime": v.get("cuda_runtime"), "cuda_driver": v.get("cuda_driver"), "cupy": v.get("cupy")}
        try:
            import cupy
            fp["nvrtc"] = list(cupy.cuda.nvrtc.getVersion())
        except Exception:          # an NVRTC CuPy cannot ask: the rest still tells GPUs apart
            fp["nvrtc"] = None
        _FINGERPRINTS[dev.name] = fp
    return dict(fp)


_SOURCE_HASHES: dict[tuple, str] = {}


def source_hash(families: tuple[str, ...]) -> str:
    """A short hash of the kernel files' text (labkit/kernels/<family>.cu): a changed kernel
    makes new keys, so no winner of the old source is used."""
    stamps = tuple((f, kernel_path(f).stat().st_mtime_ns) for f in families)
    h = _SOURCE_HASHES.get(stamps)
    if h is None:
        digest = hashlib.sha256()
        for f in families:
            digest.update(f.encode() + b"\0" + kernel_path(f).read_bytes() + b"\0")
        h = _SOURCE_HASHES[stamps] = digest.hexdigest()[:16]
    return h


def candidates_hash(candidates: list) -> str:
    """A short hash of a problem's candidate configurations (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(candidates, sort_keys=True).encode()).hexdigest()[:8]


class DiskCache:
    """One fingerprint's winners, in one file (see the module's docstring)."""

    def __init__(self, path: Path, fp: dict):
        self.path, self.fp = Path(path), fp
        self._seen: tuple | None = None
        self._entries: dict = {}

    @classmethod
    def for_this_gpu(cls) -> "DiskCache | None":
        fp = fingerprint()
        if fp is None:
            return None
        name = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
        return cls(cache_dir() / FOLDER / f"{name}.json", fp)

    def _read(self) -> dict:
        """The file's entries ({} if absent, unreadable, too large, or another fingerprint's)."""
        try:
            st = self.path.stat()
        except OSError:
            return {}
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._seen:
            return self._entries
        entries: dict = {}
        if st.st_size <= MAX_FILE_BYTES:
            try:
                data = json.loads(self.path.read_bytes()[:MAX_FILE_BYTES + 1])
            except (OSError, ValueError, UnicodeDecodeError):
                data = None
            if isinstance(data, dict) and data.get("fingerprint") == self.fp and isinstance(data.get("entries"), dict):
                entries = {k: v for k, v in data["entries"].items()
                           if isinstance(k, str) and isinstance(v, dict) and isinstance(v.get("config"), dict)}
        self._seen, self._entries = stamp, entries
        return entries

    def get(self, key: str) -> dict | None:
        return self._read().get(key)

    def entries(self) -> dict:
        return dict(self._read())

    def put(self, key: str, entry: dict) -> None:
        """Add (or replace) one entry, dated, under a lock: other processes' entries are kept."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stamped = {**entry, "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._seen = None
            entries = self._read()
            entries[key] = stamped
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"fingerprint": self.fp, "entries": entries}, indent=1, sort_keys=True) + "\n")
            os.replace(tmp, self.path)
            self._seen = None
