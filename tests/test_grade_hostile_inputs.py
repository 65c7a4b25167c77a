"""The grader (python -m labkit.grade) against submissions made to break it: broken, forged and
bomb archives (zip, .tar, .tar.gz), names that are options, line breaks, formulas or nothing, and
text that tries to rewrite the feedback pages.  Each fails that student only, with the reason in
the gradebook; the others are graded.  Every hostile file is made here, from bytes: a patched CRC,
a set encryption bit, a member of method 99, sizes that lie in one header or both, a deflate stream
of 512 MiB of zeros in 530 KB.  The grading runs a written question only (no process is started),
so each test takes a second or two."""
from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import subprocess
import tarfile
import time
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest

from labkit.course import grade
from labkit.course.grade import INSTRUCTOR_NOTEBOOKS, grade_folder
from labkit.course.grading import gradebook, slurm, submissions
from labkit.course.grading.submissions import ArchiveError, name_problem, shown

NOTEBOOK = "01_cpu_reference_convolution.ipynb"
QUESTION = "01_q1"          # a written question: graded without starting a process


def notebook(answer: str = "The bias is added once per output channel.") -> str:
    """The instructor's notebook 01 with ``answer`` in written question 01_q1's cell."""
    nb = json.loads((INSTRUCTOR_NOTEBOOKS / NOTEBOOK).read_text())
    for c in nb["cells"]:
        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == QUESTION:
            c["source"] = answer
    return json.dumps(nb)


def student_folder(root: Path, name: str, answer: str | None = None) -> Path:
    (root / name).mkdir(parents=True)
    (root / name / NOTEBOOK).write_text(notebook(answer) if answer else notebook())
    return root / name


# --- archives made from bytes ---------------------------------------------------------------------------
def zero_deflate(mib: int, head: bytes = b"") -> bytes:
    """A raw deflate stream of ``head`` then ``mib`` MiB of zeros, in about 1 KB per MiB: after a full
    flush each MiB compresses to the same bytes, so one is compressed and repeated."""
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    start = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH) if head else b""
    segment = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    return start + segment * mib + c.flush(zlib.Z_FINISH)


def raw_zip(members: list[dict]) -> bytes:
    """A zip written field by field.  Each member: name, data (as stored), method, crc, csize, usize,
    flags; ``local`` and ``central`` override fields in that header alone (a lie in one place)."""
    out, directory = bytearray(), bytearray()
    for m in members:
        name = m["name"].encode()
        f = {"method": 0, "flags": 0, "crc": zlib.crc32(m["data"]), "csize": len(m["data"]), "usize": len(m["data"]),
             **{k: v for k, v in m.items() if k not in ("name", "data", "local", "central")}}
        local, central = {**f, **m.get("local", {})}, {**f, **m.get("central", {})}
        offset = len(out)
        out += struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, local["flags"], local["method"], 0, 0x21,
                           local["crc"], local["csize"], local["usize"], len(name), 0) + name + m["data"]
        directory += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, central["flags"], central["method"], 0, 0x21,
                                 central["crc"], central["csize"], central["usize"], len(name), 0, 0, 0, 0,
                                 0o100644 << 16, offset) + name
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(directory), len(out), 0)
    return bytes(out + directory + end)


def deflated(name: str, text: bytes, **fields) -> dict:
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    data = c.compress(text) + c.flush()
    return {"name": name, "data": data, "method": 8, "crc": zlib.crc32(text), "csize": len(data), "usize": len(text),
            **fields}


def made_zip(members: dict, method=zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def made_tar(members: dict, mode: str = "w", **options) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode, **options) as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def gzip_of(raw_deflate: bytes, crc: int = 0, size: int = 0) -> bytes:
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff" + raw_deflate + struct.pack("<2L", crc, size & 0xFFFFFFFF)


NB = notebook().encode()
KERNEL = (INSTRUCTOR_NOTEBOOKS / "exercises" / "02_conv_naive.cu").read_bytes()
TWO = {f"eve/{NOTEBOOK}": NB, "eve/exercises/02_conv_naive.cu": KERNEL}


