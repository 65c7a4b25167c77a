"""Reading .npz archives without trusting them: every member's header is checked against the bytes the
archive really holds, and against a cap the caller chooses, before anything is allocated.

    arrays = read_npz(path, max_bytes=16 * 2**20)     # {name: array}; ArrayFileError names the problem

``np.load`` believes a member's header: a few hundred bytes that declare 10**12 floats make it ask for
4 TB, and fail with NumPy's own MemoryError.  Here a member must declare exactly the bytes it stores
(which the zip directory says, and which a deflate stream cannot exceed 1,032 times over), the whole
archive at most ``max_bytes``, and no member may hold a pickle (object arrays are refused: loading
one could run code).
"""
from __future__ import annotations

import os
import zipfile
import zlib
from pathlib import Path

import numpy as np

from ..errors import ArrayFileError

__all__ = ["read_npz", "ArrayFileError", "DEFLATE_MAX_RATIO"]

DEFLATE_MAX_RATIO = 1032      # no deflate stream inflates further (RFC 1951's longest match per bit)


def _header(f, where: str) -> tuple[tuple, bool, np.dtype]:
    """(shape, fortran order, dtype) of the .npy stream f, read with NumPy's own header parser (a
    literal dict: nothing is evaluated)."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version in ((2, 0), (3, 0)):
            return np.lib.format.read_array_header_2_0(f)
    except (ValueError, EOFError, OSError) as exc:
        raise ArrayFileError(f"{where}: not a readable .npy header ({exc})") from None
    raise ArrayFileError(f"{where}: unknown .npy version {version}")


def read_npz(path: str | os.PathLike, *, max_bytes: int) -> dict[str, np.ndarray]:
    """The arrays of an .npz, each checked before it is read: a plain (not object) dtype, a size that
    matches the bytes the archive holds for it, all of them together at most ``max_bytes``.  Raises
    ArrayFileError (a ValueError) naming the file, the member and the problem."""
    p = Path(path)
    try:
        zf = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArrayFileError(f"{p}: truncated or corrupt .npz (zip) archive ({type(exc).__name__}: {exc})") from None
    out: dict[str, np.ndarray] = {}
    total = 0
    with zf:
        for info in zf.infolist():
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            where = f"{p} member {name!r}"
            if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size or \
                    info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
                raise ArrayFileError(f"{where}: declares {info.file_size:,} bytes stored in {info.compress_size:,}, "
                                     "more than any zip stream can hold: a corrupt or hostile archive")
            try:
                with zf.open(info) as f:
                    shape, fortran, dtype = _header(f, where)
                    if dtype.hasobject:
                        raise ArrayFileError(f"{where}: holds an object (pickled) array, which is refused because "
                                             "loading it could execute code; only plain numeric arrays are read")
                    count = 1
                    for d in shape:
                        count *= int(d)
                    nbytes = count * dtype.itemsize
                    stored = info.file_size - f.tell()
                    if nbytes != stored:
                        raise ArrayFileError(f"{where}: its header declares {shape} {dtype} ({nbytes:,} bytes) but the "
                                             f"archive stores {stored:,} bytes for it: truncated or corrupt")
                    total += nbytes
                    if total > max_bytes:
                        raise ArrayFileError(f"{where}: the arrays declare {total:,} bytes in all, over the "
                                             f"{max_bytes:,} this file's contents can need: refused before reading")
                    data = f.read(nbytes)
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
                raise ArrayFileError(f"{where}: truncated or corrupt ({type(exc).__name__}: {exc})") from None
            if len(data) != nbytes:
                raise ArrayFileError(f"{where}: truncated: {len(data):,} of {nbytes:,} bytes")
            a = np.frombuffer(data, dtype=dtype, count=count)
            out[name] = np.ascontiguousarray(a.reshape(shape, order="F" if fortran else "C"))
    return out
