"""A folder of submissions: one sub-folder or one archive (.zip, .tar, .tar.gz, .tgz) per student.

One student's submission can never cost another student anything, so whatever a folder holds:

* every student's name (the folder's name, or the archive's without its suffix) is checked first
  (``name_problem``): a name that could be read as a command-line option, that is empty, ``.`` or
  ``..``, hidden, holds a path separator or a control character, or is too long, is refused with
  the reason, and so is a name two submissions share (``bob/`` next to ``bob.zip``): that student
  gets no points and the reason, the others are graded;
* an archive is unpacked into a fresh folder of its own whose name owes nothing to the student's,
  so no name can point it into the shared work folder or another student's;
* only notebooks (.ipynb) and kernel files (.cu) are taken out, each a plain file whose path stays
  inside that folder (no absolute paths, no ``..``, no links, no devices), at most ``MAX_FILES`` of
  them and ``MAX_BYTES`` in all.  Disk and memory are bounded before anything is written, from the
  sizes the archive declares (and, in a zip, how far it claims to have compressed them), and again
  while each member is copied, in chunks, from the bytes it really yields: a member that yields
  more or fewer than it declared is refused, and a tar's stream stops at ``MAX_EXPANDED`` bytes;
* any fault of an archive (a broken checksum, an encrypted member, an unknown compression method,
  a truncated or corrupt stream, a duplicate name, a file that is also a folder, a name too long
  for the disk) refuses that student's archive with the reason (``ArchiveError``), and whatever it
  had unpacked is removed.

Files are looked up by name anywhere below a student's folder; a link, or a path leaving the folder,
is never followed.
"""
from __future__ import annotations

import gzip
import shutil
import struct
import tarfile
import tempfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ...errors import ArchiveError

__all__ = ["Student", "ArchiveError", "students_in", "find_file", "unpack", "name_problem", "shown",
           "ARCHIVE_SUFFIXES", "MAX_FILES", "MAX_BYTES", "MAX_EXPANDED", "MAX_RATIO"]

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
TAKEN = (".ipynb", ".cu")
MAX_FILES = 2_000
MAX_BYTES = 64 << 20            # what is taken out, in all: the series' notebooks with their outputs are 4 MiB
MAX_KERNEL_BYTES = 1 << 20      # one .cu file: an exercise's is a few KiB
MAX_EXPANDED = 1 << 30          # what a tar's stream may inflate to, the members not taken included
MAX_RATIO = 200                 # a zip member compressed further than this (and over RATIO_FROM) is a bomb
RATIO_FROM = 1 << 20            # the series' notebooks compress 1.5 to 1, its kernels 2.5 to 1
MAX_MEMBERS = 100_000           # entries of any kind in one archive
MAX_ZIP_DIRECTORY = 16 << 20    # a zip's central directory, read whole by zipfile before anything else
MAX_TAR_HEADER = 1 << 20        # a tar's long-name or pax header, read whole by tarfile
MAX_COMPONENT = 255             # bytes in one file name: the limit of Linux's file systems
MAX_DEPTH = 32                  # folders in a member's path
MAX_NAME_BYTES = 128            # a student's name: a file name in the feedback, a folder of a Slurm task
CHUNK = 1 << 20
ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}
# Bidirectional-text controls reorder what is shown around them (a name that reads as another).
_BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass
class Student:
    name: str
    folder: Path | None       # None: the submission could not be unpacked, or its name was refused
    problem: str | None = None


def shown(text: str) -> str:
    """``text`` with every character that is not printable (control characters, line breaks, bidi
    controls, the halves of undecodable bytes) and the backslash written as an escape, as Python
    writes them: one line that a terminal, a spreadsheet and a text file all show as it is, and
    from which the original can be read back."""
    out = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif c.isprintable() and c not in _BIDI:
            out.append(c)
        else:
            out.append(ascii(c)[1:-1])       # \n, \x1b, \u202e, \udcff
    return "".join(out)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a student's name (it names a feedback file, a row of a spreadsheet and
    an argument of the Slurm job's command), or None."""
    if not name:
        return "is empty"
    if name in (".", ".."):
        return f"is {name!r}, a folder's own name"
    if name.startswith("-"):
        return "starts with '-' (a command would take it for an option)"
    if name.startswith("."):
        return "starts with '.' (a hidden file)"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if any(not c.isprintable() or c in _BIDI for c in name):
        return "holds a control character (a line break, a tab, a terminal or bidi control, undecodable bytes)"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return f"is longer than {MAX_NAME_BYTES} bytes"
    return None