def _duplicate() -> bytes:
    return raw_zip([deflated("eve/02_conv_naive.cu", KERNEL), deflated("eve/02_conv_naive.cu", b"// the other one")])


def _truncated_tar() -> bytes:
    data = made_tar(TWO)
    return data[:512 + len(NB) // 2]                       # inside the notebook's data


def _tar_cut_before_its_end() -> bytes:
    data = made_tar(TWO)
    blocks = 512 + -(-len(NB) // 512) * 512 + 512 + -(-len(KERNEL) // 512) * 512
    return data[:blocks]                                    # every member whole, the end-of-archive blocks gone


def _damaged_second_header() -> bytes:
    data = bytearray(made_tar(TWO))
    second = 512 + -(-len(NB) // 512) * 512
    data[second + 148:second + 156] = b"0000000\x00"         # its checksum, wrong
    return bytes(data)


def _flipped_in_the_middle() -> bytes:
    data = bytearray(made_tar(TWO, "w:gz"))
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0x5A
    return bytes(data)


def _wrong_gzip_checksum() -> bytes:
    data = bytearray(made_tar(TWO, "w:gz"))
    data[-8] ^= 0xFF                                        # the trailer's CRC-32: read only at the stream's end
    return bytes(data)


def _tar_bomb() -> bytes:
    head = made_tar({"eve/data.bin": b""})[:512]
    head = bytearray(head)
    head[124:136] = b"%011o\x00" % (64 << 20)               # a member the grader never takes, 64 MiB of zeros
    head[148:156] = b"        "
    head[148:156] = b"%06o\x00 " % sum(head)
    return gzip_of(zero_deflate(64, bytes(head)))


# name: (the archive's suffix, its bytes, what the reason says)
FAULTS = {
    "bad_crc": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, crc=1234)]), r"CRC-32 does not match its data"),
    "crc_lies_in_the_directory": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, central={"crc": 1})]),
                                  r"local header and the archive's directory disagree on its CRC-32"),
    "encrypted": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, flags=1)]), r"encrypted"),
    "method_99": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, method=99)]), r"method 99"),
    "bzip2": (".zip", lambda: made_zip(TWO, zipfile.ZIP_BZIP2), r"method 12 \(bzip2\).*only stored and deflate"),
    "size_smaller_than_held": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, usize=len(NB) // 2)]),
                               r"holds more than the [\d,]+ bytes its header declares"),
    "size_larger_than_held": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, usize=len(NB) + 4096)]),
                              r"holds [\d,]+ bytes where its header declares [\d,]+"),
    "size_lies_in_the_local_header": (".zip", lambda: raw_zip([deflated(f"eve/{NOTEBOOK}", NB, local={"usize": 10})]),
                                      r"disagree on its size"),
    "stored_sizes_differ": (".zip", lambda: raw_zip([{"name": "eve/02_conv_naive.cu", "data": KERNEL,
                                                      "usize": 3 * len(KERNEL)}]), r"stored uncompressed, yet declares"),
    "name_over_255_bytes": (".zip", lambda: made_zip({"eve/" + "é" * 130 + ".cu": KERNEL}), r"longer than 255 bytes"),
    "file_and_folder": (".zip", lambda: made_zip({f"eve/{NOTEBOOK}": NB, f"eve/{NOTEBOOK}/02_conv_naive.cu": KERNEL}),
                        r"both a file and a folder"),
    "duplicate_name": (".zip", _duplicate, r"02_conv_naive.cu: in the archive twice"),
    "zip_bomb": (".zip", lambda: raw_zip([{"name": f"eve/{NOTEBOOK}", "data": zero_deflate(512), "method": 8,
                                           "crc": 0, "usize": 512 << 20}]),
                 r"the archive expands to more than 64 MiB"),
    "ratio_bomb": (".zip", lambda: raw_zip([{"name": f"eve/{NOTEBOOK}", "data": zero_deflate(32), "method": 8,
                                             "crc": 0, "usize": 32 << 20}]), r"more than 200 to 1 \(a zip bomb\?\)"),
    "kernel_too_big": (".zip", lambda: made_zip({"eve/02_conv_naive.cu": b"//" + bytes(2 << 20)}),
                       r"more than a kernel file may have \(1 MiB\)"),
    "not_a_zip": (".zip", lambda: os.urandom(3000), r"not a readable zip archive"),
    "truncated_tgz": (".tgz", lambda: made_tar(TWO, "w:gz")[:-100], r"truncated archive \(EOFError"),
    "truncated_tar_gz": (".tar.gz", lambda: made_tar(TWO, "w:gz")[:900], r"EOFError|truncated"),
    "truncated_tar": (".tar", _truncated_tar, r"unexpected end of data"),
    "tar_without_its_end": (".tar", _tar_cut_before_its_end, r"without its end-of-archive blocks"),
    "damaged_tar_header": (".tar", _damaged_second_header, r"damaged or truncated header at byte [\d,]+"),
    "corrupt_tgz": (".tgz", _flipped_in_the_middle, r"broken or truncated archive|damaged"),
    "gzip_checksum": (".tar.gz", _wrong_gzip_checksum, r"CRC check failed"),
    "tar_bomb": (".tar.gz", _tar_bomb, r"the archive expands to more than 8 MiB"),
    "huge_pax_header": (".tar", lambda: made_tar({f"eve/{NOTEBOOK}": NB}, format=tarfile.PAX_FORMAT,
                                                 pax_headers={"comment": "x" * (2 << 20)}),
                        r"an extended header of [\d,]+ bytes"),
    "not_a_tar": (".tgz", lambda: os.urandom(3000), r"broken or truncated archive|not a tar archive"),
    "empty_tar": (".tar", lambda: b"", r"an empty file"),
}


