"""A folder of submissions: one sub-folder or one archive (.zip, .tar, .tar.gz, .tgz) per student.

Archives are unpacked safely before anything runs: only notebooks (.ipynb) and kernel files (.cu)
are taken out, each a plain file whose path stays inside the student's folder (no absolute paths, no
``..``, no links, no devices), at most ``MAX_FILES`` of them and ``MAX_BYTES`` in all, so a hostile or
broken archive fails that student with the reason and never fills the disk.  Files are looked up by
name anywhere below a student's folder; a link, or a path leaving the folder, is never followed.
"""
from __future__ import annotations

import shutil
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Student", "students_in", "find_file", "unpack", "ARCHIVE_SUFFIXES", "MAX_FILES", "MAX_BYTES"]

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
TAKEN = (".ipynb", ".cu")
MAX_FILES = 2_000
MAX_BYTES = 512 << 20


@dataclass
class Student:
    name: str
    folder: Path | None       # None: the submission could not be unpacked
    problem: str | None = None


def _archive_stem(path: Path) -> str | None:
    for suffix in ARCHIVE_SUFFIXES:
        if path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def _safe_name(name: str) -> Path | None:
    p = Path(name)
    if p.is_absolute() or ".." in p.parts or not p.parts or name.endswith("/"):
        return None
    return p


def unpack(archive: Path, dest: Path) -> None:
    """Unpack the notebooks and .cu files of ``archive`` into ``dest``; ValueError says what is wrong."""
    taken = []
    if archive.name.endswith(".zip"):
        try:
            z = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ValueError(f"{archive.name}: not a readable zip archive ({exc})") from None
        with z:
            members = z.infolist()
            for m in members:
                if m.is_dir() or not m.filename.endswith(TAKEN):
                    continue
                if (m.external_attr >> 16) & 0o170000 not in (0, 0o100000):     # links, devices
                    raise ValueError(f"{archive.name}: {m.filename} is not a plain file")
                taken.append((m, _safe_name(m.filename), m.file_size))
            _check_members(archive, taken)
            _write_members(taken, dest, z.open, archive.name)
        return
    try:
        t = tarfile.open(archive)
    except (tarfile.TarError, OSError) as exc:
        raise ValueError(f"{archive.name}: not a readable tar archive ({exc})") from None
    with t:
        try:
            for m in t:
                if not m.name.endswith(TAKEN) or m.isdir():
                    continue
                if not m.isfile():
                    raise ValueError(f"{archive.name}: {m.name} is not a plain file")
                taken.append((m, _safe_name(m.name), m.size))
                _check_members(archive, taken)
            _write_members(taken, dest, t.extractfile, archive.name)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise ValueError(f"{archive.name}: a broken tar archive ({exc})") from None


def _check_members(archive: Path, taken: list) -> None:
    for _, rel, _ in taken:
        if rel is None:
            raise ValueError(f"{archive.name}: a file's path leaves the archive's folder")
    if len(taken) > MAX_FILES:
        raise ValueError(f"{archive.name}: more than {MAX_FILES} notebooks and kernel files")
    if sum(size for *_, size in taken) > MAX_BYTES:
        raise ValueError(f"{archive.name}: its notebooks and kernel files unpack to more than {MAX_BYTES >> 20} MiB")


def _write_members(taken: list, dest: Path, open_member, what: str) -> None:
    """Write each (member, relative path, size) of ``taken``, opened by ``open_member``, below ``dest``."""
    for m, rel, size in taken:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with open_member(m) as src, open(target, "wb") as dst:
            _copy_at_most(src, dst, size, what)


def _copy_at_most(src, dst, size: int, what: str) -> None:
    """Copy ``size`` bytes at most: a member that yields more than its header says is refused."""
    left = size
    while chunk := src.read(min(1 << 20, left + 1)):
        left -= len(chunk)
        if left < 0:
            raise ValueError(f"{what}: a member holds more than its header says")
        dst.write(chunk)


def students_in(submissions: Path, workdir: Path) -> list[Student]:
    """Every student of ``submissions`` (sorted by name); archives are unpacked into ``workdir``."""
    found: dict[str, Student] = {}
    for p in sorted(submissions.iterdir()):
        if p.name.startswith(".") or p.is_symlink():
            continue
        if p.is_dir():
            found[p.name] = Student(p.name, p)
    for p in sorted(submissions.iterdir()):
        stem = _archive_stem(p) if p.is_file() and not p.is_symlink() else None
        if stem is None or stem.startswith("."):
            continue
        if stem in found:
            found[stem] = Student(stem, found[stem].folder,
                                  f"both a folder and an archive named {stem}: the folder was graded")
            continue
        dest = workdir / stem
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        try:
            unpack(p, dest)
            found[stem] = Student(stem, dest)
        except ValueError as exc:
            found[stem] = Student(stem, None, str(exc))
    return [found[k] for k in sorted(found)]


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
