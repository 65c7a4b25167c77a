"""The package's dependencies point one way: kernels -> backends -> shapes/reference/data -> loader,
device_query, checks, tuned -> autotune -> ops -> layers, models, pipeline -> peers -> studies (labkit.ladder) -> CLIs.

Every import counts, those inside functions too (a cycle hidden behind one is still a cycle).  The
test reads the source (ast), so it needs neither a GPU nor an import of anything.
"""
from __future__ import annotations

import ast
import importlib.util
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.check

PACKAGE = Path(__file__).resolve().parent.parent / "labkit"

# Each module's layer; a module may import only from layers at or below its own, and modules of one
# layer must not form a cycle.  The most specific prefix decides.
LAYERS = {
    "labkit.errors": 0, "labkit.backends.limits": 0, "labkit.backends.clock": 0, "labkit.results": 0,
    "labkit.verdict": 0,
    "labkit.backends": 1,
    "labkit.shapes": 2, "labkit.reference": 2, "labkit.data": 2,
    "labkit.loader": 3, "labkit.device_query": 3, "labkit.checks": 3, "labkit.tuned": 3, "labkit.kernels": 3,
    "labkit.measure": 4, "labkit.plots": 4, "labkit.autotune": 4,
    "labkit.ops": 5,
    "labkit.layers": 6, "labkit.models": 6, "labkit.pipeline": 6,
    "labkit.peers": 7,
    "labkit.ladder": 8,
    # the face; the course (kernel checks, student copies, the grader, the series) and its command
    "labkit": 9, "labkit.course": 9, "labkit.grade": 9,
}
# measure and plots are generic: they may use nothing that knows about labkit's kernels.
GENERIC = {"labkit.measure", "labkit.plots"}
GENERIC_MAY_USE = ("labkit.errors", "labkit.backends", "labkit.device_query", "labkit.results", "labkit.measure")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len, default=None)
    if best is None:
        raise AssertionError(f"{module} has no layer in tests/test_architecture.py: give it one")
    return LAYERS[best]


def imports() -> tuple[dict[str, Path], list[tuple[str, str, int, list[str]]]]:
    """(modules, edges): every labkit import as (importer, imported module, line, names imported)."""
    modules = {module_name(f): f for f in sorted(PACKAGE.rglob("*.py"))}
    edges = []
    for name, f in modules.items():
        pkg = f.name == "__init__.py"
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [(a.name, []) for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = name.split(".") if pkg else name.split(".")[:-1]
                if node.level:
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    targets.append((sub, []) if sub in modules else (mod, [a.name]))
            for t, names in targets:
                while t and t not in modules:
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges.append((name, t, node.lineno, names))
    return modules, edges


def cycles(nodes, edges) -> list[list[str]]:
    adj = defaultdict(set)
    for a, b, *_ in edges:
        adj[a].add(b)
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in adj[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_not_even_through_imports_inside_functions():
    modules, edges = imports()
    assert not cycles(modules, edges)


def test_every_import_points_down_the_layers():
    _, edges = imports()
    upward = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)}) at line {line}"
              for a, b, line, _ in edges if layer(b) > layer(a)]
    assert not upward, "\n".join(upward)


def test_measure_and_plots_stay_generic():
    _, edges = imports()
    bad = [f"{a} imports {b} at line {line}" for a, b, line, _ in edges
           if any(a == g or a.startswith(g + ".") for g in GENERIC)
           and not any(b == m or b.startswith(m + ".") for m in GENERIC_MAY_USE)]
    assert not bad, "\n".join(bad)


def test_no_private_name_is_imported_across_modules():
    _, edges = imports()
    private = [f"{a}:{line} imports {', '.join(n for n in names if n.startswith('_'))} from {b}"
               for a, b, line, names in edges if any(n.startswith("_") and not n.startswith("__") for n in names)]
    assert not private, "\n".join(private)


def test_the_finder_finds_cycles_and_upward_imports():
    assert cycles(["a", "b", "c"], [("a", "b", 1, []), ("b", "a", 2, []), ("b", "c", 3, [])]) == [["a", "b"]]
    assert layer("labkit.ops.gemm") == 5 and layer("labkit.backends.cpu.module") == 1 and layer("labkit") == 9
    assert layer("labkit.course.grading.slurm") == 9 and layer("labkit.verdict") == 0
    with pytest.raises(AssertionError, match="has no layer"):
        layer("elsewhere.module")


