"""The notebooks' exercises carry nbgrader's cell metadata, so a course that uses nbgrader takes them
as they are: each solution cell (### BEGIN SOLUTION) holds only the solution and is followed by a
locked, graded check cell of its own; each kernel exercise's check cell is locked and graded with
the points labkit.grade gives it; every kernel exercise of notebooks/exercises is checked somewhere.
Each written question (predict, then measure) is a question cell before a measurement and a
manually graded answer cell after it, holding a model answer and a rubric of its cell's points;
the student version shows YOUR ANSWER HERE in its place.  Every check cell ends in
labkit.verdict.require, so a wrong answer raises (nbgrader gives a cell that raises no points), and is
tagged raises-exception, so Run All goes on past it."""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from labkit.course import nbgrader_course
from labkit.course.grading.notebook_exercises import is_check_cell
from labkit.course.student_copy import main as make_student_version
from labkit.course.student_copy import student_notebook, strip_written_answers
from labkit.course.grade import EXERCISES
from labkit.course.series import notebooks as series_notebooks, number

ROOT = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = series_notebooks(ROOT)
KERNEL_CHECK = re.compile(r'check_\w+_(?:kernel|program)\("exercises/([\w.]+)"')
# The notebook of an exercise whose file's number is not its notebook's (an appendix's program).
EXERCISE_NOTEBOOK = {"02_host_code.cu": "02b"}


def notebook_of(exercise_file: str) -> str:
    return EXERCISE_NOTEBOOK.get(exercise_file, exercise_file[:2])


def nbgrader(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=number)
def test_solution_cells_are_followed_by_locked_graded_checks(path):
    cells = [c for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
    ids = [nbgrader(c)["grade_id"] for c in cells if nbgrader(c)]
    assert len(ids) == len(set(ids)), f"grade_ids repeat in {path.name}: {ids}"
    for i, c in enumerate(cells):
        if "### BEGIN SOLUTION" in c.source:
            meta = nbgrader(c)
            assert meta.get("solution") is True and meta.get("locked") is False and meta.get("grade") is False, \
                f"{path.name}: a solution cell without nbgrader's solution metadata:\n{c.source[:200]}"
            last = max(k for k, line in enumerate(c.source.splitlines()) if "### END SOLUTION" in line)
            rest = [line for line in c.source.splitlines()[last + 1:] if line.strip()]
            assert all(line[0].isspace() for line in rest), f"{path.name}: code after the solution in its cell: {rest[:2]}"
            check = cells[i + 1]
            assert nbgrader(check) == {"grade": True, "grade_id": meta["grade_id"] + "_check", "locked": True,
                                       "points": nbgrader(check).get("points"), "schema_version": 3,
                                       "solution": False} and nbgrader(check)["points"] >= 1, path.name
            assert "### BEGIN SOLUTION" not in check.source
        m = KERNEL_CHECK.search(c.source)
        if m:
            meta = nbgrader(c)
            assert meta.get("grade") is True and meta.get("locked") is True, f"{path.name}: {m.group(1)}'s check"
            assert meta["points"] == EXERCISES[m.group(1)[:-3]].points


@pytest.mark.check
def test_every_kernel_exercise_is_checked_in_its_notebook():
    checked = {m.group(1) for p in NOTEBOOKS for c in nbformat.read(p, 4).cells
               for m in KERNEL_CHECK.finditer(c.source)}
    on_disk = {p.name for p in (ROOT / "exercises").glob("*.cu")}
    assert on_disk == checked == {e.file for e in EXERCISES.values()}
    for name in checked:
        notebook = next(p for p in NOTEBOOKS if number(p) == notebook_of(name))
        assert name in "".join(c.source for c in nbformat.read(notebook, 4).cells), (name, notebook.name)


# The notebooks that must have written questions: every one but 00 (setup).
WRITTEN_DUE = {"01", "02", "02b", "03", "04", "05", "06", "07", "08", "09", "10", "11", "12", "13"}
QUESTION = re.compile(r"^\*\*Question (\d+[a-z]?)\.(\d+) — predict, then measure\.\*\*")
RUBRIC = re.compile(r"\*\*Rubric \((\d+) points?\)\.\*\*")


def written_answers(cells) -> list:
    return [(i, c) for i, c in enumerate(cells) if c.cell_type == "markdown" and nbgrader(c)]


def test_every_notebook_is_due_for_written_questions():
    assert WRITTEN_DUE == {number(p) for p in NOTEBOOKS} - {"00"}


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if number(p) != "00"], ids=number)
def test_written_questions_are_manually_graded_answers_with_a_rubric(path):
    nn = number(path)
    cells = nbformat.read(path, 4).cells
    answers = written_answers(cells)
    assert nn in WRITTEN_DUE and answers, \
        f"{path.name} has no written question (a markdown answer cell with nbgrader metadata)"
    ids = [nbgrader(c)["grade_id"] for c in cells if nbgrader(c)]
    assert len(ids) == len(set(ids)), f"grade_ids repeat in {path.name}: {ids}"
    for k, (i, c) in enumerate(answers, start=1):
        meta = nbgrader(c)
        points = meta.get("points")
        assert meta == {"grade": True, "grade_id": f"{nn}_q{k}", "locked": False, "points": points,
                        "schema_version": 3, "solution": True} and points in (1, 2, 3), (path.name, meta)
        # The whole cell is the solution region: the student sees YOUR ANSWER HERE and nothing else.
        assert strip_written_answers(c.source) == ("YOUR ANSWER HERE", 1), f"{path.name} {meta['grade_id']}"
        assert "**Model answer.**" in c.source, f"{path.name} {meta['grade_id']}: no model answer"
        rubric = RUBRIC.findall(c.source)
        assert rubric == [str(points)], f"{path.name} {meta['grade_id']}: rubric {rubric}, metadata {points} points"
        # Before it: the measurement (code cells only), and before that the question.
        j = i - 1
        while j >= 0 and cells[j].cell_type == "code":
            j -= 1
        assert j < i - 1, f"{path.name} {meta['grade_id']}: no measurement (code cell) before the answer"
        m = QUESTION.match(cells[j].source) if j >= 0 else None
        # Question 2.1 in notebook 02, Question 2b.1 in its appendix 02b
        said = nn.lstrip("0") or "0"
        assert m and (m[1], int(m[2])) == (said, k) and not nbgrader(cells[j]), \
            f"{path.name} {meta['grade_id']}: the cell before its measurement is not Question {said}.{k}"


