"""Student versions of the notebooks: `python -m labkit.exercises notebooks/ student/`.

Each region between `### BEGIN SOLUTION` and `### END SOLUTION` in a code cell is
replaced by `# YOUR CODE HERE` and `raise NotImplementedError()`, keeping its
indentation; outputs of cells that held a solution are cleared.  Everything else
-- the explanation, the kernel shown from labkit/kernels/, the check cell --
stays as it is, so a student's answer is graded by the same verdict.

Kernel exercises live beside the notebooks, in `exercises/*.cu`: each region between
`// BEGIN SOLUTION` and `// END SOLUTION` becomes `// YOUR CODE HERE` in the student's copy
(written to `student/exercises/`), which still compiles: the check then says which outputs the
missing code never wrote.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
CU_BEGIN = re.compile(r"^(\s*)// BEGIN SOLUTION\s*$")
CU_END = re.compile(r"^\s*// END SOLUTION\s*$")


def _strip(source: str, begin, end, placeholder, marker: str) -> tuple[str, int]:
    out, inside, n = [], False, 0
    for line in source.splitlines():
        m = begin.match(line)
        if m and not inside:
            out += [m.group(1) + p for p in placeholder]
            inside, n = True, n + 1
        elif inside and end.match(line):
            inside = False
        elif inside and begin.match(line):
            raise ValueError(f"a {marker} BEGIN SOLUTION region opens inside another")
        elif not inside:
            if end.match(line):
                raise ValueError(f"a {marker} END SOLUTION line has no BEGIN SOLUTION before it")
            out.append(line)
    if inside:
        raise ValueError(f"a {marker} BEGIN SOLUTION region has no {marker} END SOLUTION")
    return "\n".join(out), n


def strip_solutions(source: str) -> tuple[str, int]:
    """(the source with solution regions replaced, how many regions there were)."""
    return _strip(source, BEGIN, END, ["# YOUR CODE HERE", "raise NotImplementedError()"], "###")


def strip_cu_solutions(source: str) -> tuple[str, int]:
    """A kernel source with each `// BEGIN SOLUTION` .. `// END SOLUTION` region replaced by
    `// YOUR CODE HERE` (same indentation), and how many regions there were."""
    text, n = _strip(source, CU_BEGIN, CU_END, ["// YOUR CODE HERE"], "//")
    return text + ("\n" if source.endswith("\n") else ""), n


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


def student_kernel(src: Path, dst: Path) -> int:
    """Write the student's copy of a kernel exercise; the number of solution regions."""
    text, n = strip_cu_solutions(src.read_text())
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(text)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    a = ap.parse_args(argv)
    a.dst.mkdir(parents=True, exist_ok=True)
    for nb in sorted(a.src.glob("*.ipynb")):
        n = student_notebook(nb, a.dst / nb.name)
        print(f"{nb.name}: {n} exercise(s)")
    for cu in sorted((a.src / "exercises").glob("*.cu")):
        n = student_kernel(cu, a.dst / "exercises" / cu.name)
        print(f"exercises/{cu.name}: {n} region(s) to write")
    return 0


if __name__ == "__main__":
    sys.exit(main())
