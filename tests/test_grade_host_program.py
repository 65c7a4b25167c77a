"""python -m labkit.grade on notebook 02b's host-code exercise: the instructor's program gets the
exercise's points, a student who never copies y back gets none and is told why; both built and run
in the grader's sandbox.  Skipped, with the reason, where bubblewrap cannot run."""
from __future__ import annotations

import pytest

from labkit.course import sandbox
from labkit.course.grade import EXERCISES, INSTRUCTOR_NOTEBOOKS, grade_folder

pytestmark = pytest.mark.skipif(sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}")


def test_the_instructors_program_gets_full_points_and_a_wrong_one_none(tmp_path):
    source = (INSTRUCTOR_NOTEBOOKS / "exercises" / "02_host_code.cu").read_text()
    back = "  CHECK(cudaMemcpy(h_y.data(), d_y, y_count * sizeof(float), cudaMemcpyDeviceToHost));\n"
    assert back in source
    for name, text in (("ann", source), ("bob", source.replace(back, ""))):
        (tmp_path / "subs" / name / "exercises").mkdir(parents=True)
        (tmp_path / "subs" / name / "exercises" / "02_host_code.cu").write_text(text)
    rows = {r["student"]: r for r in grade_folder(tmp_path / "subs", tmp_path / "grades", exercises=["02_host_code"],
                                                  timeout=90, seed=5, workers=1)}
    assert EXERCISES["02_host_code"].points == 2
    ann, bob = rows["ann"]["exercises"]["02_host_code"], rows["bob"]["exercises"]["02_host_code"]
    assert (rows["ann"]["points"], rows["bob"]["points"]) == (2, 0), (ann, bob)
    assert ann["message"].endswith(": True")
    assert "no output came back from the device" in bob["message"] and "cudaMemcpyDeviceToHost" in bob["message"]
    feedback = (tmp_path / "grades" / "feedback" / "bob.md").read_text()
    assert "no output came back from the device" in feedback