def test_the_student_version_shows_no_model_answer_or_rubric(tmp_path):
    for path in NOTEBOOKS:
        student_notebook(path, tmp_path / path.name)
        cells = nbformat.read(tmp_path / path.name, 4).cells
        assert not [c for c in cells if "**Model answer.**" in c.source or RUBRIC.search(c.source)], path.name
        for _, c in written_answers(cells):
            assert c.source == "YOUR ANSWER HERE" and nbgrader(c)["solution"] is True, path.name


def test_the_student_version_shows_no_solution_anywhere(tmp_path):
    """Neither in a cell's source nor in a stored output: a cell that prints an exercise's .cu file
    stored the instructor's solution, so the student version clears it (the student's run prints
    their own file)."""
    for path in NOTEBOOKS:
        student_notebook(path, tmp_path / path.name)
        text = (tmp_path / path.name).read_text()
        assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, path.name


def test_the_student_version_shows_no_verdict_but_keeps_the_lessons_outputs(tmp_path):
    """A check cell's stored output is the instructor's solution passing ("...: True"): cleared, so a
    student does not see an exercise pass before writing it.  Every other cell without a solution
    keeps its stored outputs (the lesson's GPU runs, which a student without a GPU reads)."""
    kept = 0
    for path in NOTEBOOKS:
        student_notebook(path, tmp_path / path.name)
        theirs = nbformat.read(path, 4).cells
        ours = nbformat.read(tmp_path / path.name, 4).cells
        for before, after in zip(theirs, ours, strict=True):
            if before.cell_type != "code":
                continue
            if is_check_cell(before):
                assert after.outputs == [] and after.execution_count is None, (path.name, after.source[:80])
                assert after.metadata == before.metadata, (path.name, after.source[:80])   # its tag too
            elif "### BEGIN SOLUTION" not in before.source and "BEGIN SOLUTION" not in str(before.outputs):
                assert after.outputs == before.outputs, (path.name, after.source[:80])
                kept += bool(after.outputs)
    assert kept > 100, kept


VERDICT_LINE = re.compile(r": True\s*$")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=number)
def test_every_check_raises_on_a_wrong_answer_and_run_all_goes_on(path):
    """A check that prints False passes under nbgrader (a test cell passes when it raises nothing):
    each verdict a check cell shows comes from labkit.verdict.require, which raises CheckFailed on a
    wrong answer.  The tag raises-exception lets Run All (JupyterLab, nbclient) go past a failing
    check, so an unanswered exercise does not stop the notebook; nbgrader still scores the error 0."""
    for c in nbformat.read(path, 4).cells:
        if not is_check_cell(c):
            continue
        gid = nbgrader(c)["grade_id"]
        assert c.metadata.get("tags") == ["raises-exception"], (path.name, gid, c.metadata.get("tags"))
        assert "from labkit.verdict import require\n" in c.source, (path.name, gid)
        printed = "".join("".join(o.get("text", "")) for o in c.outputs if o.get("output_type") == "stream")
        verdicts = [line for line in printed.splitlines() if VERDICT_LINE.search(line)]
        assert verdicts and c.source.count("require(") >= len(verdicts), (path.name, gid, verdicts)
        assert not re.search(r"print\((?:verdict|[^)]*\bok\b)", c.source), (path.name, gid, "a verdict printed")


