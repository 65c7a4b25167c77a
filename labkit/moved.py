"""Old import paths, kept so that notebooks written for an earlier labkit still run.

Before the ops and their studies had homes of their own, ``labkit.conv``, ``labkit.gemm``,
``labkit.implicit``, ``labkit.unroll`` and ``labkit.tuning`` held both.  Each of those modules is
now a table of where its names went (its docstring lists them); a name is looked up in its new home
when it is used.  New code imports from the new homes.
"""
from __future__ import annotations

import importlib
from typing import Callable


def forwarding(old: str, home: str, elsewhere: dict[str, str]) -> tuple[Callable, Callable]:
    """(__getattr__, __dir__) for the old module ``old``: a name listed in ``elsewhere``
    ("module:name") comes from there, any other public name from the module ``home``."""
    def where(name: str) -> tuple[str, str]:
        if name in elsewhere:
            module, _, new = elsewhere[name].partition(":")
            return module, new or name
        return home, name

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        module, new = where(name)
        try:
            return getattr(importlib.import_module(module), new)
        except AttributeError:
            raise AttributeError(f"module {old!r} has no attribute {name!r} (its names moved to {home} "
                                 "and labkit.ladder)") from None

    def __dir__() -> list[str]:
        module = importlib.import_module(home)
        public = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
        return sorted(set(public) | set(elsewhere))

    return __getattr__, __dir__