@pytest.fixture
def small_stream_cap(monkeypatch):
    """The cap on a tar's inflated stream, 8 MiB instead of 1 GiB: the same code, in a tenth of a second."""
    monkeypatch.setattr(submissions, "MAX_EXPANDED", 8 << 20)


@pytest.mark.check
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_archive_fault_is_refused_with_its_reason_and_leaves_nothing(tmp_path, small_stream_cap, fault):
    suffix, make, reason = FAULTS[fault]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / f"eve{suffix}").write_bytes(make())
    student_folder(tmp_path / "in", "ann")
    work = tmp_path / "work"
    found = {s.name: s for s in submissions.students_in(tmp_path / "in", work)}
    eve = found["eve"]
    assert eve.folder is None and eve.problem and eve.problem.startswith(f"eve{suffix}: "), eve
    assert re.search(reason, eve.problem), eve.problem
    assert found["ann"].problem is None and found["ann"].folder == tmp_path / "in" / "ann"
    assert list(work.iterdir()) == [], "a refused archive leaves nothing unpacked"


def test_every_fault_fails_its_student_only_and_the_others_are_graded(tmp_path, small_stream_cap):
    """All the faulty archives in one folder, between good students (a folder, a zip, a .tar.gz): each
    faulty one gets no points and its reason in gradebook.json and gradebook.csv, the good ones
    their answers; the run finishes."""
    subs = tmp_path / "in"
    for fault, (suffix, make, _) in FAULTS.items():
        subs.mkdir(exist_ok=True)
        (subs / f"{fault}{suffix}").write_bytes(make())
    student_folder(subs, "ann", "ann's answer")
    (subs / "bea.zip").write_bytes(made_zip({f"bea/{NOTEBOOK}": notebook("bea's answer")}))
    (subs / "cy.tar.gz").write_bytes(made_tar({f"cy/{NOTEBOOK}": notebook("cy's answer").encode()}, "w:gz"))
    rows = {r["student"]: r for r in grade_folder(subs, tmp_path / "out", exercises=[QUESTION])}
    assert set(rows) == set(FAULTS) | {"ann", "bea", "cy"}
    for fault, (_, _, reason) in FAULTS.items():
        assert rows[fault]["problem"] and re.search(reason, rows[fault]["problem"]), rows[fault]
        assert rows[fault]["exercises"][QUESTION]["message"].endswith("(no answer)")
    for good in ("ann", "bea", "cy"):
        assert rows[good]["problem"] is None
        assert rows[good]["exercises"][QUESTION]["message"].endswith(f"{good}'s answer"), rows[good]
    with open(tmp_path / "out" / "gradebook.csv", newline="") as f:
        table = {r["student"]: r for r in csv.DictReader(f)}
    assert "CRC-32 does not match" in table["bad_crc"]["problem"] and table["ann"]["problem"] == ""