def test_require_prints_a_pass_and_raises_the_same_words_on_a_failure(capsys):
    import numpy as np

    from labkit.verdict import CheckFailed, Verdict, require
    require("naive_grid matches labkit:", True)
    require("a:", np.True_, "| b:", np.array(True))
    require(Verdict(True, "02_conv_naive.cu: conv_naive_exercise: right: True"))
    require("my_enqueue:", "every sub-batch matches: True", ok=True)
    assert capsys.readouterr().out == ("naive_grid matches labkit: True\na: True | b: True\n"
                                       "02_conv_naive.cu: conv_naive_exercise: right: True\n"
                                       "my_enqueue: every sub-batch matches: True\n")
    for words, kw, said in [(("naive_grid matches labkit:", False), {}, "naive_grid matches labkit: False"),
                            (("a:", np.True_, "| b:", np.False_), {}, "a: True | b: False"),
                            ((Verdict(False, "k.cu: k: 3 of 9 outputs wrong\nfirst wrong ..."),), {},
                             "k.cu: k: 3 of 9 outputs wrong\nfirst wrong ..."),
                            (("my_enqueue:", "wrong:\n  sub-batch 0"), {"ok": False},
                             "my_enqueue: wrong:\n  sub-batch 0")]:
        with pytest.raises(AssertionError) as failed:
            require(*words, **kw)
        assert type(failed.value) is CheckFailed and str(failed.value) == said
        # IPython shows what _render_traceback_ returns: the words, no frames.
        assert failed.value._render_traceback_() == f"CheckFailed: {said}".splitlines()
    assert capsys.readouterr().out == ""
    with pytest.raises(TypeError):
        require("no truth value here")


def test_check_cells_are_nbgraders_locked_tests():
    cells = [nbformat.v4.new_code_cell("print(1)", metadata={"nbgrader": meta}) for meta in (
        {"grade": True, "solution": False, "locked": True, "grade_id": "a_check", "points": 1},
        {"grade": False, "solution": True, "locked": False, "grade_id": "a"},
        {"grade": True, "solution": True, "locked": False, "grade_id": "q"})]
    cells += [nbformat.v4.new_code_cell("print(1)"), nbformat.v4.new_markdown_cell("**Check**")]
    assert [is_check_cell(c) for c in cells] == [True, False, False, False, False]
    every = [c for p in NOTEBOOKS for c in nbformat.read(p, 4).cells if is_check_cell(c)]
    assert len(every) >= 20 and all(nbgrader(c)["grade_id"].endswith("_check") for c in every)


def tree(root: Path) -> dict:
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("where", ["same", "same by another path", "a link to it", "inside", "around"])
def test_the_student_copy_is_never_written_into_its_source(tmp_path, capsys, where):
    # `student_copy notebooks notebooks` overwrote the instructor's solutions with their blanks and
    # exited 0.  Refused now, with a message and exit status 2, before anything is written.
    src = tmp_path / "course" / "notebooks"
    (src / "exercises").mkdir(parents=True)
    (src / NOTEBOOKS[1].name).write_bytes(NOTEBOOKS[1].read_bytes())
    (src / "exercises" / "02_conv_naive.cu").write_bytes((ROOT / "exercises" / "02_conv_naive.cu").read_bytes())
    (tmp_path / "link").symlink_to(src, target_is_directory=True)
    dst = {"same": src, "same by another path": src / "exercises" / "..", "a link to it": tmp_path / "link",
           "inside": src / "student", "around": tmp_path / "course"}[where]
    before = tree(tmp_path / "course")
    with pytest.raises(SystemExit) as stop:
        make_student_version([str(src), str(dst)])
    assert stop.value.code == 2
    assert "source folder" in capsys.readouterr().err
    assert tree(tmp_path / "course") == before and not (src / "student").exists()
    assert make_student_version([str(src), str(tmp_path / "student")]) == 0      # a folder of its own
    assert tree(tmp_path / "course") == before and (tmp_path / "student" / NOTEBOOKS[1].name).is_file()