def test_exceptions_and_limits_live_in_one_place():
    # Each exception class is defined once (labkit.errors); the old homes hand out the same class.
    from labkit import errors
    from labkit.backends import cpu, kernel_source
    from labkit.data import IDXFormatError
    from labkit.models.alexnet_weights import WeightFileError
    assert cpu.KernelMemoryError is errors.KernelMemoryError and kernel_source.ConstantMemoryError is \
        errors.ConstantMemoryError and IDXFormatError is errors.IDXFormatError and WeightFileError is \
        errors.WeightFileError
    defined = [f"{module_name(f)}: class {n.name}" for f in PACKAGE.rglob("*.py") if f.name != "errors.py"
               for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ClassDef)
               and any(isinstance(b, ast.Name) and b.id in ("Exception", "RuntimeError", "ValueError", "TypeError")
                       for b in n.bases)]
    assert not defined, defined
    # 48 KiB and 64 KiB are written once, in labkit.backends.limits.
    literal = [f"{module_name(f)}:{n.lineno}" for f in PACKAGE.rglob("*.py") if f.name != "limits.py"
               for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.BinOp)
               and isinstance(n.op, ast.Mult) and isinstance(n.left, ast.Constant) and n.left.value in (48, 64, 227)
               and isinstance(n.right, ast.Constant) and n.right.value == 1024]
    assert not literal, literal


def test_no_module_only_keeps_an_old_import_path():
    # Every module holds code of its own: nothing forwards names to a new home (the project keeps no
    # old import paths), and the package's face lists no module that is not there.
    import labkit
    for f in PACKAGE.rglob("*.py"):
        src = f.read_text()
        assert "forwarding(" not in src and "import_module(home" not in src, f"{f} forwards old names"
    for name in labkit.SUBMODULES:
        assert importlib.util.find_spec(f"labkit.{name}") is not None, name


def test_the_face_shows_the_package():
    import labkit
    shown = dir(labkit)
    for name in ("ladder", "layers", "models", "measure", "ops", "conv2d", "RUNGS", "device", "load", "xp"):
        assert name in shown, name
    assert "annotations" not in shown
    assert [r.name for r in labkit.RUNGS] == ["naive", "tiled", "constant", "tuned", "unrolled", "implicit",
                                             "implicit_tf32"]
    assert all(r.kernel and r.idea and r.notebook for r in labkit.RUNGS)


# --- the tests -----------------------------------------------------------------------------------
# A test module imports no other test module (nor conftest.py): shared helpers live in
# tests/helpers.py, so each test file runs, moves or goes on its own, and importing one never runs
# another's module-level code (its skips, its draws, its imports).
TESTS = Path(__file__).resolve().parent
SHARED = "helpers"


def local_imports(source: str, local: set[str], where: str = "<source>") -> list[str]:
    """Each import in ``source`` (inside functions too) of a module of the tests folder but helpers."""
    found = []
    for node in ast.walk(ast.parse(source, where)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "tests":                  # tests.test_x, as if the folder were a package
                top = name.split(".")[1] if "." in name else top
            if name.startswith(".") or top in local or top.startswith("test_"):
                found.append(f"{where}:{node.lineno} imports {name}")
    return found


def test_no_test_module_imports_another():
    files = sorted(TESTS.rglob("*.py"))
    local = {f.stem for f in files} - {SHARED} | {"conftest", "support"}
    found = [hit for f in files
             for hit in local_imports(f.read_text(), local, str(f.relative_to(TESTS.parent)))]
    assert not found, "move what they use into tests/helpers.py:\n" + "\n".join(found)


def test_the_finder_finds_imports_of_test_modules():
    local = {"conftest", "support", "test_a"}
    src = ("import numpy\nfrom helpers import f32\nfrom test_a import run\n"
           "def test_x():\n    import conftest\n    from tests.test_b import y\n    from . import support\n")
    assert local_imports(src, local) == ["<source>:3 imports test_a", "<source>:5 imports conftest",
                                         "<source>:6 imports tests.test_b", "<source>:7 imports ."]
