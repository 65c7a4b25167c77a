"""`python -m labkit.grade`: the grader's command (labkit.course.grade holds it; see its docstring)."""
from __future__ import annotations

import sys

from .course.grade import main

if __name__ == "__main__":
    sys.exit(main())
