"""Student versions of the notebooks: `python -m labkit.exercises notebooks/ student/`.

Each region between `### BEGIN SOLUTION` and `### END SOLUTION` in a code cell is
replaced by `# YOUR CODE HERE` and `raise NotImplementedError()`, keeping its
indentation; outputs of cells that held a solution are cleared.  Everything else
-- the explanation, the kernel shown from labkit/kernels/, the check cell --
stays as it is, so a student's answer is graded by the same verdict.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")


def strip_solutions(source: str) -> tuple[str, int]:
    """(the source with solution regions replaced, how many regions there were)."""
    out, inside, n = [], False, 0
    for line in source.splitlines():
        m = BEGIN.match(line)
        if m and not inside:
            indent = m.group(1)
            out += [f"{indent}# YOUR CODE HERE", f"{indent}raise NotImplementedError()"]
            inside, n = True, n + 1
        elif inside and END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("a ### BEGIN SOLUTION region has no ### END SOLUTION")
    return "\n".join(out), n


def student_notebook(src: Path, dst: Path) -> int:
    import nbformat
    nb = nbformat.read(src, as_version=4)
    total = 0
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        new, n = strip_solutions(cell.source)
        if n:
            cell.source, cell.outputs, cell.execution_count = new, [], None
            total += n
    nbformat.write(nb, dst)
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    a = ap.parse_args(argv)
    a.dst.mkdir(parents=True, exist_ok=True)
    for nb in sorted(a.src.glob("*.ipynb")):
        n = student_notebook(nb, a.dst / nb.name)
        print(f"{nb.name}: {n} exercise(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
