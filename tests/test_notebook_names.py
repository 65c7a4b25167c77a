"""Every labkit name the notebooks' code cells use resolves: a rename or a move fails here, not in a
student's notebook.

Each code cell is parsed (not run).  Names bound by ``import labkit...`` and ``from labkit... import``
are followed through attribute chains (``labkit.kernels.excerpt``, ``G.gemm`` after
``from labkit import gemm as G``), and every chain is resolved by importing the longest module
prefix and looking up the rest as attributes.
"""
from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

from labkit.course.series import notebooks as series_notebooks

NOTEBOOKS = series_notebooks(Path(__file__).resolve().parent.parent / "notebooks")


def _code(cell_source: str) -> str:
    # IPython lines (magics, shell escapes) are not Python: blank them, keeping line numbers.
    return "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in cell_source.splitlines())


def _chain(node: ast.AST) -> list[str] | None:
    """['a', 'b', 'c'] for the expression a.b.c; None if it is not a plain dotted name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts[::-1]
    return None


def labkit_names(source: str) -> set[str]:
    """The dotted labkit names a notebook's code uses (imports, and attribute chains on them)."""
    bound: dict[str, str] = {}    # local name -> the labkit name it stands for
    used: set[str] = set()
    trees = [ast.parse(_code(s)) for s in source]
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "labkit" or a.name.startswith("labkit."):
                        used.add(a.name)
                        if a.asname:
                            bound[a.asname] = a.name
                        else:
                            bound["labkit"] = "labkit"
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    (node.module == "labkit" or node.module.startswith("labkit.")):
                for a in node.names:
                    full = f"{node.module}.{a.name}"
                    used.add(full)
                    bound[a.asname or a.name] = full
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.Attribute, ast.Name)):
                parts = _chain(node)
                if parts and parts[0] in bound:
                    used.add(".".join([bound[parts[0]]] + parts[1:]))
    return used


def resolve(name: str):
    """The object a dotted labkit name stands for (AttributeError or ImportError if it is gone)."""
    parts = name.split(".")
    obj, i = None, len(parts)
    while i > 0:
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError as exc:
            if exc.name is None or not ".".join(parts[:i]).startswith(exc.name):
                raise
            i -= 1
    for attr in parts[i:]:
        obj = getattr(obj, attr)
    return obj


def _notebook_code(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.check
def test_the_finder_sees_what_notebooks_write():
    src = ["import labkit\nfrom labkit.ops import gemm as G\nfrom labkit import measure\nfrom labkit.models import fashion_mnist as fm\n",
           "y = G.gemm(a, b)\nt = measure.time_fn(f)\nprint(labkit.kernels.excerpt('x'))\n%timeit fm.FashionNet\n"
           "z = labkit.device().label\n"]
    names = labkit_names(src)
    assert {"labkit", "labkit.ops.gemm", "labkit.ops.gemm.gemm", "labkit.measure.time_fn", "labkit.kernels.excerpt",
            "labkit.models.fashion_mnist", "labkit.device"} <= names
    assert "labkit.models.fashion_mnist.FashionNet" not in names   # a magic line is not code
    with pytest.raises(AttributeError):
        resolve("labkit.no_such_name")
    with pytest.raises(AttributeError):
        resolve("labkit.measure.no_such_function")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_labkit_name_of_the_notebook_resolves(path):
    names = labkit_names(_notebook_code(path))
    assert names, f"{path.name} uses no labkit name: the finder is broken"
    missing = {}
    for name in sorted(names):
        try:
            resolve(name)
        except (AttributeError, ImportError) as exc:
            missing[name] = f"{type(exc).__name__}: {exc}"
    assert not missing, f"{path.name} uses labkit names that do not resolve: {missing}"
    private = [n for n in names if any(p.startswith("_") and not p.startswith("__") for p in n.split("."))]
    assert not private, f"{path.name} uses private labkit names (an implementation detail, not an API): {private}"