def _archive_stem(path: Path) -> str | None:
    """The student's name of an archive (its name without the suffix, which may be in capitals), or
    None: not an archive."""
    for suffix in ARCHIVE_SUFFIXES:
        if path.name.lower().endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def _member_path(name: str) -> PurePosixPath | None:
    """The relative path a member's name asks for (a Windows archive's backslashes read as
    separators), or None where it would leave the student's folder."""
    p = PurePosixPath(name.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or not p.parts or name.endswith(("/", "\\")):
        return None
    return p


class _Plan:
    """The files an archive puts into a student's folder, each checked before it is written: its
    path, its kind's size, the count and the bytes so far, a name met twice, a file that is also a
    folder.  What the members then really yield is held to what they declared (``_copy``)."""

    def __init__(self, what: str):
        self.what, self.files, self.folders, self.bytes = what, set(), set(), 0

    def refuse(self, why: str) -> ArchiveError:
        return ArchiveError(f"{self.what}: {why}")

    def add(self, name: str, size: int) -> PurePosixPath:
        rel, member = _member_path(name), shown(name)
        if rel is None:
            raise self.refuse(f"{member}: its path leaves the archive's folder (absolute, or through '..')")
        short = member if len(member) <= 80 else member[:80] + "..."
        if any(len(part.encode("utf-8", "surrogateescape")) > MAX_COMPONENT for part in rel.parts):
            raise self.refuse(f"{short}: a file or folder name longer than {MAX_COMPONENT} bytes")
        if len(rel.parts) > MAX_DEPTH:
            raise self.refuse(f"{short}: more than {MAX_DEPTH} folders deep")
        if rel in self.files:
            raise self.refuse(f"{member}: in the archive twice (which one is the submission?)")
        if rel in self.folders or any(parent in self.files for parent in rel.parents):
            raise self.refuse(f"{member}: both a file and a folder in the archive")
        if size < 0:
            raise self.refuse(f"{member}: a header declaring {size:,} bytes")
        if name.endswith(".cu") and size > MAX_KERNEL_BYTES:
            raise self.refuse(f"{member}: {size:,} bytes, more than a kernel file may have ({MAX_KERNEL_BYTES >> 20} MiB)")
        self.bytes += size
        if self.bytes > MAX_BYTES:
            raise self.refuse(f"the archive expands to more than {MAX_BYTES >> 20} MiB of notebooks and kernel files")
        if len(self.files) >= MAX_FILES:
            raise self.refuse(f"more than {MAX_FILES:,} notebooks and kernel files")
        self.files.add(rel)
        self.folders.update(rel.parents)
        return rel


def _copy(chunks, target: Path, size: int, plan: _Plan, member: str, crc: int | None = None) -> None:
    """Write the member's ``chunks`` (each at most CHUNK bytes) to ``target``: exactly the ``size``
    bytes it declared -- the first byte past them stops the copy, fewer are refused -- so what
    reaches the disk is what ``plan`` allowed; with ``crc``, the data's CRC-32 must be it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    left, running = size, 0
    with open(target, "xb") as dst:     # "x": nothing already there is ever written over
        for chunk in chunks:
            left -= len(chunk)
            if left < 0:
                raise plan.refuse(f"{shown(member)}: holds more than the {size:,} bytes its header declares")
            running = zlib.crc32(chunk, running)
            dst.write(chunk)
    if left:
        raise plan.refuse(f"{shown(member)}: holds {size - left:,} bytes where its header declares {size:,}")
    if crc is not None and running != crc:
        raise plan.refuse(f"{shown(member)}: its CRC-32 does not match its data (a damaged or forged archive)")


# --- zip -------------------------------------------------------------------------------------------------
def _zip_directory_bytes(archive: Path) -> int | None:
    """The size the end record gives the central directory (None: no end record to read), which
    zipfile reads whole and turns into an object per entry before anything can be checked."""
    end_record, size_at = getattr(zipfile, "_EndRecData", None), getattr(zipfile, "_ECD_SIZE", None)
    if end_record is None or size_at is None:
        return None
    with open(archive, "rb") as f:
        rec = end_record(f)
    return None if rec is None else rec[size_at]


def _zip_member_problem(f, m: zipfile.ZipInfo) -> str | None:
    """Why member ``m`` cannot be read as it says (from the central directory and its local header,
    read from ``f``), or None."""
    if (m.external_attr >> 16) & 0o170000 not in (0, 0o100000):
        return "not a plain file (a link or a device)"
    if m.flag_bits & 0x41:
        return "encrypted (a password-protected zip: zip it again without a password)"
    if m.flag_bits & 0x20:
        return "compressed as patched data, which is not read"
    if m.compress_type not in ZIP_METHODS:
        return (f"compressed with method {m.compress_type} ({zipfile.compressor_names.get(m.compress_type, 'unknown')}): "
                f"only {' and '.join(ZIP_METHODS.values())} members are read")
    if m.compress_type == zipfile.ZIP_STORED and m.compress_size != m.file_size:
        return f"stored uncompressed, yet declares {m.compress_size:,} bytes stored for {m.file_size:,}"
    if m.file_size > RATIO_FROM and m.file_size > MAX_RATIO * max(m.compress_size, 1):
        return (f"declares {m.file_size:,} bytes compressed into {m.compress_size:,}, more than {MAX_RATIO} to 1 "
                "(a zip bomb?)")
    f.seek(m.header_offset)
    head = f.read(30)
    if len(head) < 30 or head[:4] != b"PK\x03\x04":
        return "its local header is missing (a damaged archive)"
    flags, method, _, _, crc, csize, usize = struct.unpack("<2x2H2H3L", head[4:26])
    if method != m.compress_type:
        return f"its local header and the archive's directory disagree on its compression ({method} and {m.compress_type})"
    if flags & 0x08 or 0xFFFFFFFF in (csize, usize):     # sizes after the data, or in a zip64 field
        return None
    if (csize, usize) != (m.compress_size, m.file_size):
        return (f"its local header and the archive's directory disagree on its size ({usize:,} and {m.file_size:,} "
                f"bytes, {csize:,} and {m.compress_size:,} compressed): a damaged or forged archive")
    if crc != m.CRC:
        return "its local header and the archive's directory disagree on its CRC-32: a damaged or forged archive"
    return None


def _zip_chunks(f, m: zipfile.ZipInfo, plan: _Plan):
    """The bytes of member ``m``, read from its compressed data and inflated here, CHUNK bytes at most
    at a time, however far they inflate (zipfile's own reader would stop at the declared size,
    silently, and check the CRC only of what it gave)."""
    f.seek(m.header_offset + 26)
    name_len, extra_len = struct.unpack("<2H", f.read(4))
    f.seek(m.header_offset + 30 + name_len + extra_len)
    inflate = zlib.decompressobj(-15) if m.compress_type == zipfile.ZIP_DEFLATED else None
    left = m.compress_size
    while left and not (inflate and inflate.eof):
        raw = f.read(min(CHUNK, left))
        if not raw:
            raise plan.refuse(f"{shown(m.filename)}: its compressed data is cut short (a truncated archive)")
        left -= len(raw)
        if inflate is None:
            yield raw
            continue
        data = inflate.decompress(raw, CHUNK)
        while data:                        # until this input gives no more: its tail, or output zlib holds
            yield data
            data = b"" if inflate.eof else inflate.decompress(inflate.unconsumed_tail, CHUNK)
    if inflate is not None and not inflate.eof:
        raise plan.refuse(f"{shown(m.filename)}: its compressed data ends before its end (a truncated archive)")


def _unpack_zip(archive: Path, dest: Path, plan: _Plan) -> None:
    directory = _zip_directory_bytes(archive)
    if directory is not None and directory > MAX_ZIP_DIRECTORY:
        raise plan.refuse(f"a directory of {directory:,} bytes (more than {MAX_ZIP_DIRECTORY >> 20} MiB of file entries)")
    try:
        z = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        raise plan.refuse(f"not a readable zip archive ({_said(exc)})") from None
    with z, open(archive, "rb") as f:
        members = z.infolist()
        if len(members) > MAX_MEMBERS:
            raise plan.refuse(f"more than {MAX_MEMBERS:,} entries")
        taken = []
        for m in members:
            if m.is_dir() or not m.filename.endswith(TAKEN):
                continue
            rel = plan.add(m.filename, m.file_size)
            why = _zip_member_problem(f, m)
            if why:
                raise plan.refuse(f"{shown(m.filename)}: {why}")
            taken.append((m, rel))
        for m, rel in taken:               # every member checked, and the sum, before the first is written
            _copy(_zip_chunks(f, m, plan), dest / rel, m.file_size, plan, m.filename, crc=m.CRC)


# --- tar -------------------------------------------------------------------------------------------------
class _Capped:
    """A reader of a tar's (decompressed) stream that refuses to yield more than ``cap`` bytes in all:
    the members it passes over count too, whatever their headers declare."""

    def __init__(self, inner, cap: int, plan: _Plan):
        self.inner, self.cap, self.plan, self.count = inner, cap, plan, 0

    def read(self, n: int = -1) -> bytes:
        n = CHUNK if n is None or n < 0 else n
        data = self.inner.read(min(n, self.cap - self.count + 1))
        self.count += len(data)
        if self.count > self.cap:
            raise self.plan.refuse(f"the archive expands to more than {self.cap >> 20} MiB")
        return data

    def drain(self) -> None:
        """Read to the end: a gzip stream's length and checksum are checked only there."""
        while self.read(CHUNK):
            pass


class _Header(tarfile.TarInfo):
    """A tar header read strictly: where tarfile ends a listing quietly (a damaged header, a
    truncated one, no end-of-archive blocks), the archive is refused, so that the members after the
    damage are never silently missing; a long-name or pax header is bounded before tarfile reads it."""

    @classmethod
    def fromtarfile(cls, tar):
        try:
            return super().fromtarfile(tar)
        except tarfile.EOFHeaderError:           # the end-of-archive blocks
            raise
        except tarfile.EmptyHeaderError:
            raise ArchiveError("an empty file" if not tar.offset else
                               f"it ends at byte {tar.offset:,} without its end-of-archive blocks (truncated?)") from None
        except (tarfile.TruncatedHeaderError, tarfile.InvalidHeaderError) as exc:
            raise ArchiveError(f"not a tar archive ({exc})" if not tar.offset else
                               f"a damaged or truncated header at byte {tar.offset:,} ({exc})") from None

    def _proc_member(self, tar):
        if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                         tarfile.SOLARIS_XHDTYPE) and self.size > MAX_TAR_HEADER:
            raise ArchiveError(f"an extended header of {self.size:,} bytes (at most {MAX_TAR_HEADER >> 20} MiB)")
        return super()._proc_member(tar)


