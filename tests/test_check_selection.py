"""`make check` (pytest -m check): the tests marked ``check``, a fast subset that still loads every
module of labkit.

The test reads the marked tests (ast): the imports they run (the module's own, its helpers' and
fixtures', and those inside each marked test), ``labkit.x`` attribute paths and ``-m labkit.x``
commands.  A fresh interpreter imports those modules, and with them whatever they import; a module
of labkit left out is one that `make check` never touches: mark a fast test that uses it.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.check

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "labkit"


def labkit_modules() -> set[str]:
    found = set()
    for f in PACKAGE.rglob("*.py"):
        parts = list(f.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found.add(".".join(parts))
    return found


def is_check_mark(node: ast.AST) -> bool:
    """``pytest.mark.check``, called or not."""
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr == "check" and ast.unparse(node.value) == "pytest.mark"


def mentions_check(node: ast.AST) -> bool:
    return any(is_check_mark(n) for n in ast.walk(node))


def checked_code(source: str, where: str = "<source>") -> list[ast.AST]:
    """The code of ``source`` that `make check` runs: nothing if no test of it is marked; else all but
    its unmarked tests (the marked tests, and the imports, helpers and fixtures they may use).

    A test is marked by a decorator naming pytest.mark.check (a parametrize's pytest.param marks
    included) or by the module's ``pytestmark``; the mark anywhere else is refused, as this reading
    would not see it."""
    tree = ast.parse(source, where)
    whole = any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)
                and mentions_check(s.value) for s in tree.body)
    kept, marked = [], whole
    for s in tree.body:
        if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name.lower().startswith("test"):
            if whole or any(mentions_check(d) for d in s.decorator_list):
                kept.append(s)
                marked = True
            continue
        if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
            stray = [n for d in s.decorator_list for n in ast.walk(d) if is_check_mark(n)]
            stray += [n for b in s.body for n in ast.walk(b) if is_check_mark(n)]
        elif isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets):
            stray = []
        else:
            stray = [n for n in ast.walk(s) if is_check_mark(n)]
        if stray:
            raise AssertionError(f"{where}:{stray[0].lineno}: pytest.mark.check outside a test's decorators "
                                 "or pytestmark: tests/test_check_selection.py would not see it")
        kept.append(s)
    return kept if marked else []


def named_modules(code: list[ast.AST], modules: set[str]) -> set[str]:
    """The modules of labkit that ``code`` imports or names (``labkit.a.b.f`` names labkit.a.b)."""
    paths = []
    for node in (n for c in code for n in ast.walk(c)):
        if isinstance(node, ast.Import):
            paths += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            paths += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            parts = []
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name):
                paths.append(".".join([node.id] + parts[::-1]))
        elif isinstance(node, (ast.List, ast.Tuple)):              # a command: [python, "-m", "labkit.x", ...]
            items = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            paths += [m for flag, m in zip(items, items[1:]) if flag == "-m" and isinstance(m, str)]
    found = set()
    for p in paths:
        while p and p not in modules:
            p = p.rpartition(".")[0]
        if p:
            found.add(p)
    return found


def loaded_by_importing(names: set[str]) -> set[str]:
    """The labkit modules a fresh interpreter holds after importing ``names``."""
    code = ("import importlib, sys\n"
            "for m in sys.argv[1:]:\n    importlib.import_module(m)\n"
            "print(*sorted(m for m in sys.modules if m.split('.')[0] == 'labkit'))")
    out = subprocess.run([sys.executable, "-c", code, *sorted(names)], capture_output=True, text=True, timeout=120,
                         cwd=PACKAGE.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(out.stdout.split())


def test_make_check_loads_every_module_of_labkit():
    modules = labkit_modules()
    named, files = set(), []
    for f in sorted(TESTS.rglob("test_*.py")):
        code = checked_code(f.read_text(), str(f.relative_to(TESTS.parent)))
        if code:
            files.append(f.name)
            named |= named_modules(code, modules)
    assert files, "no test is marked check"
    missing = sorted(modules - loaded_by_importing(named))
    assert not missing, ("no test marked check (make check) loads these modules of labkit; mark a fast "
                         "test that uses each:\n" + "\n".join(missing))


def test_the_reader_sees_marks_imports_and_commands():
    modules = {"labkit", "labkit.a", "labkit.a.b", "labkit.c", "labkit.d", "labkit.e", "labkit.f"}
    src = ("import pytest\nfrom labkit.a import b\n"
           "def helper():\n    import labkit.c\n"
           "@pytest.mark.check\ndef test_one():\n    labkit.d.run()\n"
           "@pytest.mark.parametrize('x', [1, pytest.param(2, marks=pytest.mark.check)])\n"
           "def test_two(x):\n    subprocess.run([python, '-m', 'labkit.e'])\n"
           "def test_unmarked():\n    import labkit.f\n")
    found = named_modules(checked_code(src), modules)
    assert found == {"labkit.a", "labkit.a.b", "labkit.c", "labkit.d", "labkit.e"}      # not labkit.f
    assert checked_code(src.replace("pytest.mark.check", "pytest.mark.slow")) == []
    whole = named_modules(checked_code("import pytest\npytestmark = [pytest.mark.check]\n" + src), modules)
    assert "labkit.f" in whole
    with pytest.raises(AssertionError, match="outside a test's decorators"):
        checked_code("import pytest\nCASES = [pytest.param(1, marks=pytest.mark.check)]\n")
