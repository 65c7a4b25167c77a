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


MAX_PAYLOAD = 1 << 30   # a sane cap: Fashion-MNIST's largest file holds 47 MB
TRAILING_PROBE = 1 << 16


def read_idx(path: str | os.PathLike, *, max_bytes: int = MAX_PAYLOAD) -> np.ndarray:
    """Read an unsigned-byte IDX file (raw or gzip) into a uint8 array.

    The header states the payload's size; the reader checks it against the file (a raw file must
    hold exactly that; a gzip stream cannot inflate more than 1,032 times) and ``max_bytes`` before
    it allocates, then decompresses as a stream and reads exactly that many bytes: a small file
    that inflates to gigabytes is refused after the header, not after the inflating.

    Args:
        path: the file; gzip compression is detected from its magic bytes.
        max_bytes: the largest payload accepted.

    Returns:
        A writable, C-contiguous ``np.uint8`` array whose shape is the file's
        dimension sizes (1 to 4 of them).

    Raises:
        FileNotFoundError: the file does not exist.
        IDXFormatError: the file is not a well-formed unsigned-byte IDX file
            (bad magic, unsupported type code or rank, zero-sized dimension,
            truncated payload, trailing bytes, a corrupt gzip stream, or a payload
            larger than the file can hold or ``max_bytes``).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as probe:
        gz = probe.read(2) == GZIP_MAGIC
    where = f"{path} (after gzip decompression)" if gz else str(path)
    try:
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            try:
                return _read_stream(f, where, size, gz, max_bytes)
            except IDXFormatError:
                if gz:    # bytes from a corrupt deflate stream look like a bad header: is the stream whole?
                    _drain(f, min(size * 1032, max_bytes))
                raise
    except (OSError, EOFError, zlib.error) as exc:
        if not gz:
            raise
        # OSError covers gzip.BadGzipFile; EOFError is a truncated stream
        raise IDXFormatError(
            f"{path}: the file starts like gzip (1f 8b) but could not be "
            f"decompressed ({type(exc).__name__}: {exc}); the download is "
            "probably incomplete or corrupt -- fetch the file again"
        ) from exc


def _drain(f, budget: int) -> None:
    """Read (and drop) the rest of a gzip stream, 64 KiB at a time, at most ``budget`` bytes: a corrupt
    stream raises here; memory stays at 64 KiB."""
    while budget > 0:
        chunk = f.read(min(TRAILING_PROBE, budget))
        if not chunk:
            return
        budget -= len(chunk)


def _read_stream(f, where: str, file_size: int, gz: bool, max_bytes: int) -> np.ndarray:
    head = f.read(4)
    if len(head) < 4:
        raise IDXFormatError(
            f"{where}: expected an IDX header of at least 4 bytes, found only "
            f"{len(head)} bytes"
        )
    if head[0] != 0 or head[1] != 0:
        raise IDXFormatError(
            f"{where}: expected the IDX magic bytes 00 00 at the start, found "
            f"{head[0]:02x} {head[1]:02x}; this is not an IDX file"
        )
    type_code, ndim = head[2], head[3]
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
    dims = f.read(4 * ndim)
    if len(dims) < 4 * ndim:
        raise IDXFormatError(
            f"{where}: expected a {header_len}-byte header for {ndim} dimensions, "
            f"found only {4 + len(dims)} bytes (truncated file)"
        )
    shape = tuple(int(s) for s in np.frombuffer(dims, dtype=">u4", count=ndim))
    if any(s == 0 for s in shape):
        raise IDXFormatError(
            f"{where}: expected every dimension size to be at least 1, found sizes {shape}"
        )
    expected = 1
    for s in shape:
        expected *= s
    if not gz and expected > file_size - header_len:   # a raw file holds what it holds: no need to read
        raise IDXFormatError(
            f"{where}: truncated payload: dimensions {shape} need {expected:,} bytes "
            f"of data, found only {file_size - header_len:,}; the file is incomplete -- fetch it again"
        )
    can_hold = file_size * 1032      # deflate's largest ratio
    if expected > max_bytes or (gz and expected > can_hold):
        raise IDXFormatError(
            f"{where}: dimensions {shape} declare {expected:,} bytes of data, more than "
            + (f"a {file_size:,}-byte gzip file can inflate to" if expected <= max_bytes
               else f"the {max_bytes:,} this reader accepts")
            + "; the file is corrupt or not the file it claims to be"
        )
    data = f.read(expected)          # a stream that inflates further stops here
    found = len(data)
    if found < expected:
        raise IDXFormatError(
            f"{where}: truncated payload: dimensions {shape} need {expected:,} bytes "
            f"of data, found only {found:,}; the file is incomplete -- fetch it again"
        )
    extra = len(f.read(TRAILING_PROBE))   # trailing bytes: counted up to 64 KiB, no further
    if extra:
        more = "+" if extra == TRAILING_PROBE else ""
        raise IDXFormatError(
            f"{where}: dimensions {shape} need exactly {expected:,} bytes of data, "
            f"found {found + extra:,}{more} ({extra:,}{more} trailing bytes); the file is "
            "corrupt or not the file it claims to be"
        )
    return np.frombuffer(data, dtype=np.uint8).reshape(shape).copy()
