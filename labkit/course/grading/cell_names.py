"""Which earlier cells a notebook cell needs: the names a cell binds, changes and reads, and the
smallest run of earlier cells that sets up what a cell reads.

    deps = needed_cells(sources, [7, 8])      # indices of the cells to run before cells 7 and 8

A name a cell reads is looked up backwards from that cell: cells that *change* it on the way
(``x[...] = ...``, ``x.attr = ...``, a top-level call ``x.method(...)``) are taken, up to and
including the cell that *binds* it (an assignment, an import, a ``def``); each taken cell's own
reads are resolved the same way, from where that cell stands.  IPython syntax (``%magic``, ``!cmd``)
is turned into Python first, as IPython itself does.
"""
from __future__ import annotations

import ast
import builtins
import symtable
from dataclasses import dataclass, field

from IPython.core.inputtransformer2 import TransformerManager

__all__ = ["CellNames", "cell_names", "needed_cells"]

_TRANSFORM = TransformerManager()
_BUILTINS = frozenset(dir(builtins)) | {"get_ipython", "display"}     # IPython's, in every notebook


@dataclass
class CellNames:
    binds: set = field(default_factory=set)     # names a top-level statement assigns, imports or defines
    changes: set = field(default_factory=set)   # names whose object a top-level statement changes in place
    reads: set = field(default_factory=set)     # names read before the cell binds them (function bodies too)
    imports: set = field(default_factory=set)   # names bound by an import (modules: calls on them change nothing)


def _root(node) -> str | None:
    """The name at the root of ``a.b[c].d``, or None."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _targets(node, out: CellNames) -> None:
    if isinstance(node, ast.Name):
        out.binds.add(node.id)
    elif isinstance(node, (ast.Tuple, ast.List)):
        for elt in node.elts:
            _targets(elt, out)
    elif isinstance(node, ast.Starred):
        _targets(node.value, out)
    else:
        root = _root(node)
        if root:
            out.changes.add(root)


def _header_targets(stmt, out: CellNames) -> None:
    """The names a for loop's or a with statement's header binds (nothing for other statements)."""
    if isinstance(stmt, (ast.For, ast.AsyncFor)):
        _targets(stmt.target, out)
    elif isinstance(stmt, (ast.With, ast.AsyncWith)):
        for item in stmt.items:
            if item.optional_vars is not None:
                _targets(item.optional_vars, out)


def _top_level(stmt, out: CellNames) -> None:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.binds.add(stmt.name)
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        for a in stmt.names:
            if a.name != "*":
                out.binds.add(a.asname or a.name.split(".")[0])
                out.imports.add(a.asname or a.name.split(".")[0])
    elif isinstance(stmt, ast.Assign):
        for t in stmt.targets:
            _targets(t, out)
    elif isinstance(stmt, (ast.AugAssign, ast.AnnAssign)):
        _targets(stmt.target, out)
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
            out.changes.add(stmt.target.id)
    elif isinstance(stmt, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
        _header_targets(stmt, out)
    elif isinstance(stmt, ast.Delete):
        for t in stmt.targets:
            _targets(t, out)
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        root = _root(stmt.value.func)          # obj.method(...) may change obj
        if root and isinstance(stmt.value.func, ast.Attribute):
            out.changes.add(root)
    # Statements nested in blocks (if/for/with/try) bind at top level too.
    for child in ast.iter_child_nodes(stmt):
        if isinstance(child, ast.stmt) and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                  ast.ClassDef)):
            _top_level(child, out)
    if isinstance(stmt, ast.stmt):
        for node in ast.walk(stmt):
            if isinstance(node, ast.NamedExpr):
                out.binds.add(node.target.id)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _reads_here(node, out: set) -> None:
    """Names ``node`` reads in its own scope: not inside a def, lambda, class or comprehension body
    (their free names come from symtable), but their defaults, decorators and first iterable, which
    run here."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        out.add(node.id)
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        out.add(node.target.id)                 # x += 1 reads x
    if isinstance(node, _SCOPES):
        outer = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            outer += node.args.defaults + [d for d in node.args.kw_defaults if d is not None]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            outer += node.decorator_list
        if isinstance(node, ast.ClassDef):
            outer += node.bases
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            outer.append(node.generators[0].iter)
        for child in outer:
            _reads_here(child, out)
        return
    for child in ast.iter_child_nodes(node):
        _reads_here(child, out)


def _free_in_nested_scopes(table) -> set:
    """Names the nested scopes (defs, lambdas, comprehensions) of ``table`` read as globals."""
    names = set()
    for child in table.get_children():
        names |= {s.get_name() for s in child.get_symbols() if s.is_referenced() and s.is_global()}
        names |= _free_in_nested_scopes(child)
    return names


def cell_names(source: str) -> CellNames:
    """The names ``source`` (a code cell, IPython syntax allowed) binds, changes and reads."""
    code = _TRANSFORM.transform_cell(source)
    tree = ast.parse(code)
    out = CellNames()
    for stmt in tree.body:
        here: set = set()
        _reads_here(stmt, here)
        header = CellNames()                   # a for loop's or a with's own names, bound before its body
        _header_targets(stmt, header)
        out.reads |= here - out.binds - header.binds   # read before this cell binds it: an earlier cell's
        _top_level(stmt, out)
    # Function bodies run when called, after the cell: a name the cell binds is the cell's own.
    out.reads |= _free_in_nested_scopes(symtable.symtable(code, "<cell>", "exec")) - out.binds
    out.reads -= _BUILTINS - out.binds
    out.changes -= out.imports
    return out


def needed_cells(sources: list[str], targets: list[int]) -> list[int]:
    """Indices (ascending) of the cells before ``min(targets)`` that cells ``targets`` need, by the
    rule of the module's docstring; ``sources`` are the notebook's code cells in order."""
    names = [cell_names(s) for s in sources]
    modules = set().union(*(n.imports for n in names))
    for n in names:
        n.changes -= modules
    first = min(targets)
    taken: set[int] = set()
    todo = [(t, n) for t in targets for n in names[t].reads]
    seen: set[tuple[int, str]] = set()
    while todo:
        at, name = todo.pop()
        if (at, name) in seen:
            continue
        seen.add((at, name))
        for j in range(min(at, first) - 1, -1, -1):
            if name in names[j].binds or name in names[j].changes:
                if j not in taken:
                    taken.add(j)
                    todo += [(j, n) for n in names[j].reads]
                if name in names[j].binds and name not in names[j].changes:
                    break
    return sorted(taken)
