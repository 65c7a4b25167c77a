"""Which earlier cells an exercise needs (labkit.course.grading.cell_names): a name read is looked up back
to the cell that binds it, through the cells that change it on the way; names local to a function,
a lambda or a comprehension, and modules' methods, pull in nothing."""
from __future__ import annotations

import pytest

from labkit.course.grading.cell_names import cell_names, needed_cells

pytestmark = pytest.mark.check


def test_binds_changes_and_reads():
    n = cell_names("import numpy as np\nx = np.zeros(3)\nx[0] = y\nnet.load(w)\n%matplotlib inline\n"
                   "def f(a):\n    return a + z\nfor i in range(3):\n    total += i\n"
                   "sq = [v * v for v in vals]\nk = lambda t: t * scale\n")
    assert {"np", "x", "f", "i", "sq", "k"} <= n.binds
    assert n.changes == {"x", "net", "total"}           # np.zeros(...) changes no module
    assert n.reads == {"y", "net", "w", "z", "total", "vals", "scale"}


def test_a_name_bound_before_it_is_read_in_the_same_cell_needs_no_earlier_cell():
    assert "x" not in cell_names("x = 1\nprint(x)\n").reads
    assert "x" in cell_names("x = x + 1\n").reads      # the right-hand side runs first


def test_needed_cells_follow_the_names_back():
    cells = ["import numpy as np\nrng = np.random.default_rng()",   # 0
             "x = rng.standard_normal(5)",                           # 1
             "slow = expensive()",                                   # 2  needed by nobody
             "x[0] = 7",                                             # 3  changes x
             "y = 3",                                                # 4
             "x = np.ones(2)\ny = x * 2",                            # 5  binds x and y again
             "def solution(a):\n    return a + y",                  # 6  the exercise
             "print(solution(x))"]                                   # 7  its check
    assert needed_cells(cells, [6, 7]) == [0, 5]
    assert needed_cells(cells[:5] + ["def solution(a):\n    return a + x", "print(solution(1))"], [5, 6]) == [0, 1, 3]