def test_a_source_that_is_not_a_folder_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        make_student_version([str(tmp_path / "no_such_folder"), str(tmp_path / "student")])
    assert stop.value.code == 2 and "not a folder" in capsys.readouterr().err
    assert not (tmp_path / "student").exists()


@pytest.mark.check
def test_the_nbgrader_course_holds_no_instructor_kernel_and_keeps_the_students_files(tmp_path):
    """labkit.course.nbgrader_course (tests/test_nbgrader_workflow.py runs nbgrader on what it lays
    out): every notebook an assignment of its own, with the blank copies of the kernel exercises it
    names; outputs that show a solution cleared, the others kept; a config that keeps the stored
    outputs on release and never copies a kernel file over a student's."""
    course = tmp_path / "course"
    made = nbgrader_course.make_course(ROOT, course)
    # Each notebook's own kernel exercise; notebook 13 runs a layer with the im2col kernel written in 06,
    # so its assignment carries the student's copy of that file too (never overwritten by autograde).
    reused = {"13_your_network": ["06_im2col.cu"]}
    assert made == {p.stem: [e.file for e in EXERCISES.values() if notebook_of(e.file) == number(p)] + reused.get(p.stem, [])
                    for p in NOTEBOOKS}
    for name, files in made.items():
        for f in files:
            cu = (course / "source" / name / "exercises" / f).read_text()
            assert "BEGIN SOLUTION" not in cu and "// BEGIN YOUR CODE" in cu, f
        ours = nbformat.read(course / "source" / name / f"{name}.ipynb", 4).cells
        theirs = nbformat.read(ROOT / f"{name}.ipynb", 4).cells
        for before, after in zip(theirs, ours, strict=True):
            assert after.source == before.source and after.metadata == before.metadata      # solutions stay
            if before.cell_type == "code":
                cleared = is_check_cell(before) or "BEGIN SOLUTION" in before.source + str(before.outputs)
                assert after.outputs == ([] if cleared else before.outputs), (name, before.source[:80])
    config = (course / "nbgrader_config.py").read_text()
    assert "c.ClearOutput.enabled = False" in config
    assert '"02_naive_gpu_convolution": [\n        "exercises/02_conv_naive.cu"\n    ]' in config
    # Laid out one assignment at a time, the config keeps every assignment's kernel files, the course
    # id, the cell time limit and the instructor's own settings; one it did not write is refused.
    again = tmp_path / "again"
    nbgrader_course.make_course(ROOT, again, ["02_naive_gpu_convolution"], course_id="ece 408", cell_timeout=900)
    with open(again / "nbgrader_config.py", "a") as f:
        f.write("c.Exchange.root = '/srv/exchange'\n")
    nbgrader_course.make_course(ROOT, again, ["03_shared_memory_tiling"])
    config = (again / "nbgrader_config.py").read_text()
    assert '"exercises/02_conv_naive.cu"' in config and '"exercises/03_conv_tiled.cu"' in config
    assert 'course_id = "ece 408"' in config and "timeout = 900" in config
    assert config.endswith(nbgrader_course.MINE + "\nc.Exchange.root = '/srv/exchange'\n")
    (again / "nbgrader_config.py").write_text("c = get_config()\n")
    with pytest.raises(ValueError, match="not written by"):
        nbgrader_course.make_course(ROOT, again, ["02_naive_gpu_convolution"])
    assert (again / "nbgrader_config.py").read_text() == "c = get_config()\n"
    for where in (ROOT, ROOT / "course", ROOT.parent):
        with pytest.raises(ValueError, match="outside the repository"):
            nbgrader_course.make_course(ROOT, where, ["02_naive_gpu_convolution"])


@pytest.mark.check
def test_the_release_check_finds_every_solution_and_nothing_in_a_student_copy(tmp_path):
    """release_leaks, what `nbgrader_course --check-release` runs on nbgrader's release: the
    instructor's files, "released" as they are, show their solutions (code regions, written answers,
    rubrics, kernel regions, a printed kernel file); the student version of every notebook shows none."""
    leaked = nbgrader_course.release_leaks(ROOT, ROOT)
    assert any("(source): tiles = -(-Ho // tile_width)" in leak for leak in leaked)
    assert any("(source): **Rubric" in leak for leak in leaked)
    assert any("(outputs): m = blockIdx.y;" in leak for leak in leaked)       # the printed .cu file
    assert "exercises/02_conv_naive.cu: m = blockIdx.y;" in leaked
    for nn in WRITTEN_DUE:
        assert any(leak.startswith(nn) for leak in leaked), nn
    make_student_version([str(ROOT), str(tmp_path / "student")])
    assert nbgrader_course.release_leaks(tmp_path / "student", ROOT) == []
