"""For a course that outgrows one machine: a Slurm array job, one task per student, and a merge step.

    python -m labkit.grade submissions/ --slurm        # writes grades/slurm/, then:
    sh grades/slurm/submit.sh                          # sbatch the array, then the merge after it

Each task grades one student (``--student=NAME``) into ``grades/parts/NAME/``; the merge job, started
by Slurm once every task has ended (``--dependency=afterany``), joins the parts into one gradebook
(``--merge``).  Slurm does the scheduling; nothing here waits or polls.

A student's name reaches the task as data, never as shell code: it is one line of students.txt, read
into a quoted variable and passed as ``--student=NAME``, so even a name that starts with ``-`` could
not become an option.  Only names that ``name_problem`` accepts are written (no line break, which
would shift every later task onto another student's line; no ``-``, no separator, no control
character): ``write_slurm`` refuses any other, and ``python -m labkit.grade --slurm`` grades the
students whose names it refused at once, into a part of their own.
"""
from __future__ import annotations

import shlex
import sys
from pathlib import Path

from .submissions import name_problem

__all__ = ["write_slurm"]


def write_slurm(submissions: Path, out: Path, students: list[str], grade_args: list[str], *,
                cpus: int = 2, memory_gib: float = 8.0, minutes: int = 60, partition: str | None = None) -> Path:
    """Write the array job, the merge job and submit.sh into ``out/slurm``; returns that folder.
    ``grade_args``: the options every task passes on to ``python -m labkit.grade`` (timeouts, backend).
    ValueError: no student, or a name that ``name_problem`` refuses."""
    if not students:
        raise ValueError("no student to grade")
    refused = {s: name_problem(s) for s in students if name_problem(s)}
    if refused:
        raise ValueError("names that cannot go into a Slurm job: "
                         + "; ".join(f"{ascii(s)} {why}" for s, why in refused.items()))
    folder = Path(out) / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "students.txt").write_text("".join(f"{s}\n" for s in students), encoding="utf-8")
    py, sub, out_abs = shlex.quote(sys.executable), shlex.quote(str(Path(submissions).resolve())), Path(out).resolve()
    extra = " ".join(shlex.quote(a) for a in grade_args)
    header = ["#!/bin/bash", f"#SBATCH --cpus-per-task={cpus}", f"#SBATCH --mem={int(memory_gib * 1024)}M",
              f"#SBATCH --time={minutes}"] + ([f"#SBATCH --partition={partition}"] if partition else [])
    (folder / "grade_array.sbatch").write_text("\n".join(header + [
        "#SBATCH --job-name=labkit-grade",
        f"#SBATCH --array=0-{len(students) - 1}",
        f"#SBATCH --output={out_abs}/slurm/task-%a.log",
        "set -euo pipefail",
        f'NAME=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {shlex.quote(str(folder.resolve() / "students.txt"))})',
        '[ -n "$NAME" ] || { echo "no student on line $((SLURM_ARRAY_TASK_ID + 1)) of students.txt" >&2; exit 2; }',
        f'{py} -m labkit.grade {sub} --student="$NAME" --out={shlex.quote(str(out_abs / "parts"))}/"$NAME" '
        f"--workers {cpus} {extra}",
    ]) + "\n")
    (folder / "merge.sbatch").write_text("\n".join(
        ["#!/bin/bash", "#SBATCH --job-name=labkit-grade-merge", "#SBATCH --cpus-per-task=1", "#SBATCH --time=10",
         f"#SBATCH --output={out_abs}/slurm/merge.log"] + ([f"#SBATCH --partition={partition}"] if partition else [])
        + ["set -euo pipefail",
           f"{py} -m labkit.grade --merge {shlex.quote(str(out_abs / 'parts'))} --out {shlex.quote(str(out_abs))}"])
        + "\n")
    (folder / "submit.sh").write_text("\n".join([
        "#!/bin/sh", "# The array (one task per student), then the merge once every task has ended.", "set -e",
        f'cd {shlex.quote(str(folder.resolve()))}',
        "ARRAY=$(sbatch --parsable grade_array.sbatch)",
        'sbatch --dependency=afterany:"${ARRAY%%;*}" merge.sbatch',
        'echo "submitted array job $ARRAY and its merge"']) + "\n")
    return folder
