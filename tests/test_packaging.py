"""pyproject.toml and environment.yml name the same packages; the student-version tool and the series
runner (make student, make series) work."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from labkit.course.student_copy import strip_solutions, strip_written_answers

pytestmark = pytest.mark.check

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+ (tomllib)")

ROOT = Path(__file__).resolve().parent.parent
# Names that differ between the two worlds, or exist in one only for a good reason.
CONDA_ONLY = {"python", "pip", "cxx-compiler"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower()


def _pyproject() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in data["dependencies"]}
    for extra in ("reference", "lab"):  # GPU extras depend on the CUDA version: documented apart
        names |= {_name(r) for r in data["optional-dependencies"][extra]}
    return names


def _environment() -> set[str]:
    names = set()
    text = (ROOT / "environment.yml").read_text()
    for line in text.split("dependencies:", 1)[1].splitlines():
        m = re.match(r"^\s*-\s+([A-Za-z0-9_.\-]+[^#]*)", line)
        if m and not m.group(1).startswith("-e"):
            names.add(_name(m.group(1)))
    return names - {"pip:"}


def test_environment_yml_mirrors_pyproject():
    py, env = _pyproject(), _environment() - CONDA_ONLY
    assert py == env, f"only in pyproject: {sorted(py - env)}; only in environment.yml: {sorted(env - py)}"


def test_version_ranges_agree():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = data["dependencies"] + data["optional-dependencies"]["lab"] + data["optional-dependencies"]["reference"]
    env_text = (ROOT / "environment.yml").read_text()
    for r in reqs:
        assert r.replace(" ", "") in env_text.replace(" ", ""), f"{r} not pinned the same in environment.yml"


def test_student_version_replaces_solution_regions():
    src = "x = 1\n    ### BEGIN SOLUTION\n    y = secret()\n    ### END SOLUTION\nprint(x)"
    out, n = strip_solutions(src)
    assert n == 1 and "secret" not in out
    assert "    # YOUR CODE HERE\n    raise NotImplementedError()" in out and out.endswith("print(x)")
    with pytest.raises(ValueError, match="no ### END SOLUTION"):
        strip_solutions("### BEGIN SOLUTION\nx = 1\n")


def test_student_version_replaces_written_answers():
    src = ("### BEGIN SOLUTION\n**Model answer.** secret\n\n**Rubric (2 points).**\n- 1 point: a\n"
           "- 1 point: b\n### END SOLUTION")
    out, n = strip_written_answers(src)
    assert n == 1 and out == "YOUR ANSWER HERE"
    out, n = strip_written_answers("Keep this.\n### BEGIN SOLUTION\nsecret\n### END SOLUTION\nAnd this.")
    assert n == 1 and out == "Keep this.\nYOUR ANSWER HERE\nAnd this."
    assert strip_written_answers("no region, `### BEGIN SOLUTION` only mentioned") == \
        ("no region, `### BEGIN SOLUTION` only mentioned", 0)
    with pytest.raises(ValueError, match="no ### END SOLUTION"):
        strip_written_answers("### BEGIN SOLUTION\nsecret\n")


def test_the_series_runner_runs_the_notebooks_asked_for(tmp_path):
    """`make series` without the hour it takes: the numbered notebooks in order, and a run of --only
    a number no notebook has, which executes none and still makes its output folder."""
    from labkit.course import series
    found = [p.name for p in series.notebooks(ROOT / "notebooks")]
    assert found == sorted(found) and found[0].startswith("00_") and "README.md" not in found
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "labkit.course.series", "--out", str(tmp_path), "--only", "99"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "backend" in out.stdout and ".ipynb" not in out.stdout
    assert (tmp_path / "notebooks").is_dir() and not any((tmp_path / "notebooks").iterdir())