def _unpack_tar(archive: Path, dest: Path, plan: _Plan) -> None:
    with open(archive, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"        # by content: a .tar that is gzipped, a .tgz that is not
        raw.seek(0)
        stream = _Capped(gzip.GzipFile(fileobj=raw, mode="rb") if gzipped else raw, MAX_EXPANDED, plan)
        with tarfile.open(fileobj=stream, mode="r|", tarinfo=_Header) as tar:
            entries = 0
            # The stream read in order, each member written as it comes: nothing is read twice or held.
            while (m := tar.next()) is not None:
                entries += 1
                if entries > MAX_MEMBERS:
                    raise plan.refuse(f"more than {MAX_MEMBERS:,} entries")
                tar.members.clear()               # tarfile keeps every header it has read; none is needed again
                if m.isdir() or not m.name.endswith(TAKEN):
                    continue
                if not m.isfile():
                    raise plan.refuse(f"{shown(m.name)}: not a plain file (a link or a device)")
                rel = plan.add(m.name, m.size)
                with tar.extractfile(m) as src:
                    _copy(iter(lambda: src.read(CHUNK), b""), dest / rel, m.size, plan, m.name)
            stream.drain()


# --- either ----------------------------------------------------------------------------------------------
def _said(exc: BaseException) -> str:
    return shown(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


# What a damaged archive makes zipfile, tarfile, gzip and zlib raise while they read it.
_BROKEN = (zipfile.BadZipFile, tarfile.TarError, zlib.error, EOFError, OSError, ValueError, struct.error,
           NotImplementedError, RuntimeError, LookupError, OverflowError)


def unpack(archive: Path, dest: Path) -> None:
    """Unpack the notebooks and .cu files of ``archive`` into ``dest``, a folder of the student's own;
    ArchiveError (a ValueError) says what is wrong, whatever the archive holds."""
    plan = _Plan(shown(archive.name))
    try:
        if archive.name.lower().endswith(".zip"):
            _unpack_zip(archive, dest, plan)
        else:
            _unpack_tar(archive, dest, plan)
    except ArchiveError as exc:
        raise (exc if str(exc).startswith(plan.what + ": ") else plan.refuse(str(exc))) from None
    except _BROKEN as exc:
        raise plan.refuse(f"a broken or truncated archive ({_said(exc)})") from None


def _unpacked(name: str, archive: Path, workdir: Path) -> Student:
    """Student ``name`` of ``archive``, unpacked into a fresh folder below ``workdir`` (named by
    tempfile, never by the student); any failure is this student's, with the reason."""
    dest = Path(tempfile.mkdtemp(prefix="student-", dir=workdir))
    try:
        unpack(archive, dest)
        return Student(name, dest)
    except Exception as exc:         # noqa: BLE001 - whatever one archive does fails that student only
        shutil.rmtree(dest, ignore_errors=True)
        why = str(exc) if isinstance(exc, ArchiveError) else f"{shown(archive.name)}: could not be unpacked ({_said(exc)})"
        return Student(name, None, why)


def students_in(submissions: Path, workdir: Path) -> list[Student]:
    """Every student of ``submissions`` (sorted by name); archives are unpacked below ``workdir``.
    A refused name is listed under its folder's or archive's name as ``shown`` writes it (never a
    valid name, so never another student's), with the reason."""
    named: dict[str, list[Path]] = {}
    for p in sorted(submissions.iterdir()):
        if p.is_symlink() or p.resolve() == workdir.resolve():
            continue
        if p.is_dir() and not p.name.startswith("."):        # .git, .ipynb_checkpoints: not students
            named.setdefault(p.name, []).append(p)
        elif p.is_file() and (stem := _archive_stem(p)) is not None:
            named.setdefault(stem, []).append(p)
    workdir.mkdir(parents=True, exist_ok=True)
    found = []
    for name, paths in named.items():
        why = name_problem(name)
        if why:
            found += [Student(shown(p.name), None, f"{shown(p.name)}: refused: the name '{shown(name)}' {why}")
                      for p in paths]
        elif len(paths) > 1:
            found.append(Student(name, None, f"{len(paths)} submissions named {name} ("
                                 + ", ".join(p.name + ("/" if p.is_dir() else "") for p in paths)
                                 + "): refused, as which one to grade is not known; keep one"))
        elif paths[0].is_dir():
            found.append(Student(name, paths[0]))
        else:
            found.append(_unpacked(name, paths[0], workdir))
    return sorted(found, key=lambda s: s.name)


def find_file(folder: Path | None, name: str) -> Path | None:
    """The file called ``name`` below ``folder`` (the shallowest; links and paths leaving the folder
    are never taken), or None."""
    if folder is None:
        return None
    root = folder.resolve()
    hits = []
    for p in folder.rglob(name):
        if p.is_symlink() or not p.is_file() or not p.resolve().is_relative_to(root):
            continue
        hits.append(p)
    return min(hits, key=lambda p: (len(p.parts), str(p))) if hits else None