def _peak_and_error(call):
    tracemalloc.start()
    try:
        call()
        err = None
    except Exception as exc:   # noqa: BLE001 - the test inspects it
        err = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak, err


@pytest.mark.check
def test_a_zip_bomb_is_refused_before_a_byte_is_written(tmp_path):
    """530 KB that inflate to 512 MiB (honestly declared): refused from the declared sizes, before
    anything is read or written, in well under a second and a few MiB of memory."""
    bomb = tmp_path / "eve.zip"
    bomb.write_bytes(raw_zip([{"name": f"eve/{NOTEBOOK}", "data": zero_deflate(512), "method": 8, "crc": 0,
                               "usize": 512 << 20}]))
    assert bomb.stat().st_size < 600_000
    dest = tmp_path / "dest"
    dest.mkdir()
    start = time.perf_counter()
    peak, err = _peak_and_error(lambda: submissions.unpack(bomb, dest))
    assert isinstance(err, ArchiveError) and "the archive expands to more than 64 MiB" in str(err), err
    assert time.perf_counter() - start < 5 and peak < 8 << 20, peak
    assert list(dest.iterdir()) == []


@pytest.mark.check
def test_a_member_that_lies_about_its_size_is_read_no_further_than_it_declares(tmp_path):
    """Both headers declare 1,000 bytes (and the CRC-32 of 1,000 zeros); the data inflates to 256 MiB.
    The copy stops at the first chunk past the declared bytes: the disk and the memory never see
    the rest."""
    liar = tmp_path / "eve.zip"
    liar.write_bytes(raw_zip([{"name": f"eve/{NOTEBOOK}", "data": zero_deflate(256), "method": 8,
                               "crc": zlib.crc32(bytes(1000)), "usize": 1000}]))
    dest = tmp_path / "dest"
    dest.mkdir()
    start = time.perf_counter()
    peak, err = _peak_and_error(lambda: submissions.unpack(liar, dest))
    assert isinstance(err, ArchiveError) and "holds more than the 1,000 bytes its header declares" in str(err), err
    assert time.perf_counter() - start < 5 and peak < 8 << 20, peak
    assert list(dest.rglob("*.ipynb")) == [] or all(p.stat().st_size <= 1000 for p in dest.rglob("*.ipynb"))


@pytest.mark.check
def test_a_tar_stream_that_inflates_past_the_cap_is_stopped_there(tmp_path, monkeypatch):
    """A .tar.gz whose one member (never taken: not a notebook) is 64 MiB of zeros: the stream is read
    in chunks and stopped at the cap, with that reason; memory stays at a chunk's size."""
    monkeypatch.setattr(submissions, "MAX_EXPANDED", 16 << 20)
    bomb = tmp_path / "eve.tar.gz"
    bomb.write_bytes(_tar_bomb())
    dest = tmp_path / "dest"
    dest.mkdir()
    peak, err = _peak_and_error(lambda: submissions.unpack(bomb, dest))
    assert isinstance(err, ArchiveError) and "expands to more than 16 MiB" in str(err), err
    assert peak < 8 << 20, peak


