"""A strict reader for IDX files (the MNIST / Fashion-MNIST file format).

Format (all integers big-endian)::

    bytes 0-1   0x00 0x00                      magic
    byte  2     type code                      0x08 = unsigned byte (the only one accepted)
    byte  3     number of dimensions D         1..4
    4*D bytes   the D dimension sizes          uint32 each
    payload     prod(sizes) bytes, C order     nothing may follow it

The file may be gzip-compressed; that is detected from its first two bytes
(``1f 8b``), not from its name.  Any deviation raises :class:`IDXFormatError`
naming the file, what was expected and what was found.  Nothing is executed
from the file (no pickle, no eval): the payload is copied into a uint8 array.
"""
from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from ..errors import IDXFormatError

__all__ = ["IDXFormatError", "read_idx"]

GZIP_MAGIC = b"\x1f\x8b"
_TYPE_NAMES = {
    0x08: "unsigned byte",
    0x09: "signed byte",
    0x0B: "short (int16)",
    0x0C: "int (int32)",
    0x0D: "float (float32)",
    0x0E: "double (float64)",
}


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read an unsigned-byte IDX file (raw or gzip) into a uint8 array.

    Args:
        path: the file; gzip compression is detected from its magic bytes.

    Returns:
        A writable, C-contiguous ``np.uint8`` array whose shape is the file's
        dimension sizes (1 to 4 of them).

    Raises:
        FileNotFoundError: the file does not exist.
        IDXFormatError: the file is not a well-formed unsigned-byte IDX file
            (bad magic, unsupported type code or rank, zero-sized dimension,
            truncated payload, trailing bytes, or a corrupt gzip stream).
    """
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            # OSError covers gzip.BadGzipFile; EOFError is a truncated stream
            raise IDXFormatError(
                f"{path}: the file starts like gzip (1f 8b) but could not be "
                f"decompressed ({type(exc).__name__}: {exc}); the download is "
                "probably incomplete or corrupt -- fetch the file again"
            ) from exc
        where = f"{path} (after gzip decompression)"
    else:
        data = raw
        where = str(path)

    if len(data) < 4:
        raise IDXFormatError(
            f"{where}: expected an IDX header of at least 4 bytes, found only "
            f"{len(data)} bytes"
        )
    if data[0] != 0 or data[1] != 0:
        raise IDXFormatError(
            f"{where}: expected the IDX magic bytes 00 00 at the start, found "
            f"{data[0]:02x} {data[1]:02x}; this is not an IDX file"
        )
    type_code, ndim = data[2], data[3]
    if type_code != 0x08:
        name = _TYPE_NAMES.get(type_code, "an unknown type")
        raise IDXFormatError(
            f"{where}: expected type code 0x08 (unsigned byte), found "
            f"0x{type_code:02x} ({name}); only unsigned-byte IDX files are supported"
        )
    if not 1 <= ndim <= 4:
        raise IDXFormatError(
            f"{where}: expected 1 to 4 dimensions, found {ndim}"
        )
    header_len = 4 + 4 * ndim
    if len(data) < header_len:
        raise IDXFormatError(
            f"{where}: expected a {header_len}-byte header for {ndim} dimensions, "
            f"found only {len(data)} bytes (truncated file)"
        )
    shape = tuple(int(s) for s in np.frombuffer(data, dtype=">u4", count=ndim, offset=4))
    if any(s == 0 for s in shape):
        raise IDXFormatError(
            f"{where}: expected every dimension size to be at least 1, found sizes {shape}"
        )
    expected = 1
    for s in shape:
        expected *= s
    found = len(data) - header_len
    if found < expected:
        raise IDXFormatError(
            f"{where}: truncated payload: dimensions {shape} need {expected:,} bytes "
            f"of data, found only {found:,}; the file is incomplete -- fetch it again"
        )
    if found > expected:
        raise IDXFormatError(
            f"{where}: dimensions {shape} need exactly {expected:,} bytes of data, "
            f"found {found:,} ({found - expected:,} trailing bytes); the file is "
            "corrupt or not the file it claims to be"
        )
    return np.frombuffer(data, dtype=np.uint8, offset=header_len).reshape(shape).copy()
