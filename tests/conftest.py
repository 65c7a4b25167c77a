"""What every test module of tests/ shares: the markers, and the folder's helpers on sys.path.

Markers:
    gpu     the test needs the GPU backend (CuPy seeing a device, and LABKIT_BACKEND not forcing the CPU
            executor).  Elsewhere it is skipped, saying why: the CPU executor runs the rest.
    check   the test is in ``make check``, the fast subset that still loads every module of labkit
            (tests/test_check_selection.py keeps it so).

The plain helper functions live in helpers.py (``from helpers import ...``); a test module never
imports another test module, nor this file.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# pytest puts a test file's folder on sys.path only in its default import mode ("prepend"), and
# tests/hostile/ gets its own folder; this one holds helpers.py for all of them.
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs the GPU backend; skipped, saying why, where CuPy sees no GPU")
    config.addinivalue_line("markers", "check: part of `make check`, the fast subset that loads every labkit module")


def gpu_missing() -> str | None:
    """None where the GPU backend runs; else why a test marked ``gpu`` cannot run here."""
    from labkit import backends
    why = backends.cuda_unavailable()
    if why is not None:
        return f"needs a GPU, and {why}: run on a GPU machine"
    if backends.current() != "cuda":
        return f"needs the GPU backend: {backends.ENV_VAR}={os.environ.get(backends.ENV_VAR)} forces the CPU executor"
    return None


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("gpu")]
    why = gpu_missing() if marked else None     # CuPy is asked only when a collected test needs it
    if why is not None:
        skip = pytest.mark.skip(reason=why)
        for item in marked:
            item.add_marker(skip)