@pytest.mark.check
def test_a_good_tar_is_unpacked_member_by_member(tmp_path):
    archive = tmp_path / "ann.tgz"
    archive.write_bytes(made_tar({f"ann/{NOTEBOOK}": NB, "ann/exercises/02_conv_naive.cu": KERNEL,
                                  "ann/data.bin": bytes(1 << 20), "ann/link.cu": b""}, "w:gz"))
    dest = tmp_path / "dest"
    dest.mkdir()
    submissions.unpack(archive, dest)
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == \
        ["ann/01_cpu_reference_convolution.ipynb", "ann/exercises/02_conv_naive.cu", "ann/link.cu"]
    assert (dest / "ann" / NOTEBOOK).read_bytes() == NB


# --- names ---------------------------------------------------------------------------------------------
@pytest.mark.check
@pytest.mark.parametrize("name, why", [
    ("", "is empty"), (".", "folder's own name"), ("..", "folder's own name"), ("-bob", "option"),
    ("--help", "option"), (".bob", "hidden"), ("a/b", "separator"), ("a\\b", "separator"),
    ("a\nb", "control character"), ("a\rb", "control character"), ("tab\there", "control character"),
    ("esc\x1b[2J", "control character"), ("rtl\u202eevil", "control character"), ("bad\udcffbytes", "control character"),
    ("x" * 129, "longer than 128 bytes"),
])
def test_a_name_that_could_be_an_option_a_path_or_a_control_is_refused(name, why):
    assert why in (name_problem(name) or ""), (name, name_problem(name))


@pytest.mark.check
@pytest.mark.parametrize("name", ["ann", "=2+5", "@SUM(A1)", "+1", "Zoë Ångström", "o'brien", "a|b", "*x*", "张伟"])
def test_ordinary_and_merely_odd_names_are_students(name):
    assert name_problem(name) is None


def test_refused_names_and_collisions_fail_that_student_only(tmp_path):
    """Folders named -bob, with a line break, a terminal control or a backslash; archives named .zip,
    .tar.gz, ..zip, -carl.zip; ann/ next to ann.zip: each refused with the reason, under its entry's
    name as the gradebook can show it; the other students (a folder, an archive unpacked after the
    archive with no name) are graded, each from a folder of their own."""
    subs = tmp_path / "in"
    for name in ("-bob", "a\nb", "esc\x1b[2J", "back\\slash", "ann", "=2+5", "zoe"):
        student_folder(subs, name, f"{name}'s answer")
    good_zip = made_zip({f"dan/{NOTEBOOK}": notebook("dan's answer")})
    for name in (".zip", ".tar.gz", "..zip", "-carl.zip", "ann.zip", "dan.zip"):
        (subs / name).write_bytes(good_zip)
    work = tmp_path / "work"
    found = {s.name: s for s in submissions.students_in(subs, work)}
    assert set(found) == {"-bob", "a\\nb", "esc\\x1b[2J", "back\\\\slash", ".zip", ".tar.gz", "..zip", "-carl.zip",
                          "ann", "=2+5", "zoe", "dan"}
    for label in ("-bob", "-carl.zip"):
        assert "starts with '-'" in found[label].problem and found[label].folder is None
    assert "line break" in found["a\\nb"].problem and "path separator" in found["back\\\\slash"].problem
    assert "is empty" in found[".zip"].problem and "is empty" in found[".tar.gz"].problem
    assert "folder's own name" in found["..zip"].problem
    assert found["ann"].folder is None and "2 submissions named ann (ann/, ann.zip)" in found["ann"].problem
    # dan's archive has a folder of its own below the work folder, untouched by the archives without names.
    assert found["dan"].folder.parent == work and (found["dan"].folder / "dan" / NOTEBOOK).is_file()
    assert list(work.iterdir()) == [found["dan"].folder]

    rows = {r["student"]: r for r in grade_folder(subs, tmp_path / "out", exercises=[QUESTION])}
    for good in ("=2+5", "zoe", "dan"):
        assert rows[good]["problem"] is None and rows[good]["exercises"][QUESTION]["message"].endswith(f"{good}'s answer")
    for refused in ("-bob", "a\\nb", ".zip", "ann"):
        assert rows[refused]["problem"] and rows[refused]["points"] == 0
        assert rows[refused]["exercises"][QUESTION]["message"].endswith("(no answer)")
    # A refused name gets a row, but no feedback page: it cannot be a file's name (ann's can).
    assert sorted(p.name for p in (tmp_path / "out" / "feedback").iterdir()) == ["=2+5.md", "ann.md", "dan.md", "zoe.md"]


def test_the_slurm_job_carries_only_names_it_can_and_the_merge_has_every_student(tmp_path):
    """A name with a line break would shift every later task onto another's line, and one starting
    with '-' would be an option: write_slurm refuses them; `--slurm` leaves them out of the array and
    writes their rows (the reason, no points) as a part of their own, which the merge joins in."""
    subs = tmp_path / "in"
    shell = "x$(touch pwned)`touch pwned`;touch pwned"
    for name in ("-bob", "a\nb", "ann", "=2+5", shell):
        student_folder(subs, name, f"{name}'s answer")
    for bad in (["ann", "-bob"], ["ann", "a\nb"], []):
        with pytest.raises(ValueError):
            slurm.write_slurm(subs, tmp_path / "x", bad, [])
    out = tmp_path / "grades"
    assert grade.main([str(subs), "--slurm", "--out", str(out), "--exercises", QUESTION]) == 0
    assert (out / "slurm" / "students.txt").read_text() == f"=2+5\nann\n{shell}\n"
    script = (out / "slurm" / "grade_array.sbatch").read_text()
    assert "#SBATCH --array=0-2" in script and '--student="$NAME"' in script
    for task in range(3):
        done = subprocess.run(["bash", str(out / "slurm" / "grade_array.sbatch")], capture_output=True, text=True,
                              env={**os.environ, "SLURM_ARRAY_TASK_ID": str(task)}, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
    assert not list(tmp_path.rglob("pwned")), "a name is data, never a command"
    subprocess.run(["bash", str(out / "slurm" / "merge.sbatch")], check=True, capture_output=True)
    rows = {r["student"]: r for r in json.loads((out / "gradebook.json").read_text())}
    assert set(rows) == {"-bob", "a\\nb", "ann", "=2+5", shell}
    assert rows[shell]["exercises"][QUESTION]["message"].endswith(f"{shell}'s answer")
    assert rows["ann"]["exercises"][QUESTION]["message"].endswith("ann's answer")
    assert rows["=2+5"]["exercises"][QUESTION]["message"].endswith("=2+5's answer")
    assert "starts with '-'" in rows["-bob"]["problem"] and "line break" in rows["a\\nb"]["problem"]


# --- what is written ---------------------------------------------------------------------------------------
@pytest.mark.check
def test_csv_cells_that_would_be_formulas_are_text_and_points_stay_numbers():
    assert [gradebook.csv_cell(v) for v in ["=2+5", "+1", "-bob", "@SUM(A1)", "\tx", "\rx", "ann", "", 3, 0, -1]] == \
        ["'=2+5", "'+1", "'-bob", "'@SUM(A1)", "'\tx", "'\rx", "ann", "", 3, 0, -1]


def test_the_gradebook_csv_escapes_formulas(tmp_path):
    subs = tmp_path / "in"
    for name in ("=2+5", "@SUM(A1)", "+1", "-bob", "ann"):
        student_folder(subs, name)
    grade_folder(subs, tmp_path / "out", exercises=[QUESTION])
    with open(tmp_path / "out" / "gradebook.csv", newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == ["student", QUESTION, "points", "max_points", "written_max", "problem", "seed", "sandbox"]
    by_name = {r[0]: r for r in table[1:]}
    assert set(by_name) == {"'=2+5", "'@SUM(A1)", "'+1", "'-bob", "ann"}
    assert by_name["'=2+5"][2:5] == ["0", "0", "2"]                  # numbers, unescaped
    assert by_name["'-bob"][5].startswith("'-bob: refused")           # the reason starts with the name: escaped too


def _render(page: str):
    markdown_it = pytest.importorskip("markdown_it")
    return markdown_it.MarkdownIt("commonmark").enable("table").parse(page)


def _text(inline) -> str:
    """What an inline token shows: its text, code spans' included, escapes undone."""
    return "".join(c.content for c in inline.children)


def _headings(tokens) -> list[str]:
    return [_text(tokens[i + 1]) for i, t in enumerate(tokens) if t.type == "heading_open"]


@pytest.mark.check
def test_a_written_answer_cannot_close_its_fence_and_forge_points(tmp_path):
    forged = ("done.\n```\n\n## 01_q1: 3 / 3 (passed)\n\n**3 of 3 points** graded automatically\n\n"
              "`````\n# ann\n~~~\n\x1b[2J<script>alert(1)</script>")
    subs = tmp_path / "in"
    student_folder(subs, "ann", forged)
    student_folder(subs, "*x*_[y]", "fine")
    grade_folder(subs, tmp_path / "out", exercises=[QUESTION])
    page = (tmp_path / "out" / "feedback" / "ann.md").read_text()
    assert "\x1b" not in page and "\\x1b[2J" in page
    tokens = _render(page)
    assert _headings(tokens) == ["ann", "01_q1: graded by hand"], _headings(tokens)
    strong = [_text(t) for t in tokens if t.type == "inline" and any(c.type == "strong_open" for c in t.children)]
    assert strong == ["0 of 0 points graded automatically; written questions (2 points) are graded by hand"], strong
    (block,) = [t for t in tokens if t.type == "fence"]
    assert "3 of 3 points" in block.content and "<script>" in block.content and block.content.rstrip().endswith("</script>")
    odd = _render((tmp_path / "out" / "feedback" / "*x*_[y].md").read_text())
    assert _headings(odd)[0] == "*x*_[y]" and {c.type for c in odd[1].children} == {"text"}, odd[1].children


@pytest.mark.check
def test_a_reason_with_backticks_and_line_breaks_stays_in_its_block(tmp_path):
    """A member named to forge the page (backticks, a line break, a heading) is named in the reason,
    which stays one line, fenced."""
    subs = tmp_path / "in"
    subs.mkdir()
    (subs / "eve.zip").write_bytes(raw_zip([deflated("````\n# 3 of 3 points\n````.ipynb", NB, flags=1)]))
    grade_folder(subs, tmp_path / "out", exercises=[QUESTION])
    tokens = _render((tmp_path / "out" / "feedback" / "eve.md").read_text())
    assert _headings(tokens) == ["eve", "01_q1: graded by hand"], _headings(tokens)
    assert "# 3 of 3 points" in [t for t in tokens if t.type == "fence"][0].content


@pytest.mark.check
def test_leaderboard_cells_hold_their_names(tmp_path):
    names = ["a|b", "*x*", "`c`", "<b>d</b>", "e\nf"]
    gradebook.write_leaderboard([{"student": n, "exercise": "08_lrn", "ms": 1.0 + i, "what": "N=1, C=2",
                                  "device": "cpu"} for i, n in enumerate(names)], tmp_path)
    tokens = _render((tmp_path / "leaderboard.md").read_text())
    rows, row = [], None
    for t in tokens:
        if t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(_text(t))
        elif t.type == "tr_close":
            rows.append(row)
            row = None
    assert rows[0] == ["rank", "student", "op time (ms)"]
    assert [r[1] for r in rows[1:]] == ["a|b", "*x*", "`c`", "<b>d</b>", "e\\nf"] and all(len(r) == 3 for r in rows)


@pytest.mark.check
def test_shown_writes_every_unprintable_character_as_an_escape():
    assert shown("a\nb\x1b[2J\u202e\\\udcff") == "a\\nb\\x1b[2J\\u202e\\\\\\udcff"
    assert shown("Zoë 张伟 =2+5") == "Zoë 张伟 =2+5"
